"""Notebook interface: a :class:`concurrent.futures.Executor` over the federation.

``FederatedExecutor.submit(fn, *args)`` places ``fn`` within a resource envelope (given, or
drafted from hints or from the function's name and docstring), ships it through the
coordinator in the background and returns a :class:`TaskFuture` at once: a real
``concurrent.futures.Future`` that
completes with the function's return value, or with :class:`~federation.core.errors.TaskFailedError`
carrying the remote traceback. ``map``, ``as_completed``, ``wait`` and ``with`` blocks work as
for any executor.

>>> with FederatedExecutor() as ex:                      # doctest: +SKIP
...     fut = ex.submit(square, 7)
...     fut.add_done_callback(lambda f: print(f.placement, f.result()))
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import SerializationError
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import PythonTask
from federation.interfaces.jupyter.frames import (
    envelope_frame,
    envelope_rows,
    events_frame,
    partitions_table,
    tasks_frame,
)
from federation.interfaces.jupyter.future import TaskFuture
from federation.interfaces.jupyter.placement import Placement
from federation.interfaces.jupyter.remote import NotCataloguedError, RemoteTaskFuture, catalog_name
from federation.interfaces.service.client import EventStream, ServiceClient
from federation.placement.drafting import EnvelopeDraft, TaskHints
from federation.runtime.coordinator import Coordinator
from federation.runtime.handles import TaskHandle

if TYPE_CHECKING:
    from federation.deploy.connect import Connection

HintsLike = TaskHints | Mapping[str, Any]

__all__ = [
    "FederatedExecutor",
    "NotCataloguedError",
    "Placement",
    "RemoteTaskFuture",
    "TaskFuture",
    "describe_function",
    "envelope_frame",
    "envelope_rows",
    "events_frame",
    "partitions_table",
    "tasks_frame",
]


logger = logging.getLogger(__name__)


class FederatedExecutor(concurrent.futures.Executor):
    """Run Python functions on the federation like on a local pool.

    Args:
        coordinator: the coordinator to use; default: one over the sites of ``config`` (a
            ``federation.yaml``; default ``$FEDERATION_CONFIG``), else over the embedded
            local federation (brought up), closed on shutdown.
        envelope: default resource envelope for every task.
        hints: default :class:`~federation.placement.drafting.TaskHints` (or a dict of them) used to
            draft an envelope when none is given.
        sites: restrict placement to these sites (and, for the embedded federation, bring
            up only these).
        snapshot_max_age_s: reuse a federation snapshot this young for placement instead of
            probing every site on each ``submit`` (``map`` over many items stays fast);
            ``0`` probes every time.

        config: a ``federation.yaml`` whose sites (local and Globus Compute cloud) the
            executor's own coordinator acts on.
        service: URL of a running coordinator service (``federation serve``) to use instead
            of an in-process coordinator; ``token`` is its bearer token (default
            ``$FEDERATION_TOKEN``). Against a service, ``submit`` takes catalog functions
            only (by name, or a function that is a catalog entry; see
            :func:`federation.interfaces.jupyter.remote.catalog_name`), and futures are
            :class:`~federation.interfaces.jupyter.remote.RemoteTaskFuture`, settled from the
            service's event stream.

    Keyword arguments named ``envelope`` and ``hints`` are taken by :meth:`submit`; pass
    them to your function through ``functools.partial`` if it has parameters of that name.
    """

    def __init__(
        self,
        coordinator: Coordinator | None = None,
        *,
        envelope: ResourceEnvelope | None = None,
        hints: HintsLike | None = None,
        sites: Sequence[str] | None = None,
        snapshot_max_age_s: float = 5.0,
        service: str | None = None,
        token: str | None = None,
        config: str | Path | None = None,
    ) -> None:
        self.snapshot_max_age_s = snapshot_max_age_s
        self.created_at = datetime.now(UTC)
        self._sites = tuple(sites or ())
        self._conn: Connection | None = None
        """The coordinator this executor connected (and closes), when it made one."""
        self._client: ServiceClient | None = None
        self._stream: EventStream | None = None
        if service is not None:
            if coordinator is not None:
                raise ValueError("give a coordinator or a service, not both")
            token = token or os.environ.get("FEDERATION_TOKEN")
            if not token:
                raise ValueError(
                    "a service needs a bearer token: pass token=... or set $FEDERATION_TOKEN "
                    "(`federation token issue NAME` prints one)"
                )
            self._client = ServiceClient(service, token)
        elif coordinator is None:
            from federation.deploy.connect import connect

            self._conn = connect(config, sites=list(self._sites) or None)
            coordinator = self._conn.coord
        self._coordinator = coordinator
        self.envelope = envelope
        self.hints = _hints(hints)
        self._futures: list[TaskFuture | RemoteTaskFuture] = []
        self._drafts: dict[tuple[str, str], EnvelopeDraft] = {}
        self._catalog: list[Any] | None = None
        self._lock = threading.Lock()
        self._placer: concurrent.futures.ThreadPoolExecutor | None = None
        """The placement thread (one task at a time, in submission order), made on first use."""
        self._shutdown = False
        self._closed = False

    @property
    def coordinator(self) -> Coordinator:
        """The in-process coordinator (not available against a service)."""
        if self._coordinator is None:
            raise RuntimeError(
                "this executor talks to a coordinator service; there is no in-process "
                "coordinator (use the executor's methods, or the service's API)"
            )
        return self._coordinator

    @property
    def remote(self) -> bool:
        """True when tasks go to a coordinator service."""
        return self._client is not None

    # --- submitting -----------------------------------------------------------------------
    def submit(  # type: ignore[override]
        self,
        fn: Callable[..., Any] | str,
        /,
        *args: Any,
        envelope: ResourceEnvelope | None = None,
        hints: HintsLike | None = None,
        **kwargs: Any,
    ) -> TaskFuture | RemoteTaskFuture:
        """Place and ship ``fn(*args, **kwargs)``; returns a :class:`TaskFuture` at once.

        The envelope is, in order: ``envelope``; drafted from ``hints``; the executor's
        envelope; drafted from the executor's hints; drafted from the function's name and
        docstring. Drafting, probing the sites, placing and shipping happen on the
        executor's placement thread (one task after the other, in submission order); a
        placement error (:class:`~federation.core.errors.NoFeasibleSiteError`,
        :class:`~federation.core.errors.SerializationError`, ...) is the future's exception,
        and nothing runs. ``fut.placement`` (and the other provenance) waits for the
        placement; ``fut.wait_placed()`` waits without raising.

        Against a service, the service places the task: this sends it (one HTTP request)
        and raises a refusal here.
        """
        th = _hints(hints)  # a malformed hints dict is refused here, before anything
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
        if self._client is not None:
            return self._submit_remote(self._client, fn, args, kwargs, envelope, th)
        return self._submit_local(fn, args, kwargs, envelope, th, None)

    def map(  # type: ignore[override]
        self,
        fn: Callable[..., Any] | str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        envelope: ResourceEnvelope | None = None,
        hints: HintsLike | None = None,
    ) -> Iterator[Any]:
        """``fn`` over ``iterables`` as ``Executor.map`` does (every call submitted now,
        results in order, ``timeout`` counted from this call, the calls not yet done
        cancelled if the iteration stops early), placed as one batch.

        The batch is placed from one snapshot (the one its first call was placed on: the
        coordinator's latest, or the probe round already in flight; reused for up to
        :data:`BATCH_SNAPSHOT_MAX_AGE_S`), not one probe per call: each later call sees
        the earlier ones, as the coordinator's own jobs laid over that snapshot and as the
        blocks they keep warm, so a map of short calls lands where a block of its shape is
        already up or starting rather than paying a cold start at every site
        (:mod:`federation.placement.coldstart`). ``envelope`` and ``hints`` apply to every
        call, as in :meth:`submit`. ``chunksize`` is accepted and ignored (each call is one
        task). Against a service, each call is one :meth:`submit` (the service places it).
        """
        th = _hints(hints)
        deadline = None if timeout is None else time.monotonic() + timeout
        calls = zip(*iterables, strict=False)  # as Executor.map: the shortest ends it
        futs: list[concurrent.futures.Future[Any]]
        if self._client is not None:  # the service places each call
            futs = [self.submit(fn, *args, envelope=envelope, hints=th) for args in calls]
        else:
            with self._lock:
                if self._shutdown:
                    raise RuntimeError("cannot schedule new futures after shutdown")
            batch = _Batch()
            futs = [self._submit_local(fn, args, {}, envelope, th, batch) for args in calls]
        return _in_order(futs, deadline)

    def _submit_local(
        self,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        envelope: ResourceEnvelope | None,
        th: TaskHints | None,
        batch: _Batch | None,
    ) -> TaskFuture:
        """Queue one call for the placement thread; ``batch``: place it on the batch's
        snapshot (else on one at most :attr:`snapshot_max_age_s` old)."""
        if isinstance(fn, str):
            raise TypeError(
                f"submit({fn!r}): names are for a coordinator service; pass the function"
            )
        coord = self.coordinator
        fut = TaskFuture(coord)
        task = PythonTask(fn, tuple(args), dict(kwargs))

        def prepare() -> tuple[ResourceEnvelope, FederationSnapshot | None]:
            env = self.envelope_for(fn, envelope=envelope, hints=th)
            if batch is not None:
                return env, batch.snapshot_for(coord, env.sites)
            return env, coord.snapshot(max_age_s=self.snapshot_max_age_s)

        def ship(prepared: tuple[ResourceEnvelope, FederationSnapshot | None]) -> TaskHandle:
            env, snap = prepared
            return coord.submit_task(task, env, on_event=fut._on_event, snapshot=snap)

        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._placer is None:
                self._placer = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="federated-executor-place"
                )
            self._placer.submit(fut._place, prepare, ship)
            self._futures.append(fut)
        return fut

    def _submit_remote(
        self,
        client: ServiceClient,
        fn: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        envelope: ResourceEnvelope | None,
        hints: HintsLike | None,
    ) -> RemoteTaskFuture:
        from federation.interfaces.service.models import TaskRequest

        name = catalog_name(fn)  # NotCataloguedError before anything is sent
        env = self.envelope_for(fn, envelope=envelope, hints=hints)
        try:
            req = TaskRequest(function=name, args=list(args), kwargs=kwargs, envelope=env)
        except ValidationError as e:
            raise SerializationError(
                f"arguments of {name}() must be plain JSON to go to a service: {e}"
            ) from e
        sub = client.submit(req)
        fut = RemoteTaskFuture(client, sub)
        with self._lock:
            if self._stream is None:
                self._stream = EventStream(client, after=sub.cursor)
            stream = self._stream
            self._futures.append(fut)
        stream.subscribe(sub.task_id, fut._on_event)  # events before this are replayed
        return fut

    def envelope_for(
        self,
        fn: Callable[..., Any] | str,
        *,
        envelope: ResourceEnvelope | None = None,
        hints: HintsLike | None = None,
    ) -> ResourceEnvelope:
        """The envelope ``submit`` would use for ``fn`` (see :meth:`submit`)."""
        if envelope is not None:
            return self._restrict(envelope)
        if hints is not None:
            return self._restrict(self.draft(fn, hints).envelope)
        if self.envelope is not None:
            return self._restrict(self.envelope)
        return self._restrict(self.draft(fn, self.hints).envelope)

    def draft(
        self, fn_or_description: Callable[..., Any] | str, hints: HintsLike | None = None
    ) -> EnvelopeDraft:
        """Draft an envelope from a description (or a function's name and docstring)."""
        description = (
            fn_or_description
            if isinstance(fn_or_description, str)
            else describe_function(fn_or_description)
        )
        if self._client is not None and isinstance(fn_or_description, str):
            info = {f.name: f for f in self._functions()}.get(fn_or_description)
            if info is not None:  # a catalog name: draft from its description
                description = f"{info.name.replace('_', ' ')}: {info.description}"
        th = _hints(hints)
        key = (description, th.model_dump_json() if th else "")
        with self._lock:
            cached = self._drafts.get(key)
        if cached is not None:
            return cached
        if self._client is not None:
            from federation.interfaces.service.models import DraftRequest

            draft = self._client.draft(DraftRequest(description=description, hints=th))
        else:
            draft = self.coordinator.draft_envelope(description, th)
        with self._lock:
            self._drafts[key] = draft
        return draft

    def _restrict(self, env: ResourceEnvelope) -> ResourceEnvelope:
        if not self._sites or env.sites:
            return env
        return ResourceEnvelope(**(env.model_dump() | {"sites": self._sites}))

    # --- lifecycle ------------------------------------------------------------------------
    def _functions(self) -> list[Any]:
        if self._client is None:
            return []
        if self._catalog is None:
            self._catalog = self._client.functions()
        return self._catalog

    @property
    def futures(self) -> list[TaskFuture | RemoteTaskFuture]:
        """Every future this executor returned, in submission order."""
        with self._lock:
            return list(self._futures)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting tasks; optionally cancel those not started; optionally wait.

        As documented for ``concurrent.futures.Executor``: with ``wait=False`` this returns
        at once and the embedded federation's connection is closed when the last task ends.
        """
        with self._lock:
            self._shutdown = True
            futures = list(self._futures)
        if cancel_futures:
            for f in futures:
                if not f.running():
                    f.cancel()
        if wait:
            concurrent.futures.wait(futures)
            self._stop_placer()
            self._close()
        elif self._conn is not None or self._client is not None:

            def close_when_done() -> None:
                concurrent.futures.wait(futures)
                self._stop_placer()
                self._close()

            t = threading.Thread(
                target=close_when_done,
                name="federated-executor-close",
                daemon=True,
            )
            t.start()
        elif self._placer is not None:
            self._placer.shutdown(wait=False)

    def _stop_placer(self) -> None:
        """Wait for the placement thread to finish (a cancelled task's probe included)."""
        if self._placer is not None:
            self._placer.shutdown(wait=True)

    def _close(self) -> None:
        with self._lock:
            if self._closed or (self._conn is None and self._client is None):
                return
            self._closed = True
        if self._client is not None:
            if self._stream is not None:
                self._stream.close()
            self._client.close()
            return
        assert self._conn is not None
        self._conn.close()

    # --- views for notebooks --------------------------------------------------------------
    def inspect(self) -> FederationSnapshot:
        """Probe every site now (the raw snapshot model; a service's latest snapshot)."""
        if self._client is not None:
            return self._client.inspect()
        return self.coordinator.inspect_federation()

    def snapshot(self, snap: FederationSnapshot | None = None) -> pd.DataFrame:
        """One row per site and partition: capacity, queue and health (probes now)."""
        return partitions_table(snap or self.inspect())

    def history(self, futures: Iterable[TaskFuture] | None = None) -> pd.DataFrame:
        """Every event of this executor's tasks (or of ``futures``), one row each.

        Waits for tasks still being placed; tasks never submitted (placement refused,
        cancelled first) have no events."""
        futs = [f for f in (self.futures if futures is None else futures) if _submitted(f)]
        ids = {f.task_id for f in futs}
        labels = {f.task_id: f.label for f in futs}
        if self._client is not None:
            events = sorted((e for f in futs for e in f.events), key=lambda e: e.seq)
        else:
            bus = self.coordinator.events
            events = sorted((e for i in ids for e in bus.history(i)), key=lambda e: e.seq)
        return events_frame(events, labels)

    def tasks(self, futures: Iterable[TaskFuture] | None = None) -> pd.DataFrame:
        """One row per task: placement, predicted vs actual wait, runtime, state, job id.

        Waits for tasks still being placed; tasks never submitted have no row."""
        futs = [f for f in (self.futures if futures is None else futures) if _submitted(f)]
        return tasks_frame([f.handle if isinstance(f, TaskFuture) else f.status() for f in futs])

    def telemetry(self, since: datetime | None = None) -> pd.DataFrame:
        """Partition rows of every snapshot recorded since ``since`` (default: since this
        executor was created), the input of :func:`federation.interfaces.plots.plot_capacity`."""
        tel = None if self._coordinator is None else self._coordinator.telemetry
        if tel is None:
            return pd.DataFrame()
        return tel.frame(since=self.created_at if since is None else since)

    def __repr__(self) -> str:
        state = "shut down" if self._shutdown else "open"
        if self._client is not None:
            where = f"service {self._client.base_url}"
            return f"<FederatedExecutor {state}: {where}, {len(self._futures)} tasks>"
        return (
            f"<FederatedExecutor {state}: {len(self.coordinator.backends)} sites, "
            f"{len(self._futures)} tasks>"
        )


BATCH_SNAPSHOT_MAX_AGE_S = 300.0
"""How long a map places its calls on the snapshot its first call was placed on (half the
age past which placement refuses a site's probe)."""


class _Batch:
    """The snapshot every call of one map is placed on (used from the placement thread).

    The first call is placed on the snapshot the coordinator picks for a submission (its
    latest, or the probe round already in flight, such as the one ``connect`` starts:
    never a second round beside it); every later call on that same snapshot, the latest
    (``Coordinator.snapshot``), until it is :data:`BATCH_SNAPSHOT_MAX_AGE_S` old."""

    def __init__(self) -> None:
        self.first = True
        self.snapshot: FederationSnapshot | None = None

    def snapshot_for(self, coord: Coordinator, sites: Sequence[str]) -> FederationSnapshot | None:
        if self.first:
            self.first = False
            return None  # submit_task's own choice
        snap = self.snapshot
        if snap is not None:
            age_s = (datetime.now(UTC) - snap.taken_at).total_seconds()
            if age_s <= BATCH_SNAPSHOT_MAX_AGE_S:
                return snap
        self.snapshot = snap = coord.snapshot(max_age_s=BATCH_SNAPSHOT_MAX_AGE_S, sites=sites)
        return snap


def _in_order(futs: list[concurrent.futures.Future[Any]], deadline: float | None) -> Iterator[Any]:
    """Each future's result in order (as ``Executor.map``): the ones left are cancelled
    when the iteration stops early, raises or times out."""
    pending = list(reversed(futs))
    try:
        while pending:
            fut = pending.pop()
            try:
                left = None if deadline is None else deadline - time.monotonic()
                yield fut.result(left)
            finally:
                fut.cancel()
    finally:
        for fut in pending:
            fut.cancel()


def describe_function(fn: Callable[..., Any]) -> str:
    """A drafting description from a function: its name (words) and docstring."""
    name = getattr(fn, "__name__", type(fn).__name__).replace("_", " ").strip()
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return f"{name}: {doc}" if doc else name


def _hints(hints: HintsLike | None) -> TaskHints | None:
    if hints is None or isinstance(hints, TaskHints):
        return hints
    return TaskHints.model_validate(dict(hints))


def _submitted(fut: TaskFuture | RemoteTaskFuture) -> bool:
    """True if the coordinator has the task (waits for a placement in progress)."""
    return not isinstance(fut, TaskFuture) or fut._placed_handle() is not None
