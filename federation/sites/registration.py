"""Function registration, off the caller's path and once per client.

Globus Compute runs registered functions: the SDK's ``Executor.submit`` registers a function
it has not seen with a request to the web service, on the calling thread. Under the
service's request limit (20 requests per 10 s per client, :mod:`federation.standin.rate_limit`)
that request may wait seconds for a 429's ``Retry-After``, and every submission to the site
waited behind it. A function id is not tied to an endpoint, so one registration serves every
site reached through the same client.

:class:`Registrar` keeps the ids per client. A submission of a function whose id is known is
handed to the SDK at once (``Executor.submit`` then only queues it for its submitter thread).
One whose id is not known yet returns a :class:`DeferredFuture` at once; the registrar's
thread registers the function, submits the task, and links the SDK's future to it (its
``task_id`` once acknowledged, then its result or exception). :meth:`Registrar.warm`
registers the functions every site uses (shell commands, claims) before the first task.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from globus_compute_sdk import Client, Executor

logger = logging.getLogger(__name__)


class DeferredFuture(Future[Any]):
    """A submission's future before the SDK took it: its ``task_id`` is the SDK future's,
    once there is one; its end is the SDK future's end (or the registration's error)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner: Future[Any] | None = None

    @property
    def task_id(self) -> str | None:
        inner = self.inner
        tid = getattr(inner, "task_id", None) if inner is not None else None
        return None if tid is None else str(tid)

    def link(self, inner: Future[Any]) -> None:
        self.inner = inner
        inner.add_done_callback(self._copy)

    def _copy(self, inner: Future[Any]) -> None:
        if self.done():
            return
        if inner.cancelled():
            self.cancel()
            self.set_running_or_notify_cancel()
            return
        exc = inner.exception()
        if exc is not None:
            self.set_exception(exc)
        else:
            self.set_result(inner.result())


@dataclass
class _Pending:
    ex: Executor
    fn: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    future: DeferredFuture | None = None
    """None: a registration only (:meth:`Registrar.warm`)."""


class Registrar:
    """Function ids per client; registrations run on one background thread per client."""

    def __init__(self) -> None:
        self._ids: dict[int, tuple[Any, str]] = {}
        """id(fn) -> (fn, function id); the function is kept so its id() is never reused."""
        self._lock = threading.Lock()
        self._queue: deque[_Pending] = deque()
        self._told: dict[int, tuple[Executor, set[int]]] = {}
        """Per executor (by id(), kept so it is not reused), the functions whose id it was
        told (the SDK warns on a repeat)."""
        self._thread: threading.Thread | None = None
        self.requests = 0
        """Registration requests sent (one per function per client)."""

    def known(self, fn: Any) -> str | None:
        with self._lock:
            got = self._ids.get(id(fn))
            return None if got is None else got[1]

    def submit(
        self, ex: Executor, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[Any]:
        """Submit ``fn(*args, **kwargs)`` through ``ex``; never waits for the web service."""
        fid = self.known(fn)
        if fid is not None:
            self._tell(ex, fn, fid)
            fut: Future[Any] = ex.submit(fn, *args, **kwargs)
            return fut
        deferred = DeferredFuture()
        self._enqueue(_Pending(ex, fn, args, kwargs, deferred))
        return deferred

    def _tell(self, ex: Executor, fn: Any, fid: str) -> None:
        """Give ``ex`` the id of ``fn`` (in memory: the executor's own cache), once."""
        with self._lock:
            told = self._told.setdefault(id(ex), (ex, set()))[1]
            if id(fn) in told:
                return
            told.add(id(fn))
        ex.register_function(fn, function_id=fid)

    def warm(self, ex: Executor, fns: Iterable[Any]) -> None:
        """Register ``fns`` in the background (those not known yet), before any task."""
        for fn in fns:
            if self.known(fn) is None:
                self._enqueue(_Pending(ex, fn))

    def _enqueue(self, item: _Pending) -> None:
        with self._lock:
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="function-registrar", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:  # the thread ends when nothing waits (a later item starts another)
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                item = self._queue.popleft()
            self._serve(item)

    def _serve(self, item: _Pending) -> None:
        try:
            fid = self.known(item.fn)
            if fid is None:
                self.requests += 1
                fid = str(item.ex.register_function(item.fn))
                with self._lock:
                    self._ids.setdefault(id(item.fn), (item.fn, fid))
                    self._told.setdefault(id(item.ex), (item.ex, set()))[1].add(id(item.fn))
            if item.future is None:
                return
            self._tell(item.ex, item.fn, fid)
            item.future.link(item.ex.submit(item.fn, *item.args, **item.kwargs))
        except Exception as e:
            if item.future is None:
                logger.info("registering %s ahead of use failed: %s", item.fn, e)
            elif not item.future.done():
                item.future.set_exception(e)


_REGISTRARS_LOCK = threading.Lock()


def registrar_for(client: Client) -> Registrar:
    """The one registrar of ``client`` (shared by every site reached through it), kept on
    the client itself, so it lives as long as the client does."""
    with _REGISTRARS_LOCK:
        reg = getattr(client, "_federation_registrar", None)
        if not isinstance(reg, Registrar):
            reg = Registrar()
            client._federation_registrar = reg  # type: ignore[attr-defined]
        return reg
