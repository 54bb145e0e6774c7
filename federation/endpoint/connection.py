"""Client side of a site endpoint's socket: requests with replies, and pushed events."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from pathlib import Path

from federation.core.errors import SiteUnavailableError
from federation.endpoint import protocol

logger = logging.getLogger(__name__)

EventHandler = Callable[[protocol.Message], None]


class EndpointConnection:
    """One authenticated connection to a site's endpoint daemon.

    Replies are matched to requests by id; every other message is an event handed to
    ``on_event`` on the reader thread. If the daemon goes away, pending requests fail with
    :class:`SiteUnavailableError` and the next request (or :meth:`connect`) reconnects.
    ``last_heard`` is when any message (reply, event or heartbeat) last arrived, and
    ``generation`` counts the connections made, so a watcher can tell a reconnect.
    """

    def __init__(
        self,
        site: str,
        run_dir: Path,
        on_event: EventHandler,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        self.site = site
        self.sock = run_dir / "endpoint.sock"
        self.key_path = run_dir / "endpoint.key"
        self.on_event = on_event
        self.on_closed = on_closed
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[protocol.Message]]] = {}
        self._closing = False
        self.last_heard: float | None = None
        """``time.monotonic()`` of the last message from the daemon (None: never)."""
        self.generation = 0

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def connect(self) -> None:
        """Connect and subscribe now, unless connected (raises SiteUnavailableError)."""
        with self._lock:
            self._connect()

    def _connect(self) -> Connection:
        if self._conn is not None:
            return self._conn
        if not self.sock.exists():
            raise SiteUnavailableError(
                f"site {self.site}: its endpoint is not running (no {self.sock.name}); "
                "run `federation sites up`"
            )
        try:
            conn = Client(
                str(self.sock), family="AF_UNIX", authkey=self.key_path.read_bytes().strip()
            )
        except (OSError, EOFError) as e:
            raise SiteUnavailableError(
                f"site {self.site}: cannot reach its endpoint ({e}); run `federation sites up`"
            ) from e
        self._conn = conn
        self.generation += 1
        threading.Thread(
            target=self._reader, args=(conn,), daemon=True, name=f"endpoint-{self.site}"
        ).start()
        protocol.send(conn, {"op": "subscribe", "req": 0})
        return conn

    def _reader(self, conn: Connection) -> None:
        while True:
            try:
                msg = protocol.recv(conn)
            except (EOFError, OSError, ValueError, TypeError):
                break  # closed (TypeError: closed under us by close() on another thread)
            self.last_heard = time.monotonic()
            if msg["op"] == "reply":
                slot = self._waiting.pop(int(msg.get("req") or 0), None)
                if slot is not None:
                    slot[1].append(msg)
                    slot[0].set()
                continue
            try:
                self.on_event(msg)
            except Exception:
                logger.exception("event handler failed for %s", msg.get("op"))
        with self._lock:
            if self._conn is conn:
                self._conn = None
        for ev, _ in list(self._waiting.values()):
            ev.set()  # wake waiters; they see no reply
        if self._closing:
            return  # closed by close(): nothing to report
        logger.warning("site %s: endpoint connection closed", self.site)
        if self.on_closed is not None:
            self.on_closed()

    def request(self, msg: protocol.Message, timeout_s: float = 30.0) -> protocol.Message:
        req = next(self._ids)
        ev = threading.Event()
        box: list[protocol.Message] = []
        self._waiting[req] = (ev, box)
        with self._lock:
            conn = self._connect()
            try:
                protocol.send(conn, {**msg, "req": req})
            except OSError as e:
                self._conn = None
                raise SiteUnavailableError(
                    f"site {self.site}: endpoint connection lost ({e})"
                ) from e
        if not ev.wait(timeout_s) or not box:
            self._waiting.pop(req, None)
            raise SiteUnavailableError(
                f"site {self.site}: endpoint did not answer {msg['op']!r} within {timeout_s:.0f} s"
            )
        reply = box[0]
        if reply.get("error"):
            raise SiteUnavailableError(
                f"site {self.site}: endpoint refused {msg['op']}: {reply['error']}"
            )
        return reply

    def close(self) -> None:
        self._closing = True
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def ask(run_dir: Path, msg: protocol.Message, timeout_s: float = 5.0) -> protocol.Message:
    """One request to the endpoint in ``run_dir`` on a connection of its own (no
    subscription), e.g. ``{"op": "ping"}`` for its status report; SiteUnavailableError if
    it does not answer within ``timeout_s`` (a stopped daemon blocks even the handshake)."""
    box: list[protocol.Message | BaseException] = []

    def _ask() -> None:
        try:
            conn = Client(
                str(run_dir / "endpoint.sock"),
                family="AF_UNIX",
                authkey=(run_dir / "endpoint.key").read_bytes().strip(),
            )
            try:
                protocol.send(conn, {**msg, "req": 1})
                while True:
                    reply = protocol.recv(conn)
                    if reply["op"] == "reply":
                        box.append(reply)
                        return
            finally:
                conn.close()
        except BaseException as e:
            box.append(e)

    t = threading.Thread(target=_ask, daemon=True, name="endpoint-ask")
    t.start()
    t.join(timeout_s)
    if not box:
        raise SiteUnavailableError(f"endpoint in {run_dir} did not answer within {timeout_s} s")
    if isinstance(box[0], BaseException):
        raise SiteUnavailableError(f"endpoint in {run_dir}: {box[0]}") from box[0]
    return box[0]
