"""What the Globus Compute service keeps for each endpoint: its liveness and the tasks it
has not delivered yet.

The real service accepts a task for an offline endpoint (status ``waiting-for-ep``) and
delivers it when the endpoint connects again; it knows an endpoint is there by its
heartbeats (every ``heartbeat_period``, 30 s by default), and shows an endpoint offline
when they stop. :class:`EndpointLink` is that, for one endpoint daemon: its connection
(:class:`~federation.endpoint.connection.EndpointConnection`), the age of the last
message heard on it, and a queue of undelivered submissions, forwarded oldest first by
one thread per endpoint. A queued task leaves the queue only once the daemon has taken it
(recorded it), so nothing is lost if forwarding fails half way; a resend is harmless (the
daemon ignores a task it already has).

The daemon's socket has no "came back" signal, so while the endpoint is away the thread
tries to reconnect with a backoff (``first_retry_s`` doubling to ``max_retry_s``; a try is
a ``stat`` of the socket path while the daemon is down). While connected, it sleeps until
a task is queued or the connection closes: no polling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from federation.core.errors import SiteUnavailableError
from federation.endpoint import protocol
from federation.endpoint.connection import EndpointConnection, EventHandler

logger = logging.getLogger(__name__)

MISSED_HEARTBEATS = 3
"""Heartbeat periods of silence after which the service shows an endpoint offline."""


class EndpointLink:
    """One endpoint as the service sees it: connection, heartbeats, undelivered tasks.

    ``on_back`` runs on the link's thread after each (re)connection, before queued tasks
    are forwarded (the service settles the tasks the endpoint already held);
    ``on_delivered(task_id)`` after the daemon took a queued task.
    """

    def __init__(
        self,
        site: str,
        run_dir: Path,
        on_event: EventHandler,
        *,
        on_back: Callable[[], None],
        on_delivered: Callable[[str], None],
        first_retry_s: float = 0.05,
        max_retry_s: float = 1.0,
        forward_timeout_s: float = 30.0,
    ) -> None:
        self.site = site
        self._on_event = on_event
        self._on_back = on_back
        self._on_delivered = on_delivered
        self._first, self._max = first_retry_s, max_retry_s
        self._forward_timeout_s = forward_timeout_s
        self.conn = EndpointConnection(site, run_dir, self._event, self._lost)
        self.report: dict[str, Any] = {}
        """The last heartbeat's status report (kept while the endpoint is away)."""
        self._held: deque[protocol.Message] = deque()
        self._sending: protocol.Message | None = None  # the queued task being forwarded
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._tried = threading.Event()  # the first connection attempt is over
        self._seen_generation = 0
        self.delivered = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"link-{site}")

    def start(self, wait_s: float = 5.0) -> None:
        """Start the link; wait (at most ``wait_s``) until the first connection attempt
        is over and, if it connected, its first heartbeat arrived."""
        self._thread.start()
        deadline = time.monotonic() + wait_s
        if self._tried.wait(wait_s) and self.conn.connected:
            while not self.report and time.monotonic() < deadline and self.conn.connected:
                time.sleep(0.01)

    # --- liveness ------------------------------------------------------------------------
    @property
    def period_s(self) -> float:
        period = self.report.get("period_s")
        return float(period) if period else protocol.heartbeat_period_s()

    def heard_age_s(self) -> float | None:
        last = self.conn.last_heard
        return None if last is None else time.monotonic() - last

    def online(self) -> bool:
        """Connected, and heard from within ``MISSED_HEARTBEATS`` heartbeat periods."""
        age = self.heard_age_s()
        return self.conn.connected and age is not None and age <= MISSED_HEARTBEATS * self.period_s

    # --- queue ---------------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def hold(self, msgs: list[protocol.Message]) -> None:
        """Queue daemon ``submit`` messages, to be forwarded in order."""
        with self._lock:
            self._held.extend(msgs)
        self._wake.set()

    def withdraw(self, task_id: str) -> bool:
        """Take an undelivered task out of the queue (False if it is not queued)."""
        with self._lock:
            for msg in self._held:
                if msg.get("task_id") == task_id and msg is not self._sending:
                    self._held.remove(msg)
                    return True
        return False

    def _forward(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                if not self._held:
                    return
                msg = self._sending = self._held[0]
            try:
                self.conn.request(msg, timeout_s=self._forward_timeout_s)
            except SiteUnavailableError as e:
                logger.info("site %s: task %s stays queued: %s", self.site, msg["task_id"], e)
                return
            finally:
                with self._lock:
                    self._sending = None
            with self._lock:  # taken: only now does it leave the queue (nothing lost)
                if self._held and self._held[0] is msg:
                    self._held.popleft()
                self.delivered += 1
            self._on_delivered(str(msg["task_id"]))

    # --- the link's thread -----------------------------------------------------------------
    def _run(self) -> None:
        wait = self._first
        while not self._closed.is_set():
            if not self.conn.connected:
                try:
                    self.conn.connect()
                except SiteUnavailableError:
                    self._tried.set()
                    self._closed.wait(wait)
                    wait = min(self._max, wait * 2)
                    continue
            self._tried.set()
            wait = self._first
            if self.conn.generation != self._seen_generation:  # (re)connected
                self._seen_generation = self.conn.generation
                try:
                    self._on_back()
                except Exception:
                    logger.exception("site %s: settling after reconnect failed", self.site)
            self._forward()
            if self.conn.connected and not self._closed.is_set():
                # Sleep until a task is queued or the connection drops; a task that could
                # not be forwarded while connected (a busy daemon) is retried after a beat.
                self._wake.wait(None if not len(self) else self._max)
                self._wake.clear()

    def _event(self, msg: protocol.Message) -> None:
        if msg.get("op") == "heartbeat":
            self.report = {k: v for k, v in msg.items() if k != "op"}
            return
        self._on_event(msg)

    def _lost(self) -> None:
        self._wake.set()  # the thread starts reconnecting

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self.conn.close()
