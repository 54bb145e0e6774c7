"""Notebook interface: a :class:`concurrent.futures.Executor` over the federation.

``FederatedExecutor.submit(fn, *args)`` places ``fn`` within a resource envelope (given, or
drafted from hints or from the function's name and docstring), ships it through the
coordinator and returns a :class:`TaskFuture`: a real ``concurrent.futures.Future`` that
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import ValidationError

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import SerializationError, TaskFailedError
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import PythonTask
from federation.interfaces.jupyter.remote import NotCataloguedError, RemoteTaskFuture, catalog_name
from federation.interfaces.service.client import EventStream, ServiceClient
from federation.interfaces.service.models import TaskStatus
from federation.placement.candidates import PlacementDecision
from federation.placement.drafting import EnvelopeDraft, TaskHints
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event, EventCallback
from federation.runtime.handles import TaskHandle, TaskResult

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


@dataclass(frozen=True)
class Placement:
    """Where a task was placed: site, partition and the granted shape."""

    site: str
    partition: str
    shape: Shape
    predicted_wait_s: float

    def __str__(self) -> str:
        return self.shape.describe()


class TaskFuture(Future[Any]):
    """A ``concurrent.futures.Future`` for one federated task.

    It is *running* once the task's Slurm job has picked it up (``task.started``), and done
    when the task completed (``result()`` is the return value), failed (``exception()`` is a
    :class:`TaskFailedError` with the remote traceback), or was cancelled before it started.
    """

    def __init__(self, coordinator: Coordinator) -> None:
        super().__init__()
        self._coordinator = coordinator
        self._handle: TaskHandle | None = None
        self._early: list[Event] = []
        self._attach_lock = threading.Lock()
        self._cancel_requested = False
        self._event_callbacks: list[Callable[[Event], None]] = []

    # --- wiring (called by the executor) --------------------------------------------------
    def _on_event(self, ev: Event) -> None:
        """The coordinator's ``on_event`` hook: subscribed before submission, so no event
        can be missed; events that arrive before the handle is known are replayed."""
        with self._attach_lock:
            if self._handle is None:
                self._early.append(ev)
                return
        self._apply(ev)

    def _attach(self, handle: TaskHandle) -> None:
        with self._attach_lock:
            self._handle = handle
            early, self._early = self._early, []
        for ev in early:
            self._apply(ev)

    def _apply(self, ev: Event) -> None:
        for deliver in list(self._event_callbacks):  # before the future settles
            deliver(ev)
        if ev.kind == "task.started":
            if not self.done():
                self.set_running_or_notify_cancel()
        elif ev.kind in ("task.completed", "task.failed"):
            self._settle()

    def _settle(self) -> None:
        h = self.handle
        try:
            if h.state == "completed":
                self.set_result(h.value)
                return
            error = h.error or "failed"
            cancelling = self._cancel_requested or error.startswith("cancelled")
            if cancelling and Future.cancel(self):
                self.set_running_or_notify_cancel()
                return
            self.set_exception(
                TaskFailedError(
                    f"task {h.id} ({h.label}) failed on {h.site}/{h.partition}: {error}",
                    h.remote_traceback,
                )
            )
        except concurrent.futures.InvalidStateError:
            pass  # already settled (e.g. cancelled while the result was on its way)

    # --- identity and provenance ----------------------------------------------------------
    @property
    def handle(self) -> TaskHandle:
        """The coordinator's live handle of this task."""
        if self._handle is None:
            raise RuntimeError("the task has not been submitted yet")
        return self._handle

    @property
    def task_id(self) -> str:
        """The coordinator's task id (also in every event's ``task_id``)."""
        return self.handle.id

    @property
    def compute_task_id(self) -> str | None:
        """The Globus Compute task id (None until the service has accepted the task)."""
        return self.handle.compute_task_id

    @property
    def label(self) -> str:
        return self.handle.label

    @property
    def decision(self) -> PlacementDecision:
        return self.handle.decision

    @property
    def envelope(self) -> ResourceEnvelope:
        return self.handle.envelope

    @property
    def placement(self) -> Placement:
        d = self.handle.decision.chosen
        return Placement(d.site, d.partition, d.shape, d.predicted_wait_s)

    @property
    def state(self) -> str:
        """``queued``, ``running``, ``completed``, ``failed`` or ``cancelled``."""
        return "cancelled" if self.cancelled() else self.handle.state

    @property
    def slurm_job_id(self) -> str | None:
        return self.handle.slurm_job_id

    @property
    def events(self) -> list[Event]:
        """This task's events so far, in order."""
        return self._coordinator.events.history(self.task_id)

    def add_event_callback(self, callback: EventCallback) -> None:
        """Call ``callback(event)`` for each of this task's events (past ones first).

        A terminal event reaches the callback before the future is done, so whoever waits
        on the future sees what its callbacks did.
        """
        handle = self.handle
        lock = threading.Lock()
        last = [0]

        def deliver(ev: Event) -> None:
            with lock:  # the replay below and live events, each once and in order
                if ev.seq <= last[0]:
                    return
                last[0] = ev.seq
                try:
                    callback(ev)
                except Exception:
                    logger.exception("event callback %r failed on %s", callback, ev.kind)

        with lock:
            with self._attach_lock:
                self._event_callbacks.append(deliver)
            past = self._coordinator.events.history(handle.id)
            for ev in past:
                if ev.seq > last[0]:
                    last[0] = ev.seq
                    try:
                        callback(ev)
                    except Exception:
                        logger.exception("event callback %r failed on %s", callback, ev.kind)

    def explain(self) -> str:
        """The placement decision trace: why this site, why not each other one."""
        return self.decision.explain()

    def manifest(self, timeout: float | None = None) -> TaskResult:
        """The result manifest (value, site, shape, Slurm job id, times, events)."""
        concurrent.futures.wait([self], timeout)
        return self.handle.manifest()

    # --- cancellation ---------------------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel the task if its job has not started; False if it is running or done."""
        if self.done():
            return self.cancelled()
        if self.running() or self._handle is None:
            return False
        self._cancel_requested = True
        if not self._coordinator.cancel(self._handle):
            self._cancel_requested = False
            return False
        # The coordinator reported the cancellation as an event; make sure we settled.
        if not self.done() and Future.cancel(self):
            self.set_running_or_notify_cancel()
        return self.cancelled()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<TaskFuture (not submitted)>"
        return f"<TaskFuture {self.label} {self.state} at {self.placement} id={self.task_id}>"


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
        docstring. Placement errors (:class:`~federation.core.errors.NoFeasibleSiteError`,
        :class:`~federation.core.errors.SerializationError`) are raised here, before anything runs.
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
        if self._client is not None:
            return self._submit_remote(self._client, fn, args, kwargs, envelope, hints)
        if isinstance(fn, str):
            raise TypeError(
                f"submit({fn!r}): names are for a coordinator service; pass the function"
            )
        env = self.envelope_for(fn, envelope=envelope, hints=hints)
        fut = TaskFuture(self.coordinator)
        snap = self.coordinator.snapshot(max_age_s=self.snapshot_max_age_s)
        handle = self.coordinator.submit_task(
            PythonTask(fn, tuple(args), dict(kwargs)), env, on_event=fut._on_event, snapshot=snap
        )
        fut._attach(handle)
        with self._lock:
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
            self._close()
        elif self._conn is not None or self._client is not None:

            def close_when_done() -> None:
                concurrent.futures.wait(futures)
                self._close()

            t = threading.Thread(
                target=close_when_done,
                name="federated-executor-close",
                daemon=True,
            )
            t.start()

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
        """Every event of this executor's tasks (or of ``futures``), one row each."""
        futs = list(self.futures if futures is None else futures)
        ids = {f.task_id for f in futs}
        labels = {f.task_id: f.label for f in futs}
        if self._client is not None:
            events = sorted((e for f in futs for e in f.events), key=lambda e: e.seq)
        else:
            events = [e for e in self.coordinator.events.history() if e.task_id in ids]
        return events_frame(events, labels)

    def tasks(self, futures: Iterable[TaskFuture] | None = None) -> pd.DataFrame:
        """One row per task: placement, predicted vs actual wait, runtime, state, job id."""
        futs = self.futures if futures is None else futures
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


def describe_function(fn: Callable[..., Any]) -> str:
    """A drafting description from a function: its name (words) and docstring."""
    name = getattr(fn, "__name__", type(fn).__name__).replace("_", " ").strip()
    doc = (getattr(fn, "__doc__", None) or "").strip()
    return f"{name}: {doc}" if doc else name


def _hints(hints: HintsLike | None) -> TaskHints | None:
    if hints is None or isinstance(hints, TaskHints):
        return hints
    return TaskHints.model_validate(dict(hints))


# --- DataFrames that read well in a notebook -------------------------------------------------
def _utc_naive(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series, utc=True)
    return s.dt.tz_convert(None).dt.floor("ms")


def partitions_table(snap: FederationSnapshot) -> pd.DataFrame:
    """``partitions_frame`` with readable column names and units, indexed by site/partition."""
    rows = []
    for s in snap.sites:
        status = "ok" if s.health.reachable else f"down: {s.health.error}"
        for p in s.partitions:
            gt = sum(p.gpus_total_by_type.values())
            rows.append(
                {
                    "site": s.site,
                    "partition": p.partition,
                    "status": status if p.state == "up" else p.state,
                    "nodes": p.nodes_total,
                    "CPUs idle": p.cpus_idle,
                    "CPUs total": p.cpus_total,
                    "GPUs idle": sum(p.gpus_idle_by_type.values()),
                    "GPUs total": gt,
                    "GPU type": ",".join(sorted(p.gpus_total_by_type)) or "-",
                    "memory free (GB)": round(p.mem_gb_total - p.mem_gb_alloc, 1),
                    "memory total (GB)": round(p.mem_gb_total, 1),
                    "jobs running": p.jobs_running,
                    "jobs pending": p.jobs_pending,
                    "max walltime (h)": None if p.max_time_s is None else p.max_time_s / 3600,
                    "probe age (s)": round(s.health.probe_age_s, 2),
                }
            )
        if not s.partitions:
            rows.append({"site": s.site, "partition": "-", "status": status})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.set_index(["site", "partition"])


def events_frame(events: Sequence[Event], labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per event: time (UTC), seconds since the first, task, event, site, details."""
    labels = labels or {}
    columns = ["seq", "time (UTC)", "t (s)", "task", "task id", "event", "site", "details"]
    if not events:
        return pd.DataFrame(columns=columns)
    t0 = min(e.at for e in events)
    rows = [
        {
            "seq": e.seq,
            "time (UTC)": e.at,
            "t (s)": round((e.at - t0).total_seconds(), 2),
            "task": labels.get(e.task_id, ""),
            "task id": e.task_id[:8],
            "event": e.kind.removeprefix("task."),
            "site": e.site or "",
            "details": ", ".join(f"{k}={v}" for k, v in e.detail.items()),
        }
        for e in events
    ]
    frame = pd.DataFrame(rows, columns=columns)
    frame["time (UTC)"] = _utc_naive(frame["time (UTC)"])
    return frame.set_index("seq")


def tasks_frame(tasks: Sequence[TaskHandle | TaskResult | TaskStatus]) -> pd.DataFrame:
    """One row per task: where it ran, predicted and actual wait, runtime and outcome."""
    rows = []
    for t in tasks:
        if isinstance(t, TaskHandle):
            task_id, state = t.id, t.state
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, error, compute_id = t.slurm_job_id, t.error, t.compute_task_id
        elif isinstance(t, TaskStatus):
            task_id, state = t.task_id, t.state
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, compute_id = t.slurm_job_id, t.compute_task_id
            error = t.result.error if t.result is not None else None
        else:
            task_id, state = t.task_id, t.status
            started, completed, submitted = t.started_at, t.completed_at, t.submitted_at
            job, error, compute_id = t.slurm_job_id, t.error, t.compute_task_id
        wait = None if started is None else max(0.0, (started - submitted).total_seconds())
        run = None
        if completed is not None:
            run = (completed - (started or submitted)).total_seconds()
        shape = t.decision.chosen.shape
        rows.append(
            {
                "task": t.label,
                "task id": task_id[:8],
                "state": state,
                "site": shape.site,
                "partition": shape.partition,
                "CPUs": shape.cpus,
                "memory (GB)": shape.mem_gb,
                "GPUs": shape.gpus,
                "GPU type": shape.gpu_type or "-",
                "predicted wait (s)": round(t.decision.chosen.predicted_wait_s, 1),
                "queue wait (s)": None if wait is None else round(wait, 1),
                "runtime (s)": None if run is None else round(run, 1),
                "Slurm job": job or "",
                "Globus Compute task": compute_id or "",
                "error": error or "",
            }
        )
    return pd.DataFrame(rows)


_BOUNDS = (
    ("cpus", "cpus_min", "cpus_max", ""),
    ("gpus", "gpus_min", "gpus_max", ""),
    ("mem_gb", "mem_gb_min", "mem_gb_max", " GB"),
)


def envelope_rows(env: ResourceEnvelope) -> list[tuple[str, str]]:
    """(bound, value) pairs of an envelope, ranges joined (``cpus: 16-64``)."""
    rows = []
    for name, lo, hi, unit in _BOUNDS:
        lo_v, hi_v = getattr(env, lo), getattr(env, hi)
        same = hi_v is None or hi_v == lo_v
        rows.append((name, f"{lo_v:g}{unit}" if same else f"{lo_v:g}-{hi_v:g}{unit}"))
    rows.append(("nodes", str(env.nodes)))
    rows.append(("walltime_s", f"{env.walltime_s} s ({env.walltime_s / 3600:.2g} h)"))
    for name in ("gpu_types", "gpu_mem_gb_min", "arch", "sites", "partitions", "account"):
        v = getattr(env, name)
        if v:
            rows.append(
                (
                    name,
                    ", ".join(v)
                    if isinstance(v, tuple)
                    else f"{v:g}"
                    if isinstance(v, float)
                    else str(v),
                )
            )
    return rows


def envelope_frame(draft: EnvelopeDraft | ResourceEnvelope) -> pd.DataFrame:
    """An envelope's bounds with the rationale for each, indexed by bound."""
    env = draft.envelope if isinstance(draft, EnvelopeDraft) else draft
    why = env.rationale
    rows = []
    for bound, value in envelope_rows(env):
        key = bound.removesuffix("_min")
        rows.append(
            {"bound": bound, "value": value, "rationale": why.get(bound) or why.get(key) or ""}
        )
    return pd.DataFrame(rows).set_index("bound")
