"""The notebook executor against a running coordinator service (``federation serve``).

A service never unpickles what comes over the network, so a remote ``submit`` sends a
*catalog* function by name with JSON arguments: ``submit("square", 7)``, or a Python
function that is a catalog entry (``submit(functions.workloads.square, 7)``), which is
mapped to its name. Any other callable is refused with :class:`NotCataloguedError` before
anything is sent.

Futures complete from the service's event stream (server-sent events, one connection per
executor): when a task's ``task.completed`` or ``task.failed`` arrives, the future fetches
the result once and settles. Nothing polls.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from federation.core.errors import FederationError, TaskFailedError
from federation.interfaces.jupyter.placement import Placement
from federation.interfaces.service.client import EventStream, ServiceClient
from federation.interfaces.service.models import SubmitResponse, TaskStatus
from federation.placement.candidates import PlacementDecision
from federation.runtime.catalog import Catalog, default_catalog
from federation.runtime.events import Event, EventCallback

__all__ = ["NotCataloguedError", "RemoteTaskFuture", "catalog_name"]


class NotCataloguedError(FederationError, TypeError):
    """A callable that is not in the catalog, submitted to a service."""


def catalog_name(fn: Callable[..., Any] | str, catalog: Catalog | None = None) -> str:
    """The catalog name under which ``fn`` can be run by a service.

    ``fn`` is a name, or a function that is (or has the module and qualified name of) a
    catalog entry's. Raises :class:`NotCataloguedError` saying what to do otherwise.
    """
    cat = catalog or default_catalog()
    if isinstance(fn, str):
        return fn  # the service checks the name (and lists its catalog if unknown)
    key = (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None))
    for entry in cat:
        if entry.fn is fn or (entry.fn.__module__, entry.fn.__qualname__) == key:
            return entry.name
    name = getattr(fn, "__qualname__", repr(fn))
    raise NotCataloguedError(
        f"{name} is not a catalog function, and a coordinator service runs only catalog "
        f"functions by name (it never unpickles code sent over the network). The catalog "
        f"has: {', '.join(cat.names())}. Call one by name (ex.submit('square', 7)), add "
        "yours to federation/runtime/catalog.py (an importable function in functions/ with an "
        "argument model), or use FederatedExecutor() without `service` to ship any "
        "function from this process."
    )


class RemoteTaskFuture(Future[Any]):
    """A ``concurrent.futures.Future`` for a task on a coordinator service.

    Same provenance as the in-process future: ``task_id``, ``placement``, ``decision``,
    ``events``, ``add_event_callback``; settled from the service's event stream.
    """

    def __init__(self, client: ServiceClient, sub: SubmitResponse) -> None:
        super().__init__()
        self._client = client
        self.submission = sub
        self._events: list[Event] = []
        self._callbacks: list[EventCallback] = []
        self._lock = threading.Lock()
        self._status: TaskStatus | None = None

    # --- the event stream calls this, in order, on its thread ------------------------------
    def _on_event(self, ev: Event) -> None:
        with self._lock:
            if any(e.seq == ev.seq for e in self._events):
                return
            self._events.append(ev)
            callbacks = list(self._callbacks)
        for cb in callbacks:
            cb(ev)
        if ev.kind == "task.started" and not self.done():
            self.set_running_or_notify_cancel()
        elif ev.kind in ("task.completed", "task.failed"):
            self._settle()

    def _settle(self) -> None:
        try:
            st = self._status = self._client.status(self.task_id)
        except Exception as e:
            self._set(exception=e)
            return
        r = st.result
        if r is None:
            return  # not done after all (cannot happen after a terminal event)
        if r.status == "completed":
            self._set(result=r.value if r.value_is_json else r.value_repr)
            return
        error = r.error or "failed"
        if error.startswith("cancelled") and Future.cancel(self):
            self.set_running_or_notify_cancel()
            return
        self._set(
            exception=TaskFailedError(
                f"task {st.task_id} ({st.label}) failed on {st.site}/{st.partition}: {error}",
                r.remote_traceback,
            )
        )

    def _set(self, *, result: Any = None, exception: BaseException | None = None) -> None:
        try:
            if exception is not None:
                self.set_exception(exception)
            else:
                self.set_result(result)
        except concurrent.futures.InvalidStateError:
            pass  # already settled

    # --- provenance ----------------------------------------------------------------------------
    @property
    def task_id(self) -> str:
        return self.submission.task_id

    @property
    def label(self) -> str:
        return self.submission.label

    @property
    def decision(self) -> PlacementDecision:
        return self.submission.decision

    @property
    def placement(self) -> Placement:
        d = self.submission
        return Placement(d.site, d.partition, d.shape, d.predicted_wait_s)

    @property
    def compute_task_id(self) -> str | None:
        return self.status().compute_task_id

    @property
    def slurm_job_id(self) -> str | None:
        return self.status().slurm_job_id

    @property
    def state(self) -> str:
        return "cancelled" if self.cancelled() else self.status().state

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def status(self) -> TaskStatus:
        """The task's status on the service (cached once it is done)."""
        if self._status is not None and self._status.done:
            return self._status
        return self._client.status(self.task_id)

    def manifest(self, timeout: float | None = None) -> Any:
        """The result manifest (:class:`~federation.interfaces.service.models.TaskResultView`)."""
        concurrent.futures.wait([self], timeout)
        return self.status().result

    def add_event_callback(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for each of this task's events (past ones first)."""
        with self._lock:
            past = list(self._events)
            self._callbacks.append(callback)
        for ev in past:
            callback(ev)

    def explain(self) -> str:
        return self.submission.explain

    def cancel(self) -> bool:
        """Cancel the task on the service if its job has not started."""
        if self.done():
            return self.cancelled()
        if self.running():
            return False
        if not self._client.cancel(self.task_id).cancelled:
            return False
        if not self.done() and Future.cancel(self):
            self.set_running_or_notify_cancel()
        return self.cancelled()

    def __repr__(self) -> str:
        return f"<RemoteTaskFuture {self.label} at {self.submission.granted} id={self.task_id}>"


def open_stream(client: ServiceClient, after: int) -> EventStream:
    return EventStream(client, after=after)
