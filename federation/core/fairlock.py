"""A lock that is taken in the order it was asked for.

``threading.Lock`` makes no promise of order: a thread that releases it and asks again at
once usually gets it back before threads that have waited longer, so under many callers
some wait many turns (a service's submissions: P95 two to three times the median).
:class:`FairLock` hands the lock to the longest waiter, so each waits for the ones ahead
of it and no more.
"""

from __future__ import annotations

import threading
from collections import deque
from types import TracebackType


class FairLock:
    """A first-come, first-served lock (not reentrant)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        turn.acquire()  # released by the holder handing the lock over: held on return

    def release(self) -> None:
        with self._mutex:
            if not self._held:
                raise RuntimeError("release of an unheld FairLock")
            if self._waiters:
                self._waiters.popleft().release()  # stays held: handed to the next waiter
            else:
                self._held = False

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
