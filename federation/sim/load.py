"""Turn a real job trace into background load for one simulated site.

Each partition of the site gets its own stream of trace jobs, so that every partition reaches
the target utilization on its own:

1. **Source.** GPU partitions draw from ``gpu_trace`` (its jobs with GPUs, e.g. Alibaba pods)
   when one is given; otherwise, like CPU partitions, from ``trace``.
2. **Size.** A job from a processor-counted trace (SWF) keeps its *fraction of the trace's
   machine*: ``procs / trace_procs`` of the machine becomes the same fraction of the
   partition's nodes (``e`` node-equivalents). ``e >= 1`` -> ``round(e)`` whole nodes;
   ``e < 1`` -> one node, shared: ``ceil(e * cpus)`` CPUs on a CPU partition, or
   ``round(e * gpus)`` GPUs (at least one) with the matching share of CPUs and memory on a GPU
   partition. A job with GPUs (Alibaba) keeps its *absolute* size: its GPU count (on
   ``ceil(gpus / gpus_per_node)`` whole nodes when it needs more than one node) and its CPUs
   and memory capped at a node. A pod without a processor count on a CPU partition keeps its
   CPUs. Jobs bigger than the partition are clipped to it (counted).
3. **Times.** The true run time is the trace's (capped at the partition's maximum walltime,
   counted); the time limit is the trace's request, raised to the run time if the job ran
   over it, capped at the maximum. Traces without requests (Alibaba) get
   ``run x r`` rounded up to a usual limit (10 min, 15, 30 min, 1, 2, 4, 8, 12, 24, 48 h),
   with ``r`` log-uniform in [1, 8] (median 2.8, about the KTH median run/request of 0.4).
   Jobs with zero or unknown run time are dropped (counted): in the logs they are mostly
   cancelled before they ran.
4. **Window and rate.** Only the trace's active span is used: the shortest interval of
   submit times holding 98% of its jobs (this drops the months of sparse pod creations that
   open the Alibaba list, and stray jobs at either end of a log). From a start point in it
   (``start_offset_s`` into it, or a seeded random point) consecutive jobs are taken,
   wrapping around at the end, until their
   work (partition-primary units x run time: GPUs on GPU partitions, CPUs elsewhere) equals
   ``target x capacity x duration``. Their arrival times are then stretched or compressed
   linearly onto ``[0, duration)``: the arrival *rate* is scaled to the site, while the
   order, burstiness, sizes and run times of the trace are kept. Pauses between arrivals
   longer than ``max_gap_s`` (default 8 h of trace time: outages, holidays) are shortened to
   it first, so that a window does not fall silent for days.

The *offered* utilization is the target by construction. What the queue *achieves* is lower
at the start (the site begins empty: leave a warm-up before measuring) and can be lower at
high targets (fragmentation, and jobs still queued at the end); :func:`replay` and
:meth:`~federation.sim.queue.SimSite.utilization` measure it.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from federation.core.errors import FederationError
from federation.core.spec import PartitionSpec, SiteSpec
from federation.sim.queue import SimJob, SimSite
from federation.sim.traces import Trace, TraceJob

__all__ = [
    "WALLTIME_LADDER_S",
    "BackgroundLoad",
    "LoadError",
    "PartitionLoad",
    "background_load",
    "busy_start_offset",
    "map_job",
    "replay",
    "window_offered",
]

WALLTIME_LADDER_S: tuple[int, ...] = (
    600,
    900,
    1800,
    3600,
    7200,
    14400,
    28800,
    43200,
    86400,
    172800,
)
"""Usual time limits, for traces that record none."""


class LoadError(FederationError, ValueError):
    """Background load that cannot be built (no usable jobs, bad target, ...)."""


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """How one partition's background stream was made."""

    partition: str
    nodes: int
    source: str
    """'trace', 'gpu_trace', or 'trace (as GPU shares)' for a CPU trace on GPU nodes."""
    jobs: int
    target_utilization: float
    offered_utilization: float
    """Work submitted / (capacity x duration): the target, up to the last job's granularity."""
    trace_start_s: float
    """Trace time of the first job taken."""
    trace_span_s: float
    """Trace seconds covered by the jobs taken, long pauses shortened (more than the trace's
    span when it wrapped)."""
    time_scale: float
    """Simulated seconds per trace second (< 1: arrivals compressed, > 1: stretched)."""
    clipped: int = 0
    runtime_capped: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BackgroundLoad:
    """Jobs for one site (sorted by submit time) and how each partition's share was made."""

    site: str
    duration_s: float
    seed: int
    nodes: dict[str, int]
    """Node count per partition the load was sized for: build the site with the same."""
    jobs: tuple[SimJob, ...]
    partitions: tuple[PartitionLoad, ...]

    def partition(self, name: str) -> PartitionLoad:
        for p in self.partitions:
            if p.partition == name:
                return p
        raise KeyError(f"no load for partition {name!r}")

    def site_for(self, spec: SiteSpec, *, start_delay_s: float = 0.0) -> SimSite:
        """An empty :class:`SimSite` with the node counts this load was sized for."""
        return SimSite(spec, nodes=self.nodes, start_delay_s=start_delay_s)


def _nice_walltime(x: float, cap: float) -> float:
    for w in WALLTIME_LADDER_S:
        if w >= x:
            return float(min(w, cap))
    return float(cap)


def map_job(
    job: TraceJob,
    part: PartitionSpec,
    nodes: int,
    trace_procs: int | None,
    rng: np.random.Generator,
    counts: Counter[str] | None = None,
) -> SimJob | None:
    """One trace job as a request on ``part`` (``nodes`` nodes); ``None`` if unusable.

    ``counts`` collects what was dropped, clipped or capped. See the module docstring.
    """
    counts = counts if counts is not None else Counter()
    run = job.run_s
    if run is None:
        counts["dropped: run time unknown"] += 1
        return None
    if run <= 0:
        counts["dropped: zero run time"] += 1
        return None
    C, M, G = part.cpus_per_node, part.mem_gb_per_node * 1024, part.gpus_per_node
    wmax = float(part.max_walltime_s)
    if job.gpus > 0 and G > 0:
        k = job.gpus
        if k > G:
            n, c, m, g = -(-k // G), C, M, G
        else:
            n, g = 1, k
            c = min(C, max(1, math.ceil(job.cpus or (k * C / G))))
            m = int(min(M, job.mem_mb if job.mem_mb is not None else k * M // G))
    elif job.procs is not None and trace_procs:
        e = job.procs / trace_procs * nodes
        if e >= 1.0:
            n, c, m, g = max(1, round(e)), C, M, G
        elif G > 0:
            g = min(G, max(1, round(e * G)))
            n, c, m = 1, max(1, g * C // G), g * M // G
        else:
            n, g = 1, 0
            c = min(C, max(1, math.ceil(e * C)))
            m = c * M // C
    elif job.cpus is not None and G == 0:
        n, g = 1, 0
        c = min(C, max(1, math.ceil(job.cpus)))
        m = int(min(M, job.mem_mb if job.mem_mb is not None else c * M // C))
    else:
        counts["dropped: no usable size for this partition"] += 1
        return None
    if n > nodes:
        n = nodes
        counts["clipped to the partition"] += 1
    if run > wmax:
        run = wmax
        counts["run time capped at max walltime"] += 1
    if job.requested_walltime_s is not None and job.requested_walltime_s > 0:
        wall = min(wmax, max(job.requested_walltime_s, run))
    else:
        r = float(np.exp(rng.uniform(0.0, math.log(8.0))))
        wall = max(run, _nice_walltime(run * r, wmax))
    return SimJob(
        partition=part.name,
        walltime_s=float(math.ceil(wall)),
        run_s=float(run),
        nodes=n,
        cpus_per_node=c,
        mem_mb_per_node=m,
        gpus_per_node=g,
    )


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode())]))


def _trace_procs(trace: Sequence[TraceJob], given: int | None) -> int | None:
    if given:
        return given
    if isinstance(trace, Trace) and trace.max_procs:
        return trace.max_procs
    procs = [j.procs for j in trace if j.procs is not None]
    return max(procs) if procs else None


def _stream(
    part: PartitionSpec,
    nodes: int,
    jobs: Sequence[TraceJob],
    order: np.ndarray,
    trace_procs: int | None,
    source: str,
    target: float,
    duration_s: float,
    start_offset_s: float | None,
    rng: np.random.Generator,
    submits: np.ndarray,
) -> tuple[list[SimJob], PartitionLoad]:
    """Consecutive jobs from a start point (wrapping), mapped lazily, up to the target work.

    ``submits``: the arrival times of ``order``'s jobs (:func:`_arrivals`)."""
    counts: Counter[str] = Counter()
    if len(order) == 0:
        raise LoadError(f"partition {part.name}: the trace has no jobs")
    t_first, t_last = float(submits[0]), float(submits[-1])
    span = max(t_last - t_first, 1.0)
    period = span + span / max(len(order) - 1, 1)  # wrap-around: one mean gap after the last
    offset = start_offset_s % period if start_offset_s is not None else rng.uniform(0.0, period)
    k0 = int(np.searchsorted(submits, t_first + offset, side="left")) % len(order)
    primary_gpu = part.gpus_per_node > 0
    capacity = nodes * (part.gpus_per_node if primary_gpu else part.cpus_per_node)
    need = target * capacity * duration_s
    taken: list[tuple[float, SimJob]] = []
    work = last_work = 0.0
    k, lap, misses = k0, 0, 0
    base = float(submits[k0])
    while work < need:
        sj = map_job(jobs[order[k]], part, nodes, trace_procs, rng, counts)
        if sj is not None:
            taken.append((float(submits[k]) + lap * period - base, sj))
            units = sj.gpus_per_node if primary_gpu else sj.cpus_per_node
            last_work = sj.nodes * units * sj.run_s
            work += last_work
            misses = 0
        else:
            misses += 1
            if misses > len(order):
                raise LoadError(
                    f"partition {part.name}: no trace job maps onto it ({dict(counts)})"
                )
        k += 1
        if k == len(order):
            k, lap = 0, lap + 1
        if len(taken) > 5_000_000:  # pragma: no cover - guards a pathological target
            raise LoadError(f"partition {part.name}: target {target} needs too many jobs")
    if len(taken) > 1 and work - need > need - (work - last_work):
        taken.pop()  # closer to the target without the last job
        work -= last_work
    trace_span = taken[-1][0]
    scale = duration_s / trace_span if trace_span > 0 else 1.0
    out = [_with_submit(sj, rel * scale) for rel, sj in taken]
    dropped = {key: v for key, v in counts.items() if key.startswith("dropped")}
    info = PartitionLoad(
        partition=part.name,
        nodes=nodes,
        source=source,
        jobs=len(out),
        target_utilization=target,
        offered_utilization=work / (capacity * duration_s),
        trace_start_s=jobs[order[k0]].submit_s,
        trace_span_s=trace_span,
        time_scale=scale,
        clipped=counts["clipped to the partition"],
        runtime_capped=counts["run time capped at max walltime"],
        dropped=dropped,
    )
    return out, info


ACTIVE_SHARE = 0.98
"""Share of a trace's jobs kept: those in the shortest submit-time interval holding it."""


def _arrivals(jobs: Sequence[TraceJob], order: np.ndarray, max_gap_s: float | None) -> np.ndarray:
    """Submit times of ``order``'s jobs, pauses longer than ``max_gap_s`` shortened to it."""
    submits = np.fromiter((jobs[i].submit_s for i in order), dtype=np.float64, count=len(order))
    if max_gap_s is not None and len(submits) > 1:
        gaps = np.minimum(np.diff(submits), max_gap_s)
        submits = submits[0] + np.concatenate(([0.0], np.cumsum(gaps)))
    return submits


def _order(jobs: Sequence[TraceJob]) -> np.ndarray:
    """Indices of the trace's active span, by submit time (see :data:`ACTIVE_SHARE`)."""
    submits = np.fromiter((j.submit_s for j in jobs), dtype=np.float64, count=len(jobs))
    order = np.argsort(submits, kind="stable")
    k = max(1, math.ceil(ACTIVE_SHARE * len(order)))
    if k >= len(order):
        return order
    s = submits[order]
    widths = s[k - 1 :] - s[: len(s) - k + 1]
    i = int(np.argmin(widths))
    return order[i : i + k]


def window_offered(
    jobs: Sequence[SimJob], part: PartitionSpec, nodes: int, window_s: tuple[float, float]
) -> float:
    """Work submitted to ``part`` in ``window_s`` / (capacity x the window's length)."""
    a, b = window_s
    if b <= a:
        raise LoadError(f"window {window_s}: end must be after start")
    primary_gpu = part.gpus_per_node > 0
    capacity = nodes * (part.gpus_per_node if primary_gpu else part.cpus_per_node)
    work = sum(
        j.nodes * (j.gpus_per_node if primary_gpu else j.cpus_per_node) * j.run_s
        for j in jobs
        if j.partition == part.name and a <= (j.submit_s or 0.0) < b
    )
    return work / (capacity * (b - a))


def _busy_offset(
    part: PartitionSpec,
    nodes: int,
    jobs: Sequence[TraceJob],
    order: np.ndarray,
    trace_procs: int | None,
    source: str,
    target: float,
    duration_s: float,
    seed: int,
    submits: np.ndarray,
    window_s: tuple[float, float],
    candidates: int,
) -> float:
    """The busy-window rule (see :func:`busy_start_offset`) for one partition's stream."""
    if candidates < 1:
        raise LoadError(f"window_candidates must be >= 1, got {candidates}")
    span = max(float(submits[-1] - submits[0]), 1.0)
    period = span + span / max(len(order) - 1, 1)
    offsets = [i * period / candidates for i in range(candidates)]
    offered = []
    for off in offsets:
        # a throwaway generator: the evaluation must not shift the real stream's draws
        probe_rng = _rng(seed, part.name + "/window")
        sim_jobs, _ = _stream(
            part, nodes, jobs, order, trace_procs, source, target, duration_s, off,
            probe_rng, submits,
        )  # fmt: skip
        offered.append(window_offered(sim_jobs, part, nodes, window_s))
    return busy_start_offset(offsets, offered, target, _rng(seed, part.name + "/pick"))


def busy_start_offset(
    offsets: Sequence[float],
    window_offered_utilization: Sequence[float],
    target: float,
    rng: np.random.Generator,
) -> float:
    """Busy-window rule: a start point whose measured window is offered at least ``target``.

    ``offsets`` are evenly spaced candidate start points in the trace; for each, the work
    its stream submits inside the measured window, as a share of capacity. One of those at
    or above the target is drawn with ``rng``; if none reaches it, the busiest one. The rule
    looks at the background load only (never at placements), so the measured window is not
    one of the trace's lulls while bursts, sizes and run times stay the trace's.
    """
    if len(offsets) != len(window_offered_utilization) or not offsets:
        raise LoadError("busy_start_offset: need one offered utilization per candidate offset")
    ok = [o for o, u in zip(offsets, window_offered_utilization, strict=True) if u >= target]
    if ok:
        return float(ok[int(rng.integers(len(ok)))])
    return float(offsets[int(np.argmax(window_offered_utilization))])


def _with_submit(job: SimJob, t: float) -> SimJob:
    return SimJob(
        partition=job.partition,
        walltime_s=job.walltime_s,
        run_s=job.run_s,
        nodes=job.nodes,
        cpus_per_node=job.cpus_per_node,
        mem_mb_per_node=job.mem_mb_per_node,
        gpus_per_node=job.gpus_per_node,
        submit_s=t,
    )


def background_load(
    spec: SiteSpec,
    trace: Sequence[TraceJob],
    *,
    target_utilization: float | Mapping[str, float] = 0.85,
    duration_s: float = 7 * 86400.0,
    start_offset_s: float | None = None,
    seed: int = 0,
    gpu_trace: Sequence[TraceJob] | None = None,
    node_scale: float | None = None,
    nodes: Mapping[str, int] | None = None,
    trace_procs: int | None = None,
    partitions: Sequence[str] | None = None,
    max_gap_s: float | None = 8 * 3600.0,
    busy_window_s: tuple[float, float] | None = None,
    window_candidates: int = 24,
) -> BackgroundLoad:
    """Background jobs for ``spec`` from ``trace`` (see the module docstring).

    ``target_utilization``: one value, or one per partition name (partitions left out of a
    mapping get no load). ``duration_s``: arrivals are spread over ``[0, duration_s)``.
    ``start_offset_s``: where in the trace to start (seconds after its first job; default: a
    point drawn with ``seed``, independently per partition). ``gpu_trace``: jobs with GPUs
    for GPU partitions. ``node_scale``/``nodes``: as for :class:`SimSite`. ``trace_procs``:
    processors of the trace's machine (default: the SWF header's MaxProcs, else the largest
    job). ``partitions``: only these. ``max_gap_s``: longer pauses between arrivals in the
    trace (outages, holidays: CEA-Curie has a 150-hour one) are shortened to this many trace
    seconds (``None``: keep them). ``busy_window_s``: ``(a, b)`` in simulated seconds, the
    span that will be measured; the start point is then chosen by
    :func:`busy_start_offset` (ignored when ``start_offset_s`` is given).
    """
    if duration_s <= 0:
        raise LoadError(f"duration_s must be > 0, got {duration_s}")
    probe = SimSite(spec, node_scale, nodes=nodes)
    counts = {p: probe.node_count(p) for p in probe.partitions}
    tprocs = _trace_procs(trace, trace_procs)
    gpu_jobs = [j for j in gpu_trace if j.gpus > 0] if gpu_trace is not None else None
    orders: dict[str, np.ndarray] = {}
    arrivals: dict[str, np.ndarray] = {}
    all_jobs: list[SimJob] = []
    infos: list[PartitionLoad] = []
    for part in spec.partitions:
        if partitions is not None and part.name not in partitions:
            continue
        if isinstance(target_utilization, Mapping):
            if part.name not in target_utilization:
                continue
            target = float(target_utilization[part.name])
        else:
            target = float(target_utilization)
        if not 0 < target <= 1.5:
            raise LoadError(f"partition {part.name}: target utilization {target} not in (0, 1.5]")
        if part.gpus_per_node > 0 and gpu_jobs:
            src_jobs: Sequence[TraceJob] = gpu_jobs
            source = "gpu_trace"
            procs = None
        else:
            src_jobs = trace
            source = "trace (as GPU shares)" if part.gpus_per_node > 0 else "trace"
            procs = tprocs
        key = "gpu" if source == "gpu_trace" else "cpu"
        if key not in orders:
            orders[key] = _order(src_jobs)
            arrivals[key] = _arrivals(src_jobs, orders[key], max_gap_s)
        offset = start_offset_s
        if offset is None and busy_window_s is not None:
            offset = _busy_offset(
                part,
                counts[part.name],
                src_jobs,
                orders[key],
                procs,
                source,
                target,
                duration_s,
                seed,
                arrivals[key],
                busy_window_s,
                window_candidates,
            )
        jobs, info = _stream(
            part,
            counts[part.name],
            src_jobs,
            orders[key],
            procs,
            source,
            target,
            duration_s,
            offset,
            _rng(seed, part.name),
            arrivals[key],
        )
        all_jobs.extend(jobs)
        infos.append(info)
    all_jobs.sort(key=lambda j: j.submit_s or 0.0)
    return BackgroundLoad(
        site=spec.name,
        duration_s=float(duration_s),
        seed=seed,
        nodes=counts,
        jobs=tuple(all_jobs),
        partitions=tuple(infos),
    )


def replay(
    spec: SiteSpec,
    load: BackgroundLoad,
    until_s: float | None = None,
    *,
    start_delay_s: float = 0.0,
) -> SimSite:
    """A site sized for ``load`` with all its jobs submitted, advanced to ``until_s``."""
    site = load.site_for(spec, start_delay_s=start_delay_s)
    site.submit_many(load.jobs)
    site.advance(load.duration_s if until_s is None else until_s)
    return site
