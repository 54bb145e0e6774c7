"""Acknowledgements: each shipment's Globus Compute id, recorded off the caller's path.

The SDK's ``Executor.submit`` returns a future at once and queues the task; its submitter
thread batches queued tasks (up to 128 per request, one request per shape) under the SDK's
own client-side rate limit, and sets ``task_id`` on each future once the service accepted
the batch. The SDK offers no notification for that, so :class:`Acks` keeps the futures
still unacknowledged and one thread looks at them every few milliseconds (in memory, no
request), calling each one's ``on_ack`` once: with the id, or with ``None`` when the future
ended without one (refused before any acknowledgement). Nobody waits on it: ``submit_task``
returns once the task is durably recorded, and shipping goes on behind it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger(__name__)

OnAck = Callable[[str | None], None]

LOOK_EVERY_S = 0.002


class Acks:
    """The futures waiting for their Globus Compute id, and the thread that sees them get it."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Future[Any], OnAck]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, fut: Future[Any], on_ack: OnAck) -> None:
        """Call ``on_ack`` once ``fut`` has its id (at once if it has it already)."""
        tid = getattr(fut, "task_id", None)
        if tid is not None:
            self._call(on_ack, str(tid))
            return
        with self._lock:
            self._pending[id(fut)] = (fut, on_ack)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="acks")
                self._thread.start()
        self._wake.set()

    def waiting(self) -> int:
        with self._lock:
            return len(self._pending)

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait()
            with self._lock:
                items = list(self._pending.items())
            done: list[tuple[int, OnAck, str | None]] = []
            for key, (fut, on_ack) in items:
                tid = getattr(fut, "task_id", None)
                if tid is not None:
                    done.append((key, on_ack, str(tid)))
                elif fut.done():
                    # ended without an id; it may still get one (the SDK sets the id before
                    # a result can come back), so look once more at its id
                    tid = getattr(fut, "task_id", None)
                    done.append((key, on_ack, None if tid is None else str(tid)))
            with self._lock:
                for key, _, _ in done:
                    self._pending.pop(key, None)
                if not self._pending:
                    self._wake.clear()
            for _, on_ack, tid in done:
                if self._closed:
                    return
                self._call(on_ack, tid)
            if not done:
                time.sleep(LOOK_EVERY_S)

    @staticmethod
    def _call(on_ack: OnAck, tid: str | None) -> None:
        try:
            on_ack(tid)
        except Exception:
            logger.exception("recording an acknowledgement failed")

    def drain(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until every watched future has its id or ended:
        a durable coordinator closing records what the SDK still sends. False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.waiting():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop looking: no ``on_ack`` is called after this returns (one in progress is
        waited for, at most ``timeout_s``)."""
        self._closed = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
