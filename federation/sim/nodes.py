"""One simulated partition's state: its nodes, its pending list, its clock and usage history.

:class:`_PartState` holds everything that changes as a partition runs (free CPUs, memory and
GPUs per node, the idle and partly used node sets, the pending list with its numpy columns, the
running and finished jobs, the utilization history) and the bookkeeping that keeps it
consistent: taking and giving back node resources, inserting and deleting pending jobs, checking
a request against the partition, and copying the whole state cheaply for what-if branches. It
makes no scheduling decisions; :mod:`federation.sim.backfill` and :mod:`federation.sim.partition`
build those on top of it.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from typing import Self

import numpy as np

from federation.core.spec import PartitionSpec
from federation.sim.jobs import _INF, _Q, SimJob, SimRequestError, _Done, _Resv, _Run

# Columns of _Part.pa: totals (nodes x per-node) and per-node requests, for the numpy filter
# that skips, in one vectorised step, the pending jobs that cannot fit anywhere right now.
_PA_COLS = 6  # n*c, n*m, n*g, c, m, g
_VECTOR_MIN = 1024  # from this many pending jobs on, filter with numpy (a loop is faster below)


class _PartState:
    """One partition's nodes, queue and clock. Everything mutable is copied by :meth:`clone`.

    The state and its bookkeeping only: :class:`~federation.sim.backfill._PartPlan` adds the
    EASY reservation and start estimates, :class:`~federation.sim.partition._Part` the
    scheduler and the clock.
    """

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

    def clone(self, light: bool = False) -> Self:
        c = type(self).__new__(type(self))
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
