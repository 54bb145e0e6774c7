"""A virtual-time, Slurm-like batch queue for one site, fast enough for counterfactual replay.

Model
-----
* Each partition of the :class:`~federation.core.spec.SiteSpec` is ``N`` identical nodes with
  ``cpus_per_node`` CPUs, ``mem_gb_per_node`` GB and ``gpus_per_node`` GPUs. Partitions do not
  share nodes, so they are simulated independently.
* A :class:`SimJob` asks for ``nodes`` x (CPUs, memory, GPUs) per node and a time limit
  (``walltime_s``); it also carries its true run time ``run_s`` (which predictors must not
  use). Jobs may share a node when its free CPUs, memory and GPUs all suffice.
* Order: priority FIFO, by ``(-priority, submit time, submission order)``.
* EASY backfill: jobs start in order while they fit. The first job that does not fit (the
  *head*) gets a reservation: running jobs are assumed to end at their *requested* end
  (start + time limit), and the head's *shadow time* is the earliest such end at which it
  fits. The nodes it would take then are reserved (nodes busy now first, in the order they
  free up, so that nodes idle now stay available to backfill). A later job may start now if
  it fits now and either its time limit ends by the shadow time, or it only uses resources
  the head will not need at the shadow time (per reserved node: the projected free capacity
  at the shadow time minus the head's share; other nodes are unconstrained).
* A started job holds its nodes for ``min(start_delay_s + run_s, walltime_s)``: it is killed
  (state ``timeout``) at its time limit. ``start_delay_s`` models launch overhead (the
  allocation is held, the payload starts late).
* Event driven: the clock jumps between job ends and arrivals. A full pass (FIFO starts, a
  fresh reservation, the backfill scan) runs whenever resources are released (a job ends or
  is cancelled) or the head changes. An arrival behind the head is only checked against the
  standing reservation, like Slurm's quick scheduling attempt on submit between backfill
  cycles; jobs already queued cannot have become startable, since nothing was released.

Node choice: whole-node requests take the lowest-numbered idle nodes; partial requests fill
partly used nodes first (lowest number first), then idle ones, which keeps idle nodes for
wide jobs. All tie-breaks are deterministic, so a clone replays exactly what its parent would.

What-if
-------
:meth:`SimSite.what_if` answers "if I submitted this job now, when would it start and end?"
exactly, with the true run times of everything already queued and of the arrivals already
submitted for the future: it copies only the job's partition (lists and dicts of immutable
records, no deep copies) and plays it forward until the job *starts* (its end follows from
its own run time). :meth:`SimSite.what_if_many` answers several such questions for one
partition in one forward pass: the candidates are *ghosts* that take nothing until the first
moment one of them would start or reach the head of the queue; only then is that candidate
forked off and played on its own.

Job ends and limits are rounded to the microsecond (the resolution of snapshot timestamps),
so that a twin rebuilt from a snapshot sees the same simultaneous ends as the site.
:meth:`SimSite.seed_running` puts an already running job on given nodes (for such twins).

Snapshots
---------
:meth:`SimSite.snapshot` emits the same :class:`~federation.core.snapshot.SiteSnapshot` a probe of
a real site produces. Pending jobs carry a Slurm-style start estimate that assumes every job
runs to its time limit and nothing else arrives: the head job gets its exact EASY shadow time;
the jobs behind it are planned in priority order on a pooled capacity profile (each job
occupies its dominant share of a node times its node count from its estimated start to the
end of its time limit), like Slurm's backfill planner but without node fragmentation. No
pending job is estimated to start at the current instant (it would have started). Only the
first ``estimate_limit`` pending jobs per partition are planned (Slurm's ``bf_max_job_test``);
the others show no estimate.

Speed: a pass costs about the number of pending jobs (a plain loop that remembers which
request shapes already failed; from 1,024 pending jobs on, a numpy filter on aggregate bounds
first); the head's reservation walks running jobs in limit order (whole-node heads on
partitions of 256+ nodes use a vectorised node-free-time ranking instead).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Literal, NamedTuple

import numpy as np

from federation.core.errors import FederationError
from federation.core.snapshot import (
    JobRecord,
    NodeRecord,
    NodeStateName,
    PartitionSnapshot,
    SiteHealth,
    SiteSnapshot,
)
from federation.core.spec import PartitionSpec, SiteSpec

__all__ = [
    "DEFAULT_EPOCH",
    "SimJob",
    "SimJobState",
    "SimJobStatus",
    "SimRequestError",
    "SimSite",
    "UnknownSimJobError",
]

DEFAULT_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
"""Wall-clock time of simulated t = 0 in snapshots (override per site)."""

SimJobState = Literal["future", "pending", "running", "completed", "timeout", "cancelled"]
_INF = math.inf


class SimRequestError(FederationError, ValueError):
    """A job the simulated site cannot take (too big for the partition, bad time, ...)."""


class UnknownSimJobError(FederationError, KeyError):
    """A job id the simulated site never issued."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job request plus its true run time (which schedulers and predictors cannot see)."""

    partition: str
    walltime_s: float
    """Requested time limit; the job is killed when it is reached."""
    run_s: float
    """True run time of the payload."""
    nodes: int = 1
    cpus_per_node: int = 1
    mem_mb_per_node: int = 0
    gpus_per_node: int = 0
    submit_s: float | None = None
    """Arrival time; ``None`` means "now" at :meth:`SimSite.submit`. Later times queue up."""
    priority: int = 0
    """Higher runs first; ties go by submit time, then submission order."""
    name: str | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class SimJobStatus:
    """Where one job stands. ``end_s`` is the true end, known once the job has started."""

    job_id: str
    partition: str
    state: SimJobState
    submit_s: float
    start_s: float | None = None
    end_s: float | None = None
    limit_end_s: float | None = None
    """start + time limit: the end Slurm shows for a running job."""

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.submit_s


class _Q(NamedTuple):
    """A queued job; tuples order by priority key, and ``seq`` makes the key unique."""

    prio: float
    submit_s: float
    seq: int
    job_id: str
    job: SimJob
    shape: tuple[int, int, int, int]
    """(nodes, cpus, mem_mb, gpus per node), kept here for the hot loops."""


class _Run(NamedTuple):
    q: _Q
    start_s: float
    end_s: float
    limit_end_s: float
    nodes: tuple[int, ...]


class _Done(NamedTuple):
    q: _Q
    state: SimJobState
    start_s: float | None
    end_s: float


def _make_q(prio: int, submit_s: float, seq: int, job_id: str, job: SimJob) -> _Q:
    shape = (job.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node)
    return _Q(-float(prio), submit_s, seq, job_id, job, shape)


# Columns of _Part.pa: totals (nodes x per-node) and per-node requests, for the numpy filter
# that skips, in one vectorised step, the pending jobs that cannot fit anywhere right now.
_PA_COLS = 6  # n*c, n*m, n*g, c, m, g
_WHOLE_NODE_MIN = 256  # from this many nodes on, whole-node reservations use numpy
_VECTOR_MIN = 1024  # from this many pending jobs on, filter with numpy (a loop is faster below)


@dataclass(slots=True)
class _Ghost:
    """A what-if candidate riding along a forward pass without taking anything."""

    q: _Q
    start: float | None = None


@dataclass(slots=True)
class _Resv:
    """The head job's EASY reservation: shadow time and what it leaves on its nodes."""

    job_id: str
    shadow: float
    extra: dict[int, list[int]] = field(default_factory=dict)
    """Reserved node -> [cpus, mem_mb, gpus] a long backfill job may still take there."""
    blocked: set[int] = field(default_factory=set)
    """Reserved nodes a long backfill job cannot use at all (the head takes every CPU)."""


class _Part:
    """One partition's nodes, queue and clock. Everything mutable is copied by :meth:`clone`."""

    __slots__ = (
        "C",
        "G",
        "M",
        "arrivals",
        "arrivals_shared",
        "cancelled",
        "cursor",
        "delay",
        "dirty",
        "done",
        "ends",
        "free_c",
        "free_g",
        "free_m",
        "hist_cum",
        "hist_t",
        "hist_v",
        "idle",
        "limits",
        "n",
        "name",
        "node_lim",
        "node_runs",
        "now",
        "pa",
        "partial",
        "partial_sorted",
        "pending",
        "pending_ids",
        "resv",
        "running",
        "spec",
        "tot_c",
        "tot_g",
        "tot_m",
        "track",
        "units",
    )

    def __init__(self, spec: PartitionSpec, nodes: int, delay: float) -> None:
        self.spec = spec
        self.name = spec.name
        self.n = nodes
        self.C = spec.cpus_per_node
        self.M = spec.mem_gb_per_node * 1024
        self.G = spec.gpus_per_node
        self.delay = delay
        self.free_c = [self.C] * nodes
        self.free_m = [self.M] * nodes
        self.free_g = [self.G] * nodes
        self.tot_c = self.C * nodes
        self.tot_m = self.M * nodes
        self.tot_g = self.G * nodes
        self.idle: set[int] = set(range(nodes))
        self.partial: set[int] = set()
        self.partial_sorted: list[int] | None = []
        self.node_runs: list[tuple[float, ...]] = [()] * nodes
        """Per node: time-limit ends of the jobs on it."""
        self.node_lim: list[float] = [-_INF] * nodes
        """Per node: when its last job reaches its time limit (-inf when idle)."""
        self.pending: list[_Q] = []
        self.pa: np.ndarray | None = None
        """Request columns of ``pending``, row for row (see ``_PA_COLS``), kept only while the
        queue is long; never changed in place, so copies share it."""
        self.pending_ids: dict[str, _Q] = {}
        self.running: dict[str, _Run] = {}
        self.ends: list[tuple[float, int, str]] = []
        self.limits: list[tuple[float, int, str]] = []
        self.arrivals: list[tuple[float, int, _Q]] = []
        self.arrivals_shared = False
        self.cursor = 0
        self.cancelled: set[str] = set()
        self.done: dict[str, _Done] = {}
        self.resv: _Resv | None = None
        self.dirty = False
        self.now = 0.0
        self.units = 0  # allocated primary units: GPUs on GPU partitions, else CPUs
        self.track = True
        self.hist_t: list[float] = [0.0]
        self.hist_v: list[float] = [0.0]
        self.hist_cum: list[float] = [0.0]

    # -- copying --------------------------------------------------------------------------

    def clone(self, light: bool = False) -> _Part:
        c = _Part.__new__(_Part)
        c.spec, c.name, c.n, c.C, c.M, c.G, c.delay = (
            self.spec,
            self.name,
            self.n,
            self.C,
            self.M,
            self.G,
            self.delay,
        )
        c.free_c, c.free_m, c.free_g = self.free_c[:], self.free_m[:], self.free_g[:]
        c.tot_c, c.tot_m, c.tot_g = self.tot_c, self.tot_m, self.tot_g
        c.idle, c.partial = set(self.idle), set(self.partial)
        c.node_runs, c.node_lim = self.node_runs[:], self.node_lim[:]
        c.partial_sorted = self.partial_sorted  # replaced, never mutated
        c.pending = self.pending[:]
        c.pa = self.pa
        c.pending_ids = dict(self.pending_ids)

        c.running = dict(self.running)
        c.ends = self.ends[:]
        c.limits = self.limits[:]
        c.arrivals = self.arrivals
        c.arrivals_shared = self.arrivals_shared = True
        c.cursor = self.cursor
        c.cancelled = set(self.cancelled)
        c.resv = (
            None
            if self.resv is None
            else _Resv(
                self.resv.job_id,
                self.resv.shadow,
                {k: v[:] for k, v in self.resv.extra.items()},
                self.resv.blocked,  # never changed after creation
            )
        )
        c.dirty, c.now, c.units = self.dirty, self.now, self.units
        if light:
            c.done = {}
            c.track = False
            c.hist_t, c.hist_v, c.hist_cum = [self.now], [float(self.units)], [0.0]
        else:
            c.done = dict(self.done)
            c.track = self.track
            c.hist_t, c.hist_v, c.hist_cum = self.hist_t[:], self.hist_v[:], self.hist_cum[:]
        return c

    # -- requests -------------------------------------------------------------------------

    def check(self, job: SimJob) -> None:
        where = f"partition {self.name}"
        problems = []
        if not 1 <= job.nodes <= self.n:
            problems.append(f"nodes={job.nodes} (partition has {self.n})")
        if not 1 <= job.cpus_per_node <= self.C:
            problems.append(f"cpus_per_node={job.cpus_per_node} (nodes have {self.C})")
        if not 0 <= job.mem_mb_per_node <= self.M:
            problems.append(f"mem_mb_per_node={job.mem_mb_per_node} (nodes have {self.M} MB)")
        if not 0 <= job.gpus_per_node <= self.G:
            problems.append(f"gpus_per_node={job.gpus_per_node} (nodes have {self.G})")
        if not 0 < job.walltime_s <= self.spec.max_walltime_s:
            problems.append(
                f"walltime_s={job.walltime_s} (must be > 0 and <= {self.spec.max_walltime_s})"
            )
        if not job.run_s >= 0 or not math.isfinite(job.run_s):
            problems.append(f"run_s={job.run_s} (must be a finite number >= 0)")
        if problems:
            raise SimRequestError(f"{where} cannot take job: " + "; ".join(problems))

    def share(self, job: SimJob) -> float:
        """Node-equivalents the job occupies: node count x its dominant per-node share."""
        s = max(job.cpus_per_node / self.C, job.mem_mb_per_node / self.M)
        if self.G:
            s = max(s, job.gpus_per_node / self.G)
        return job.nodes * s

    def primary(self, job: SimJob) -> int:
        return job.nodes * (job.gpus_per_node if self.G else job.cpus_per_node)

    # -- node bookkeeping -----------------------------------------------------------------

    def _sorted_partial(self) -> list[int]:
        ps = self.partial_sorted
        if ps is None:
            ps = self.partial_sorted = sorted(self.partial)
        return ps

    def fit_now(self, n: int, c: int, m: int, g: int) -> list[int] | None:
        if n * c > self.tot_c or n * m > self.tot_m or n * g > self.tot_g:
            return None
        idle = self.idle
        if c == self.C:
            return heapq.nsmallest(n, idle) if len(idle) >= n else None
        chosen: list[int] = []
        if self.partial:
            fc, fm, fg = self.free_c, self.free_m, self.free_g
            for i in self._sorted_partial():
                if fc[i] >= c and fm[i] >= m and fg[i] >= g:
                    chosen.append(i)
                    if len(chosen) == n:
                        return chosen
        need = n - len(chosen)
        if len(idle) < need:
            return None
        return chosen + heapq.nsmallest(need, idle)

    def fit_long(self, n: int, c: int, m: int, g: int, resv: _Resv) -> list[int] | None:
        """Like :meth:`fit_now`, but on reserved nodes only what the head leaves over."""
        if n * c > self.tot_c or n * m > self.tot_m or n * g > self.tot_g:
            return None
        ex = resv.extra
        blocked = resv.blocked
        idle = self.idle
        chosen: list[int] = []
        if c < self.C and self.partial:
            fc, fm, fg = self.free_c, self.free_m, self.free_g
            for i in self._sorted_partial():
                if fc[i] >= c and fm[i] >= m and fg[i] >= g:
                    if i in blocked:
                        continue
                    e = ex.get(i)
                    if e is not None and (e[0] < c or e[1] < m or e[2] < g):
                        continue
                    chosen.append(i)
                    if len(chosen) == n:
                        return chosen
        need = n - len(chosen)
        if len(idle) < need:
            return None
        skip = blocked & idle if blocked else set()
        for i, e in ex.items():
            if i in idle and (e[0] < c or e[1] < m or e[2] < g):
                skip.add(i)
        if not skip:
            return chosen + heapq.nsmallest(need, idle)
        if len(idle) - len(skip) < need:
            return None
        picked = [i for i in heapq.nsmallest(need + len(skip), idle) if i not in skip]
        return chosen + picked[:need]

    def _take(self, nodes: Sequence[int], c: int, m: int, g: int) -> None:
        fc, fm, fg = self.free_c, self.free_m, self.free_g
        idle, partial = self.idle, self.partial
        changed = False
        for i in nodes:
            before = fc[i]
            fc[i] = after = before - c
            fm[i] -= m
            fg[i] -= g
            if before == self.C:
                idle.discard(i)
                if after > 0:
                    partial.add(i)
                    changed = True
            elif after == 0:
                partial.discard(i)
                changed = True
        if changed:
            self.partial_sorted = None
        k = len(nodes)
        self.tot_c -= k * c
        self.tot_m -= k * m
        self.tot_g -= k * g

    def _give(self, nodes: Sequence[int], c: int, m: int, g: int) -> None:
        fc, fm, fg = self.free_c, self.free_m, self.free_g
        idle, partial = self.idle, self.partial
        C = self.C
        changed = False
        for i in nodes:
            before = fc[i]
            fc[i] = after = before + c
            fm[i] += m
            fg[i] += g
            if after == C:
                idle.add(i)
                if before > 0:
                    partial.discard(i)
                    changed = True
            elif before == 0:
                partial.add(i)
                changed = True
        if changed:
            self.partial_sorted = None
        k = len(nodes)
        self.tot_c += k * c
        self.tot_m += k * m
        self.tot_g += k * g

    def _hist(self, t: float) -> None:
        if not self.track:
            return
        v = float(self.units)
        ht, hv, hc = self.hist_t, self.hist_v, self.hist_cum
        if ht[-1] == t:
            hv[-1] = v
        else:
            hc.append(hc[-1] + hv[-1] * (t - ht[-1]))
            ht.append(t)
            hv.append(v)

    # -- the pending list (kept in step with ``pa`` and ``pending_ids``) -------------------

    @staticmethod
    def _row(q: _Q) -> tuple[int, int, int, int, int, int]:
        n, c, m, g = q.shape
        return (n * c, n * m, n * g, c, m, g)

    def columns(self) -> np.ndarray:
        """``pa``, built on first use for a long queue."""
        if self.pa is None:
            self.pa = np.array([self._row(q) for q in self.pending], dtype=np.float64).reshape(
                -1, _PA_COLS
            )
        return self.pa

    def pend_insert(self, q: _Q) -> int:
        k = bisect.bisect_left(self.pending, q)
        self.pending.insert(k, q)
        if self.pa is not None:
            self.pa = np.insert(self.pa, k, self._row(q), axis=0)
        self.pending_ids[q.job_id] = q
        return k

    def pend_extend(self, qs: Sequence[_Q]) -> None:
        self.pending.extend(qs)
        self.pending.sort()
        self.pa = None
        for q in qs:
            self.pending_ids[q.job_id] = q

    def pend_delete(self, ks: Sequence[int]) -> None:
        """Drop pending rows ``ks`` (ascending) from the list and its columns."""
        pend = self.pending
        if len(ks) == 1:
            del pend[ks[0]]
        elif ks[-1] == len(ks) - 1:
            del pend[: len(ks)]
        else:
            for k in reversed(ks):
                del pend[k]
        if self.pa is None:
            return
        if len(pend) < _VECTOR_MIN // 2:
            self.pa = None
        elif ks[-1] == len(ks) - 1:
            self.pa = self.pa[len(ks) :]
        else:
            self.pa = np.delete(self.pa, ks, axis=0)

    # -- job life cycle -------------------------------------------------------------------

    def start(
        self, q: _Q, nodes: list[int], t: float, long: bool, delay: float | None = None
    ) -> None:
        job = q.job
        c, m, g = job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        self._take(nodes, c, m, g)
        if long and self.resv is not None:
            ex = self.resv.extra
            for i in nodes:
                e = ex.get(i)
                if e is not None:
                    e[0] -= c
                    e[1] -= m
                    e[2] -= g
        limit = _tick(t + job.walltime_s)
        held = (self.delay if delay is None else delay) + job.run_s
        end = limit if held >= job.walltime_s else _tick(t + held)
        runs, lims = self.node_runs, self.node_lim
        for i in nodes:
            runs[i] = (*runs[i], limit)
            if limit > lims[i]:
                lims[i] = limit
        run = _Run(q, t, end, limit, tuple(nodes))
        self.running[q.job_id] = run
        del self.pending_ids[q.job_id]
        heapq.heappush(self.ends, (end, q.seq, q.job_id))
        bisect.insort(self.limits, (limit, q.seq, q.job_id))
        self.units += self.primary(job)
        self._hist(t)

    def seed(self, q: _Q, nodes: Sequence[int]) -> None:
        """Start ``q`` now on exactly ``nodes`` (no launch delay: it is already running)."""
        job = q.job
        c, m, g = job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        picked = list(nodes)
        problems = []
        if len(picked) != job.nodes or len(set(picked)) != len(picked):
            problems.append(f"needs {job.nodes} distinct node(s), got {picked}")
        for i in picked:
            if not 0 <= i < self.n:
                problems.append(f"node index {i} out of range (partition has {self.n})")
            elif self.free_c[i] < c or self.free_m[i] < m or self.free_g[i] < g:
                problems.append(
                    f"node {i} has {self.free_c[i]} CPUs, {self.free_m[i]} MB, "
                    f"{self.free_g[i]} GPUs free"
                )
        if problems:
            raise SimRequestError(
                f"partition {self.name} cannot seed running job: " + "; ".join(problems)
            )
        self.pending_ids[q.job_id] = q
        self.start(q, picked, self.now, False, delay=0.0)
        self.dirty = True  # the standing reservation did not know this job

    def finish(self, job_id: str, t: float, state: SimJobState) -> None:
        r = self.running.pop(job_id)
        job = r.q.job
        self._give(r.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node)
        runs, lims = self.node_runs, self.node_lim
        for i in r.nodes:
            left = list(runs[i])
            left.remove(r.limit_end_s)
            runs[i] = tuple(left)
            lims[i] = max(left) if left else -_INF
        key = (r.limit_end_s, r.q.seq, job_id)
        k = bisect.bisect_left(self.limits, key)
        del self.limits[k]
        self.units -= self.primary(job)
        self._hist(t)
        self.done[job_id] = _Done(r.q, state, r.start_s, t)
        self.dirty = True

    def enqueue(self, qs: Sequence[_Q]) -> None:
        """Add arrived jobs; schedule at once if only they need checking, else mark dirty."""
        pend = self.pending
        at_front = False
        if len(qs) > 8:
            first = pend[0] if pend else None
            self.pend_extend(qs)
            at_front = first is None or pend[0] is not first
        else:
            for q in qs:
                at_front = self.pend_insert(q) == 0 or at_front
        if at_front or self.resv is None:
            self.dirty = True
        if self.dirty:
            return
        resv = self.resv
        assert resv is not None
        t = self.now
        for q in sorted(qs):
            long = t + q.job.walltime_s > resv.shadow
            nodes = self.fit_long(*q.shape, resv) if long else self.fit_now(*q.shape)
            if nodes is not None:
                self.pend_delete([bisect.bisect_left(pend, q)])
                self.start(q, nodes, t, long)

    def schedule(self, ghosts: list[_Ghost] | None = None) -> None:
        """Full pass: FIFO starts, then the head's reservation, then EASY backfill.

        ``ghosts`` (sorted by priority key) are what-if candidates: each is checked at its
        place in the priority order exactly as a queued job would be, but takes nothing.
        One that would start records the time; one that would become the head is forked
        off into its own copy of the partition and played until it starts.
        """
        self.dirty = False
        t = self.now
        pend = self.pending
        ng = len(ghosts) if ghosts else 0
        gi = 0
        i = 0
        n_pend = len(pend)
        while i < n_pend:
            q = pend[i]
            if gi < ng:
                assert ghosts is not None
                while gi < ng and ghosts[gi].q < q:
                    self._ghost_turn(ghosts[gi], i)
                    gi += 1
            nodes = self.fit_now(*q.shape)
            if nodes is None:
                break
            self.start(q, nodes, t, False)
            i += 1
        else:
            while gi < ng:
                assert ghosts is not None
                self._ghost_turn(ghosts[gi], i)
                gi += 1
        if i:
            self.pend_delete(range(i))
        if not pend:
            self.resv = None
            return
        resv = self.resv = self.reserve(pend[0])
        shadow = resv.shadow
        failed_short: set[tuple[int, int, int, int]] = set()
        failed_long: set[tuple[int, int, int, int]] = set()
        started: list[int] = []
        vector = len(pend) >= _VECTOR_MIN
        if vector:
            # Visit only jobs within every aggregate bound (free totals, and the largest free
            # amount on any node). Free capacity only shrinks during the pass, so the others
            # would fail anyway; after each start the rest is filtered again.
            cand = self._within_bounds(np.arange(1, len(pend)))
            if len(cand):
                lows = self.columns()[cand].min(axis=0).tolist()
        else:
            cand = np.arange(1, len(pend))
        cand_l: list[int] = cand.tolist()
        pos = 0
        while pos < len(cand_l):
            k = cand_l[pos]
            pos += 1
            q = pend[k]
            if gi < ng:
                assert ghosts is not None
                while gi < ng and ghosts[gi].q < q:
                    self._ghost_backfill(ghosts[gi], t, resv, failed_short, failed_long)
                    gi += 1
            if self.tot_c == 0:
                gi = ng
                break
            shape = q.shape
            if shape in failed_short:
                continue
            if t + q.job.walltime_s <= shadow:
                nodes = self.fit_now(*shape)
                if nodes is None:
                    failed_short.add(shape)
                    continue
                self.start(q, nodes, t, False)
            else:
                if shape in failed_long:
                    continue
                nodes = self.fit_long(*shape, resv)
                if nodes is None:
                    failed_long.add(shape)
                    continue
                self.start(q, nodes, t, True)
            started.append(k)
            if vector and pos < len(cand_l):
                if (
                    self.tot_c < lows[0]
                    or self.tot_m < lows[1]
                    or self.tot_g < lows[2]
                    or max(self.free_c) < lows[3]
                    or max(self.free_m) < lows[4]
                    or max(self.free_g) < lows[5]
                ):
                    break  # nothing left in the candidates can fit any more
                if len(cand_l) - pos > 64:
                    cand = self._within_bounds(cand[pos:])
                    cand_l = cand.tolist()
                    pos = 0
        while gi < ng:
            assert ghosts is not None
            self._ghost_backfill(ghosts[gi], t, resv, failed_short, failed_long)
            gi += 1
        if started:
            self.pend_delete(started)

    def _within_bounds(self, rows: np.ndarray) -> np.ndarray:
        """The pending rows (indices) whose request is within every aggregate bound now."""
        a = self.columns()[rows]
        mask = (
            (a[:, 0] <= self.tot_c)
            & (a[:, 1] <= self.tot_m)
            & (a[:, 2] <= self.tot_g)
            & (a[:, 3] <= max(self.free_c))
            & (a[:, 4] <= max(self.free_m))
            & (a[:, 5] <= max(self.free_g))
        )
        out: np.ndarray = rows[mask]
        return out

    def _ghost_backfill(
        self,
        gh: _Ghost,
        t: float,
        resv: _Resv,
        failed_short: set[tuple[int, int, int, int]],
        failed_long: set[tuple[int, int, int, int]],
    ) -> None:
        shape = gh.q.shape
        if shape in failed_short or self.tot_c == 0:
            return
        if t + gh.q.job.walltime_s <= resv.shadow:
            if self.fit_now(*shape) is None:
                failed_short.add(shape)
                return
        else:
            if shape in failed_long:
                return
            if self.fit_long(*shape, resv) is None:
                failed_long.add(shape)
                return
        gh.start = t

    def _ghost_turn(self, gh: _Ghost, i: int) -> None:
        """Every job ahead of the ghost has started: it starts now or becomes the head."""
        if self.fit_now(*gh.q.shape) is not None:
            gh.start = self.now
            return
        fork = self.clone(light=True)
        if i:
            fork.pend_delete(range(i))
        fork.pend_insert(gh.q)
        fork.resv = None
        fork.schedule()
        gh.start = fork.play_until_started(gh.q.job_id)

    def play_until_started(self, job_id: str) -> float:
        """Step until ``job_id`` (already queued or due to arrive) starts; return when."""
        running, done = self.running, self.done
        while job_id not in running and job_id not in done:
            t = self.next_event()
            if t == _INF:  # pragma: no cover - a valid job always starts eventually
                raise SimRequestError(f"job {job_id} on {self.name} never starts")
            self.step(t)
        r = running.get(job_id)
        start = r.start_s if r is not None else done[job_id].start_s
        if start is None:  # pragma: no cover - what-if jobs are never cancelled
            raise SimRequestError(f"job {job_id} on {self.name} was cancelled")
        return start

    def reserve(self, head: _Q) -> _Resv:
        """EASY shadow time of ``head``: running jobs released at their requested ends."""
        if head.job.cpus_per_node == self.C and self.n >= _WHOLE_NODE_MIN:
            return self._reserve_whole(head)
        return self._reserve_general(head)

    def _reserve_general(self, head: _Q) -> _Resv:
        job = head.job
        n, c, m, g = job.nodes, job.cpus_per_node, job.mem_mb_per_node, job.gpus_per_node
        fc, fm, fg = self.free_c, self.free_m, self.free_g
        count = len(self.idle) + sum(
            1 for i in self.partial if fc[i] >= c and fm[i] >= m and fg[i] >= g
        )
        delta: dict[int, list[int]] = {}
        became: list[tuple[float, int]] = []
        shadow = _INF
        running = self.running
        for lim, _, jid in self.limits:
            if lim > shadow:
                break
            r = running[jid]
            rj = r.q.job
            rc, rm, rg = rj.cpus_per_node, rj.mem_mb_per_node, rj.gpus_per_node
            for i in r.nodes:
                d = delta.get(i)
                if d is None:
                    d = delta[i] = [fc[i], fm[i], fg[i]]
                was = d[0] >= c and d[1] >= m and d[2] >= g
                d[0] += rc
                d[1] += rm
                d[2] += rg
                if not was and d[0] >= c and d[1] >= m and d[2] >= g:
                    count += 1
                    became.append((lim, i))
            if shadow == _INF and count >= n:
                shadow = lim
        if shadow == _INF:  # pragma: no cover - check() guarantees the job fits an empty partition
            raise SimRequestError(f"job {head.job_id} can never fit partition {self.name}")
        # Reserve nodes busy now first (in the order they free up), leaving the nodes that are
        # free now to backfill; then free partly used nodes, then idle ones.
        became.sort()
        chosen = [i for _, i in became[:n]]
        if len(chosen) < n:
            taken = set(chosen)
            more = [
                i
                for i in self._sorted_partial()
                if i not in taken and fc[i] >= c and fm[i] >= m and fg[i] >= g
            ]
            chosen += more[: n - len(chosen)]
            if len(chosen) < n:
                chosen += heapq.nsmallest(n - len(chosen), self.idle - taken)
        extra: dict[int, list[int]] = {}
        for i in chosen:
            d = delta.get(i) or [fc[i], fm[i], fg[i]]
            extra[i] = [d[0] - c, d[1] - m, d[2] - g]
        return _Resv(head.job_id, shadow, extra)

    def _reserve_whole(self, head: _Q) -> _Resv:
        """:meth:`reserve` for a head that takes whole nodes: only node-free times matter."""
        job = head.job
        n = job.nodes
        lims = np.asarray(self.node_lim)
        shadow = float(np.partition(lims, n - 1)[n - 1])  # idle nodes sort first (-inf)
        busy = np.flatnonzero((lims <= shadow) & (lims > -_INF))
        busy = busy[np.lexsort((busy, lims[busy]))][:n]
        chosen = busy.tolist()
        if len(chosen) < n:  # pragma: no cover - the head would fit now
            chosen += heapq.nsmallest(n - len(chosen), self.idle)
        return _Resv(head.job_id, shadow, blocked=set(chosen))

    def cancel(self, job_id: str) -> bool:
        t = self.now
        if job_id in self.running:
            self.finish(job_id, t, "cancelled")
            return True
        q = self.pending_ids.pop(job_id, None)
        if q is not None:
            k = bisect.bisect_left(self.pending, q)
            self.pend_delete([k])
            self.done[job_id] = _Done(q, "cancelled", None, t)
            if k == 0:
                self.dirty = True
            return True
        if job_id in self.done or job_id in self.cancelled:
            return False
        self.cancelled.add(job_id)
        return True

    # -- time -----------------------------------------------------------------------------

    def next_event(self) -> float:
        te = self.ends[0][0] if self.ends else _INF
        ta = self.arrivals[self.cursor][0] if self.cursor < len(self.arrivals) else _INF
        return te if te <= ta else ta

    def step(self, t: float, ghosts: list[_Ghost] | None = None) -> None:
        """Process every event at time ``t`` (completions, then arrivals), then schedule."""
        self.now = t
        ends = self.ends
        running = self.running
        while ends and ends[0][0] <= t:
            end, _, jid = heapq.heappop(ends)
            r = running.get(jid)
            if r is not None and r.end_s == end:
                killed = self.delay + r.q.job.run_s > r.q.job.walltime_s
                self.finish(jid, t, "timeout" if killed else "completed")
        arr = self.arrivals
        new: list[_Q] = []
        while self.cursor < len(arr) and arr[self.cursor][0] <= t:
            q = arr[self.cursor][2]
            self.cursor += 1
            if q.job_id in self.cancelled:
                self.cancelled.discard(q.job_id)
                self.done[q.job_id] = _Done(q, "cancelled", None, q.submit_s)
                continue
            new.append(q)
        if new:
            self.enqueue(new)
        if self.dirty:
            self.schedule(ghosts)

    def advance(self, to_t: float) -> None:
        while True:
            t = self.next_event()
            if t > to_t:
                break
            self.step(t)
        if to_t > self.now:
            self.now = to_t

    def add_future(self, items: list[tuple[float, int, _Q]]) -> None:
        if self.arrivals_shared:
            self.arrivals = self.arrivals[self.cursor :]
            self.cursor = 0
            self.arrivals_shared = False
        if len(items) == 1:
            bisect.insort(self.arrivals, items[0], lo=self.cursor)
        else:
            rest = self.arrivals[self.cursor :]
            rest.extend(items)
            rest.sort()
            self.arrivals = rest
            self.cursor = 0

    # -- queries --------------------------------------------------------------------------

    def integral(self, t: float) -> float:
        ht = self.hist_t
        k = bisect.bisect_right(ht, t) - 1
        if k < 0:
            return 0.0
        return self.hist_cum[k] + self.hist_v[k] * (t - ht[k])

    @property
    def capacity_units(self) -> int:
        return self.n * (self.G if self.G else self.C)

    def estimates(self, limit: int | None) -> dict[str, float]:
        """Slurm-style start estimates for pending jobs (see the module docstring)."""
        pend = self.pending if limit is None else self.pending[:limit]
        if not pend:
            return {}
        now = self.now
        running = self.running
        lims = self.limits
        free_now = float(self.n) - sum(self.share(r.q.job) for r in running.values())
        if lims:
            t_arr = np.fromiter((x[0] for x in lims), dtype=np.float64, count=len(lims))
            s_arr = np.fromiter(
                (self.share(running[x[2]].q.job) for x in lims), dtype=np.float64, count=len(lims)
            )
            ut = np.unique(np.maximum(t_arr, now))
            rel = np.cumsum(s_arr)[np.searchsorted(t_arr, ut, side="right") - 1]
            if ut[0] > now:
                ts = np.concatenate(([now], ut))
                free = np.concatenate(([free_now], free_now + rel))
            else:
                ts, free = ut, free_now + rel
        else:
            ts = np.array([now], dtype=np.float64)
            free = np.array([free_now], dtype=np.float64)
        # Preallocated profile (breakpoints ``ts``, free node-equivalents ``free`` from each
        # breakpoint to the next; the last segment runs forever): each job adds at most two
        # breakpoints, inserted by shifting in place.
        size = len(ts)
        cap = size + 2 * len(pend) + 2
        T = np.empty(cap, dtype=np.float64)
        F = np.empty(cap, dtype=np.float64)
        T[:size], F[:size] = ts, free
        bad = np.empty(cap + 1, dtype=np.int64)
        bad[0] = 0
        out: dict[str, float] = {}
        resv = self.resv
        for q in pend:
            job = q.job
            d = self.share(job)
            w = job.walltime_s
            Tn = T[:size]
            if resv is not None and q.job_id == resv.job_id:
                start = resv.shadow
                k = int(Tn.searchsorted(start, side="right")) - 1
                if T[k] != start:
                    k += 1
                    T[k + 1 : size + 1] = T[k:size]
                    F[k + 1 : size + 1] = F[k:size]
                    T[k] = start
                    F[k] = F[k - 1]
                    size += 1
                    Tn = T[:size]
            else:
                np.cumsum(F[:size] < d - 1e-9, out=bad[1 : size + 1])
                j = Tn.searchsorted(Tn + w, side="left")
                ok = bad[j] == bad[:size]
                ok[0] &= size == 1  # still pending after a pass: it cannot start right now
                k = int(np.argmax(ok))
                start = float(T[k])
            out[q.job_id] = start
            stop = start + w
            e = int(Tn.searchsorted(stop, side="left"))
            if e >= size or T[e] != stop:
                T[e + 1 : size + 1] = T[e:size]
                F[e + 1 : size + 1] = F[e:size]
                T[e] = stop
                F[e] = F[e - 1]
                size += 1
            F[k:e] -= d
        return out


def _scaled_nodes(p: PartitionSpec, node_scale: float | None, nodes: Mapping[str, int]) -> int:
    if p.name in nodes:
        n = int(nodes[p.name])
    elif node_scale is not None:
        n = max(1, round(p.nodes_real * node_scale))
    else:
        n = p.nodes_real
    if n < 1:
        raise SimRequestError(f"partition {p.name}: node count must be >= 1, got {n}")
    return n


class SimSite:
    """One simulated Slurm site (see the module docstring for the model).

    ``node_scale`` multiplies every partition's ``nodes_real`` (rounded, at least 1);
    ``nodes`` sets exact counts per partition name and wins over ``node_scale``.
    ``start_delay_s``: launch overhead per job (the allocation is held meanwhile).
    ``epoch``: the wall-clock time of t = 0 in snapshots.
    ``estimate_limit``: like Slurm's ``bf_max_job_test``, how many pending jobs per partition
    get a start estimate in snapshots (``None``: all).
    """

    def __init__(
        self,
        spec: SiteSpec,
        node_scale: float | None = None,
        *,
        nodes: Mapping[str, int] | None = None,
        start_delay_s: float = 0.0,
        epoch: datetime = DEFAULT_EPOCH,
        estimate_limit: int | None = 500,
    ) -> None:
        if start_delay_s < 0:
            raise SimRequestError(f"start_delay_s must be >= 0, got {start_delay_s}")
        unknown = set(nodes or {}) - {p.name for p in spec.partitions}
        if unknown:
            raise SimRequestError(
                f"site {spec.name} has no partition(s) {sorted(unknown)} "
                f"(has: {', '.join(p.name for p in spec.partitions)})"
            )
        self.spec = spec
        self.start_delay_s = float(start_delay_s)
        self.epoch = epoch
        self.estimate_limit = estimate_limit
        self._parts: dict[str, _Part] = {
            p.name: _Part(p, _scaled_nodes(p, node_scale, nodes or {}), self.start_delay_s)
            for p in spec.partitions
        }
        self._now = 0.0
        self._seq = 0
        self._where: dict[str, str] = {}
        self._node_recs: dict[tuple[str, int, int, int, int], NodeRecord] = {}
        self._run_recs: dict[tuple[str, datetime], JobRecord] = {}
        """Snapshot records of unchanged nodes and running jobs (immutable, so shared)."""

    # -- basics ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def now(self) -> float:
        """Simulated seconds since t = 0."""
        return self._now

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(self._parts)

    def node_count(self, partition: str) -> int:
        return self._part(partition).n

    def jobs_running(self, partition: str | None = None) -> int:
        return sum(len(p.running) for p in self._select(partition))

    def jobs_pending(self, partition: str | None = None) -> int:
        return sum(len(p.pending) for p in self._select(partition))

    def _select(self, partition: str | None) -> list[_Part]:
        return list(self._parts.values()) if partition is None else [self._part(partition)]

    def _part(self, name: str) -> _Part:
        p = self._parts.get(name)
        if p is None:
            raise SimRequestError(
                f"site {self.spec.name} has no partition {name!r} (has: {', '.join(self._parts)})"
            )
        return p

    # -- submitting -----------------------------------------------------------------------

    def _make_q(self, job: SimJob) -> tuple[_Part, _Q]:
        part = self._part(job.partition)
        part.check(job)
        t = self._now if job.submit_s is None else float(job.submit_s)
        if t < self._now:
            raise SimRequestError(
                f"job submit_s={t} is in the past (site clock is at {self._now}); "
                "submit with submit_s=None for now"
            )
        self._seq += 1
        jid = str(self._seq)
        self._where[jid] = part.name
        return part, _make_q(job.priority, t, self._seq, jid, job)

    def submit(self, job: SimJob) -> str:
        """Queue ``job`` (now, or at ``job.submit_s`` if later); return its job id."""
        part, q = self._make_q(job)
        if q.submit_s > self._now:
            part.add_future([(q.submit_s, q.seq, q)])
        else:
            part.advance(self._now)
            part.enqueue([q])
            if part.dirty:
                part.schedule()
        return q.job_id

    def submit_many(self, jobs: Iterable[SimJob]) -> list[str]:
        """Queue many jobs at once (one sort per partition: use this to preload a trace)."""
        ids: list[str] = []
        now_items: dict[str, list[_Q]] = {}
        future: dict[str, list[tuple[float, int, _Q]]] = {}
        for job in jobs:
            part, q = self._make_q(job)
            ids.append(q.job_id)
            if q.submit_s > self._now:
                future.setdefault(part.name, []).append((q.submit_s, q.seq, q))
            else:
                now_items.setdefault(part.name, []).append(q)
        for name, items in future.items():
            self._parts[name].add_future(items)
        for name, qs in now_items.items():
            part = self._parts[name]
            part.advance(self._now)
            part.enqueue(qs)
            if part.dirty:
                part.schedule()
        return ids

    def seed_running(self, job: SimJob, nodes: Sequence[int]) -> str:
        """Put ``job`` on the site as already running, now, on exactly these nodes.

        ``nodes`` are 0-based node indices of ``job.partition`` (node ``i`` is named
        ``<partition>-<i + 1:04d>`` in snapshots), one per ``job.nodes``; each must have the
        job's per-node CPUs, memory and GPUs free. ``job.walltime_s`` is the time left until
        its limit and ``job.run_s`` the time it really has left (no launch delay is added).
        This is how a twin rebuilds a probed queue with the real allocation (and so the real
        fragmentation). Returns the job id; raises :class:`SimRequestError` if it cannot fit.
        """
        if job.submit_s is not None and job.submit_s != self._now:
            raise SimRequestError("seed_running: a running job has no future submit time")
        part = self._part(job.partition)
        part.check(job)
        part.advance(self._now)
        self._seq += 1
        jid = str(self._seq)
        q = _make_q(job.priority, self._now, self._seq, jid, job)
        part.seed(q, nodes)
        self._where[jid] = part.name
        if part.pending:
            part.schedule()
        else:
            part.dirty = False
            part.resv = None
        return jid

    def cancel(self, job_id: str) -> bool:
        """Cancel a future, pending or running job; ``False`` if it had already finished."""
        part = self._part(self._where_is(job_id))
        part.advance(self._now)
        ok = part.cancel(job_id)
        if part.dirty:
            part.schedule()
        return ok

    def _where_is(self, job_id: str) -> str:
        name = self._where.get(job_id)
        if name is None:
            raise UnknownSimJobError(f"site {self.spec.name} has no job {job_id!r}")
        return name

    # -- time -----------------------------------------------------------------------------

    def advance(self, to_t: float) -> None:
        """Play every partition forward to ``to_t`` (event by event, not second by second)."""
        if to_t < self._now:
            raise SimRequestError(f"cannot go back in time: now={self._now}, asked {to_t}")
        for p in self._parts.values():
            p.advance(to_t)
        self._now = float(to_t)

    def next_event_s(self) -> float | None:
        """Time of the next job end or arrival anywhere on the site (``None``: no more)."""
        t = min((p.next_event() for p in self._parts.values()), default=_INF)
        return None if t == _INF else t

    def run_until_idle(self) -> None:
        """Advance until nothing is queued, running or still to arrive."""
        while (t := self.next_event_s()) is not None:
            self.advance(t)

    # -- jobs -----------------------------------------------------------------------------

    def status(self, job_id: str) -> SimJobStatus:
        part = self._part(self._where_is(job_id))
        return _status(part, job_id)

    def statuses(self, partition: str | None = None) -> Iterator[SimJobStatus]:
        """Every job the site knows of, per partition: finished (in the order they ended),
        running, pending (in priority order), then future arrivals (by arrival time)."""
        for p in self._select(partition):
            for jid in p.done:
                yield _status(p, jid)
            for r in sorted(p.running.values(), key=lambda r: r.q.seq):
                yield _status(p, r.q.job_id)
            for q in p.pending:
                yield SimJobStatus(q.job_id, p.name, "pending", q.submit_s)
            for t, _, q in islice(p.arrivals, p.cursor, None):
                state: SimJobState = "cancelled" if q.job_id in p.cancelled else "future"
                yield SimJobStatus(q.job_id, p.name, state, t)

    def finished_since(self, since_s: float, partition: str | None = None) -> list[SimJobStatus]:
        """Jobs that ended (completed, timed out, cancelled) after ``since_s``, by end time:
        what ``sacct`` would add since then. Costs only the jobs returned."""
        out: list[SimJobStatus] = []
        for p in self._select(partition):
            got: list[SimJobStatus] = []
            for jid in reversed(p.done):
                if p.done[jid].end_s <= since_s:
                    break
                got.append(_status(p, jid))
            out.extend(reversed(got))
        out.sort(key=lambda s: s.end_s if s.end_s is not None else -_INF)
        return out

    # -- what-if --------------------------------------------------------------------------

    def clone(self) -> SimSite:
        """An independent copy (shares only immutable records); the cheap way to branch."""
        c = SimSite.__new__(SimSite)
        c.spec, c.start_delay_s, c.epoch = self.spec, self.start_delay_s, self.epoch
        c.estimate_limit = self.estimate_limit
        c._parts = {k: p.clone() for k, p in self._parts.items()}
        c._now, c._seq, c._where = self._now, self._seq, dict(self._where)
        c._node_recs, c._run_recs = self._node_recs, self._run_recs
        return c

    def what_if(self, job: SimJob, *, future_arrivals: bool = True) -> tuple[float, float]:
        """(start, end) of ``job`` if submitted now, given everything already submitted.

        Exact: equals submitting it to a :meth:`clone` and advancing until it ends. Costs one
        forward simulation of the job's partition from now until the job starts.
        ``future_arrivals=False`` ignores jobs submitted for later times (what the queue as it
        stands implies, with true run times): cheaper, and no longer the true future.
        """
        return self.what_if_many([job], future_arrivals=future_arrivals)[0]

    def what_if_many(
        self, jobs: Sequence[SimJob], *, future_arrivals: bool = True
    ) -> list[tuple[float, float]]:
        """:meth:`what_if` for several alternative jobs (each considered alone).

        Jobs for the same partition share one forward pass: until one of them would start or
        become the head of the queue, none of them changes anything, so they ride along as
        ghosts and are forked off one by one at that moment.
        """
        out: list[tuple[float, float] | None] = [None] * len(jobs)
        by_part: dict[str, list[int]] = {}
        for k, job in enumerate(jobs):
            self._part(job.partition).check(job)
            if job.submit_s is not None and job.submit_s < self._now:
                raise SimRequestError(f"what_if job submit_s={job.submit_s} is in the past")
            by_part.setdefault(job.partition, []).append(k)
        for name, idxs in by_part.items():
            part = self._parts[name]
            part.advance(self._now)
            answers = _what_if_part(part, [jobs[k] for k in idxs], self._seq, future_arrivals)
            for k, answer in zip(idxs, answers, strict=True):
                out[k] = answer
        return [x for x in out if x is not None]

    # -- measurement ----------------------------------------------------------------------

    def utilization(
        self, window: tuple[float, float] | None = None, partition: str | None = None
    ) -> float:
        """Allocated fraction of capacity over ``window`` (default: 0 to now).

        Capacity is GPUs on GPU partitions and CPUs elsewhere; several partitions are
        weighted by node count. Times after ``now`` are not counted.
        """
        t0, t1 = window if window is not None else (0.0, self._now)
        t1 = min(t1, self._now)
        if t1 <= t0:
            return 0.0
        num = 0.0
        den = 0.0
        for p in self._select(partition):
            if not p.track:
                continue
            frac = (p.integral(t1) - p.integral(t0)) / (p.capacity_units * (t1 - t0))
            num += frac * p.n
            den += p.n
        return num / den if den else 0.0

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self, now_dt: datetime | None = None) -> SiteSnapshot:
        """The site as a probe would see it now (``now_dt``: wall clock to stamp it with)."""
        for p in self._parts.values():
            p.advance(self._now)
        taken = now_dt if now_dt is not None else self.epoch + timedelta(seconds=self._now)
        now = self._now

        origin = taken - timedelta(seconds=now)  # wall clock of t = 0 in this snapshot

        def stamp(t: float) -> datetime:
            return origin + timedelta(seconds=t)

        nodes: list[NodeRecord] = []
        parts: list[PartitionSnapshot] = []
        jobs: list[JobRecord] = []
        for p in self._parts.values():
            gtype = p.spec.gpu_type
            states: dict[str, int] = {}
            cache = self._node_recs
            if len(cache) > 100_000:
                cache.clear()
            rcache = self._run_recs
            if len(rcache) > 100_000:
                rcache.clear()
            for i in range(p.n):
                fc = p.free_c[i]
                state: NodeStateName = (
                    "idle" if fc == p.C else ("allocated" if fc == 0 else "mixed")
                )
                states[state] = states.get(state, 0) + 1
                key = (p.name, i, fc, p.free_m[i], p.free_g[i])
                rec = cache.get(key)
                if rec is None:
                    rec = cache[key] = NodeRecord.model_construct(
                        name=f"{p.name}-{i + 1:04d}",
                        partition=p.name,
                        state=state,
                        state_flags=(),
                        reason=None,
                        cpus_total=p.C,
                        cpus_alloc=p.C - fc,
                        mem_mb_total=p.M,
                        mem_mb_alloc=p.M - p.free_m[i],
                        gpus_total_by_type={gtype: p.G} if gtype else {},
                        gpus_alloc_by_type={gtype: p.G - p.free_g[i]} if gtype else {},
                        features=p.spec.features,
                    )
                nodes.append(rec)
            est = p.estimates(self.estimate_limit)
            reasons: dict[str, int] = {}
            head = p.pending[0].job_id if p.pending else None
            for r in sorted(p.running.values(), key=lambda r: r.q.seq):
                rkey = (r.q.job_id, origin)
                jrec = rcache.get(rkey)
                if jrec is None:
                    jrec = rcache[rkey] = _job_record(
                        p, r.q, "running", None, stamp(r.start_s), stamp, r
                    )
                jobs.append(jrec)
            for q in p.pending:
                reason = "Resources" if q.job_id == head else "Priority"
                reasons[reason] = reasons.get(reason, 0) + 1
                s = est.get(q.job_id)
                jobs.append(
                    _job_record(p, q, "pending", reason, None if s is None else stamp(s), stamp)
                )
            starts = list(est.values())
            cpus_total = p.C * p.n
            cpus_alloc = cpus_total - p.tot_c
            parts.append(
                PartitionSnapshot.model_construct(
                    site=self.spec.name,
                    partition=p.name,
                    state="up",
                    max_time_s=p.spec.max_walltime_s,
                    nodes_total=p.n,
                    nodes_by_state=states,
                    cpus_total=cpus_total,
                    cpus_alloc=cpus_alloc,
                    cpus_idle=p.tot_c,
                    cpus_unavailable=0,
                    mem_gb_total=p.M * p.n / 1024.0,
                    mem_gb_alloc=(p.M * p.n - p.tot_m) / 1024.0,
                    gpus_total_by_type={gtype: p.G * p.n} if gtype else {},
                    gpus_alloc_by_type={gtype: p.G * p.n - p.tot_g} if gtype else {},
                    jobs_running=len(p.running),
                    jobs_pending=len(p.pending),
                    pending_reasons=reasons,
                    earliest_pending_start=stamp(min(starts)) if starts else None,
                    latest_pending_start=stamp(max(starts)) if starts else None,
                )
            )
        return SiteSnapshot.model_construct(
            site=self.spec.name,
            taken_at=taken,
            health=SiteHealth.model_construct(
                reachable=True, probe_age_s=0.0, probe_duration_s=0.0, error=None
            ),
            slurm_version="sim",
            partitions=tuple(parts),
            nodes=tuple(nodes),
            jobs=tuple(jobs),
        )


def _job_record(
    p: _Part,
    q: _Q,
    state: Literal["pending", "running"],
    reason: str | None,
    start: datetime | None,
    stamp: Callable[[float], datetime],
    run: _Run | None = None,
) -> JobRecord:
    job = q.job
    return JobRecord.model_construct(
        job_id=q.job_id,
        partition=p.name,
        state=state,
        reason=reason,
        user=job.user,
        name=job.name,
        nodes=job.nodes,
        cpus=job.nodes * job.cpus_per_node,
        mem_mb=job.mem_mb_per_node,
        gpus=job.nodes * job.gpus_per_node,
        gpu_type=p.spec.gpu_type if job.gpus_per_node else None,
        time_limit_s=math.ceil(job.walltime_s),
        submit_time=stamp(q.submit_s),
        start_time=start,
        end_time=None if run is None else stamp(run.limit_end_s),
        priority=job.priority,
        node_names=() if run is None else tuple(f"{p.name}-{i + 1:04d}" for i in run.nodes),
    )


def _status(part: _Part, job_id: str) -> SimJobStatus:
    r = part.running.get(job_id)
    if r is not None:
        return SimJobStatus(
            job_id, part.name, "running", r.q.submit_s, r.start_s, r.end_s, r.limit_end_s
        )
    d = part.done.get(job_id)
    if d is not None:
        limit = None if d.start_s is None else _tick(d.start_s + d.q.job.walltime_s)
        end = d.end_s if d.start_s is not None else None
        return SimJobStatus(job_id, part.name, d.state, d.q.submit_s, d.start_s, end, limit)
    q = part.pending_ids.get(job_id)
    if q is not None:
        return SimJobStatus(job_id, part.name, "pending", q.submit_s)
    for t, _, fq in islice(part.arrivals, part.cursor, None):
        if fq.job_id == job_id:
            state: SimJobState = "cancelled" if job_id in part.cancelled else "future"
            return SimJobStatus(job_id, part.name, state, t)
    raise UnknownSimJobError(
        f"job {job_id!r} is no longer tracked by this copy of partition {part.name} "
        "(what-if copies keep no history)"
    )


def _tick(t: float) -> float:
    """Job ends on the microsecond grid of snapshot timestamps, so that a twin rebuilt from a
    snapshot sees the same simultaneous ends as the site (float sums differ by ~1e-11 s)."""
    return round(t, 6)


def _end_of(part: _Part, job: SimJob, start: float) -> float:
    held = part.delay + job.run_s
    return _tick(start + job.walltime_s) if held >= job.walltime_s else _tick(start + held)


def _what_if_part(
    part: _Part, jobs: Sequence[SimJob], seq: int, future_arrivals: bool = True
) -> list[tuple[float, float]]:
    """Exact what-if for alternative ``jobs`` on one partition (see :meth:`SimSite.what_if_many`).

    Each candidate is what the next submission (sequence number ``seq + 1``) would be. At
    submission it either starts at once (it backfills), or it is the new head (then it is
    forked off at once), or it waits as a ghost in one shared forward pass of a copy.
    """
    base = part.clone(light=True)
    if not future_arrivals:
        base.arrivals, base.cursor, base.arrivals_shared = [], 0, False
    now = base.now
    starts: list[float | None] = [None] * len(jobs)
    ghosts: dict[int, _Ghost] = {}
    for k, job in enumerate(jobs):
        t = now if job.submit_s is None else float(job.submit_s)
        q = _make_q(job.priority, t, seq + 1, f"what-if-{k}", job)
        if t > now:  # arrives later: play a copy of its own
            fork = base.clone(light=True)
            fork.add_future([(t, q.seq, q)])
            starts[k] = fork.play_until_started(q.job_id)
            continue
        pend = base.pending
        resv = base.resv
        if base.dirty or resv is None or not pend or q < pend[0]:
            fork = base.clone(light=True)
            fork.enqueue([q])
            if fork.dirty:
                fork.schedule()
            starts[k] = fork.play_until_started(q.job_id)
            continue
        long = now + job.walltime_s > resv.shadow
        fits = base.fit_long(*q.shape, resv) if long else base.fit_now(*q.shape)
        if fits is not None:
            starts[k] = now
        else:
            ghosts[k] = _Ghost(q)
    waiting = sorted(ghosts.values(), key=lambda g: g.q)
    while waiting:
        t = base.next_event()
        if t == _INF:  # pragma: no cover - the queue ahead of a ghost always drains
            raise SimRequestError(f"what-if on {part.name}: queue never drains")
        base.step(t, waiting)
        waiting = [g for g in waiting if g.start is None]
    out: list[tuple[float, float]] = []
    for k, job in enumerate(jobs):
        gh = ghosts.get(k)
        start = gh.start if gh is not None else starts[k]
        assert start is not None
        out.append((start, _end_of(part, job, start)))
    return out
