"""Acknowledgements: each shipment's Globus Compute id, recorded off the caller's path.

The SDK's ``Executor.submit`` returns a future at once and queues the task; its submitter
thread batches queued tasks (up to 128 per request, one request per shape) under the SDK's
own client-side rate limit, and sets ``task_id`` on each future once the service accepted
the batch. The SDK offers no notification for that, so :class:`Acks` makes the setting of
``task_id`` itself the notification: a watched future's class becomes a subclass of its own
(:func:`_telling`) whose ``task_id`` is a property, stored where the SDK stores it, that
calls the future's ``on_ack`` once with the id, on the thread that set it. A future that
ends without an id (refused before any acknowledgement) calls ``on_ack(None)`` from its
done callback. Nothing polls and no thread of its own runs: ``submit_task`` returns once
the task is durably recorded, and shipping goes on behind it.

A future whose class cannot take the property (``__slots__``, an extension type, a
``task_id`` that is already a descriptor) is looked at by one thread, which backs off from
2 ms to 0.1 s while nothing changes (none of the SDK's or the stand-ins' futures is such).
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
"""The fallback looker's first interval; it doubles, up to :data:`LOOK_AT_MOST_S`, while
nothing it watches changes."""
LOOK_AT_MOST_S = 0.1

_CALLBACKS = "_federation_on_ack"
_TELLING: dict[type, type] = {}
_TELLING_LOCK = threading.Lock()


def _telling(cls: type) -> type | None:
    """The subclass of ``cls`` whose ``task_id`` calls back when set (None if ``cls``
    cannot be swapped for it safely)."""
    with _TELLING_LOCK:
        if cls in _TELLING:
            return _TELLING[cls]
        sub: type | None = None
        plain = not any(
            "__slots__" in vars(k) or isinstance(vars(k).get("task_id"), property)
            for k in cls.__mro__
            if k is not object
        )
        if plain and cls.__module__ != "builtins":

            def get(self: Any) -> Any:
                return self.__dict__.get("task_id")

            def set_(self: Any, value: Any) -> None:
                self.__dict__["task_id"] = value
                if value is not None:
                    _fire(self, str(value))

            sub = type(cls.__name__, (cls,), {"task_id": property(get, set_), "__slots__": ()})
            sub.__module__ = cls.__module__
        _TELLING[cls] = sub  # type: ignore[assignment]
        return sub


def _fire(fut: Any, tid: str | None) -> None:
    """Call the future's ``on_ack`` (once: whoever pops it calls it)."""
    with _TELLING_LOCK:
        calls = fut.__dict__.pop(_CALLBACKS, None)
    if calls is not None:
        calls(tid)


class Acks:
    """The futures waiting for their Globus Compute id; each tells when it gets it."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Future[Any], OnAck]] = {}
        self._looked: set[int] = set()  # pending futures the fallback looker watches
        self._calling = 0
        self._lock = threading.Condition()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, fut: Future[Any], on_ack: OnAck) -> None:
        """Call ``on_ack`` once ``fut`` has its id (at once if it has it already)."""
        tid = getattr(fut, "task_id", None)
        if tid is not None:
            self._call(on_ack, str(tid))
            return
        key = id(fut)
        with self._lock:
            self._pending[key] = (fut, on_ack)
        sub = _telling(type(fut)) if hasattr(fut, "__dict__") else None
        if sub is None:
            self._look(key)
            return
        with _TELLING_LOCK:
            fut.__dict__[_CALLBACKS] = lambda tid: self._deliver(key, tid)
            if type(fut) is not sub:
                fut.__class__ = sub
            tid = fut.__dict__.get("task_id")  # set between the first look and the swap
        if tid is not None:
            _fire(fut, str(tid))
            return
        fut.add_done_callback(lambda f: _fire(f, _id_of(f)))

    def _deliver(self, key: int, tid: str | None) -> None:
        """``on_ack`` of the future under ``key``, once, unless closed."""
        with self._lock:
            entry = self._pending.pop(key, None)
            self._looked.discard(key)
            self._lock.notify_all()
            if entry is None or self._closed:
                return
            self._calling += 1
        try:
            self._call(entry[1], tid)
        finally:
            with self._lock:
                self._calling -= 1
                self._lock.notify_all()

    def waiting(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the fallback looker -----------------------------------------------------------------
    def _look(self, key: int) -> None:
        with self._lock:
            self._looked.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="acks")
                self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        interval = LOOK_EVERY_S
        while not self._closed:
            self._wake.wait()
            with self._lock:
                items = [(k, self._pending[k][0]) for k in self._looked]
            done = [(k, tid) for k, f in items if (tid := _id_of(f)) is not None or f.done()]
            for key, tid in done:
                self._deliver(key, tid)
            with self._lock:
                if not self._looked:
                    self._wake.clear()
            interval = LOOK_EVERY_S if done else min(interval * 2, LOOK_AT_MOST_S)
            if not done:
                time.sleep(interval)

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
        with self._lock:
            while self._pending or self._calling:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop: no ``on_ack`` starts after this returns, and one in progress is waited
        for (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._closed = True
            while self._calling and time.monotonic() < deadline:
                self._lock.wait(max(0.0, deadline - time.monotonic()))
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _id_of(fut: Any) -> str | None:
    """The future's id, if it has one (a future that ended may still have got it)."""
    tid = getattr(fut, "task_id", None)
    return None if tid is None else str(tid)
