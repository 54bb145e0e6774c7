"""An in-process federation for tests that need no Slurm: sites run tasks on threads.

``ThreadSite`` implements the :class:`~federation.sites.backend.SiteBackend` protocol (futures
with a ``task_id``, ``notify_started`` before the function runs); ``FixedCoordinator``
answers ``inspect_federation`` with an idle snapshot of the sites' specs instead of probing.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from federation.core.envelope import Shape
from federation.core.snapshot import (
    FederationSnapshot,
    NodeRecord,
    PartitionSnapshot,
    SiteHealth,
    SiteSnapshot,
)
from federation.core.spec import SiteSpec, load_sites
from federation.core.tasks import PythonTask, TaskSpec
from federation.runtime.coordinator import Coordinator
from federation.runtime.telemetry import Telemetry

_JOBS = itertools.count(1000)


class ThreadSite:
    def __init__(self, spec: SiteSpec, gate: threading.Event | None = None) -> None:
        self.spec = spec
        self.coord: Coordinator | None = None
        self.gate = gate  # tasks wait for it before "starting" (to test cancellation)
        self._pool = ThreadPoolExecutor(4, thread_name_prefix=f"site-{spec.name}")
        self._futures: dict[str, Future[Any]] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def probe(self) -> Future[dict[str, Any]]:
        f: Future[dict[str, Any]] = Future()
        f.set_exception(RuntimeError("in-process sites are not probed"))
        return f

    def submit(self, task: TaskSpec, shape: Shape) -> Future[Any]:
        fut: Future[Any] = Future()
        tid = str(uuid.uuid4())
        fut.task_id = tid  # type: ignore[attr-defined]
        self._futures[tid] = fut

        def run() -> None:
            if self.gate is not None:
                self.gate.wait(30)
            self.before_start(shape)
            if not fut.set_running_or_notify_cancel():
                return
            assert self.coord is not None
            # like a real site: the job starts after the submission was acknowledged
            reg = self.coord._registry  # the lookups a start report itself makes
            for _ in range(500):
                if reg.handle_for_compute_id(tid) or reg.copy_for_compute_id(tid):
                    break
                time.sleep(0.002)
            self.coord.notify_started(tid, str(next(_JOBS)))
            try:
                assert isinstance(task, PythonTask)
                fut.set_result(task.fn(*task.args, **task.kwargs))
            except BaseException as e:
                fut.set_exception(e)

        self._pool.submit(run)
        return fut

    can_cancel = True

    def before_start(self, shape: Shape) -> None:
        """What a task waits for before it starts (nothing here; see :class:`BlockSite`)."""

    def cancel(self, task_id: str) -> bool:
        f = self._futures.get(task_id)
        return f is not None and f.cancel()

    def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


def idle_snapshot(specs: list[SiteSpec], taken_at: datetime | None = None) -> FederationSnapshot:
    now = taken_at or datetime.now(UTC)
    sites = []
    for spec in specs:
        parts = tuple(
            PartitionSnapshot(
                site=spec.name,
                partition=p.name,
                max_time_s=p.max_walltime_s,
                nodes_total=p.nodes_local,
                cpus_total=p.cpus_per_node * p.nodes_local,
                cpus_alloc=0,
                cpus_idle=p.cpus_per_node * p.nodes_local,
                mem_gb_total=p.mem_gb_per_node * p.nodes_local,
                mem_gb_alloc=0,
                gpus_total_by_type={p.gpu_type: p.gpus_per_node * p.nodes_local}
                if p.gpu_type
                else {},
                gpus_alloc_by_type={p.gpu_type: 0} if p.gpu_type else {},
            )
            for p in spec.partitions
        )
        nodes = tuple(
            NodeRecord(
                name=f"{spec.name}-{p.name}-{i}",
                partition=p.name,
                state="idle",
                cpus_total=p.cpus_per_node,
                cpus_alloc=0,
                mem_mb_total=p.mem_gb_per_node * 1024,
                mem_mb_alloc=0,
                gpus_total_by_type={p.gpu_type: p.gpus_per_node} if p.gpu_type else {},
                gpus_alloc_by_type={p.gpu_type: 0} if p.gpu_type else {},
            )
            for p in spec.partitions
            for i in range(p.nodes_local)
        )
        sites.append(
            SiteSnapshot(
                site=spec.name,
                taken_at=now,
                health=SiteHealth(reachable=True, probe_age_s=0.0),
                partitions=parts,
                nodes=nodes,
            )
        )
    return FederationSnapshot(taken_at=now, sites=tuple(sites))


class FixedCoordinator(Coordinator):
    def _probe(self, names: list[str]) -> FederationSnapshot:  # every site idle, always
        specs = [b.spec for b in self.backends.values()]
        snap = idle_snapshot(specs)
        self._last_snapshot = snap
        if self.telemetry is not None:
            self.telemetry.record(snap)
        return snap


def inprocess_coordinator(
    sites: tuple[str, ...] = ("local", "delta"), gate: threading.Event | None = None
) -> FixedCoordinator:
    backends = [ThreadSite(s, gate) for s in load_sites(list(sites))]
    coord = FixedCoordinator(backends, telemetry=Telemetry(":memory:"))
    for b in backends:
        b.coord = coord
    return coord


class BlockSite(ThreadSite):
    """A :class:`ThreadSite` that runs a shape's tasks on a block of their own, as a Globus
    Compute endpoint does (``shape_config``: one config per shape), so that the coordinator
    charges its cold blocks (:mod:`federation.runtime.warmth`): a shape's first task waits
    ``boot_s`` for its block, which then stays up while tasks come (and ``idle_s`` after)."""

    boot_s = 0.3
    idle_s = 5.0

    def __init__(self, spec: SiteSpec, gate: threading.Event | None = None) -> None:
        super().__init__(spec, gate)
        self._lock = threading.Lock()
        self._up: dict[Shape, float] = {}
        """When each shape's block was last busy (monotonic)."""

    def shape_config(self, shape: Shape) -> dict[str, Any]:
        return {"partition": shape.partition, "cpus": shape.cpus, "walltime": shape.walltime_s}

    def before_start(self, shape: Shape) -> None:
        with self._lock:
            now = time.monotonic()
            up_at = self._up.get(shape)
            if up_at is None or now - up_at > self.idle_s:
                up_at = now + self.boot_s  # its block's batch job and worker pool start
            self._up[shape] = max(up_at, now)
        time.sleep(max(0.0, up_at - now))  # until the block is up


def block_coordinator(
    sites: tuple[str, ...] = ("local", "delta"), telemetry: Telemetry | None = None
) -> FixedCoordinator:
    """:func:`inprocess_coordinator` over :class:`BlockSite` sites."""
    backends = [BlockSite(s) for s in load_sites(list(sites))]
    coord = FixedCoordinator(backends, telemetry=telemetry or Telemetry(":memory:"))
    for b in backends:
        b.coord = coord
    return coord
