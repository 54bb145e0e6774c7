"""Placement: a pure function from (envelope, site facts, snapshot) to a ranked decision.

Every (site, partition) is either a candidate, with a concrete shape, a predicted wait and
the reason for that prediction, or a rejection with the reason it cannot run the task. The
first rule here, ``earliest-start``, picks the feasible candidate whose predicted start is
soonest, breaking ties by best fit (fewest GPUs left stranded on the node), then towards
the partition with the most free room.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from itertools import accumulate
from typing import NamedTuple

import numpy as np
from pydantic import Field

from federation.core.charge import shape_charge, unit_label
from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import BadEnvelopeError, NoFeasibleSiteError
from federation.core.model import Frozen
from federation.core.snapshot import (
    FederationSnapshot,
    JobRecord,
    PartitionSnapshot,
    SiteSnapshot,
    derived,
)
from federation.core.spec import PartitionSpec, SiteSpec
from federation.placement.classes import (
    class_view,
    held_idle,
    no_match_reason,
    spare_gpu_mem_gb,
)
from federation.placement.qos import live_class
from federation.placement.stagein import DEFAULT_BANDWIDTH_MB_S as DEFAULT_BANDWIDTH_MB_S
from federation.placement.stagein import TransferRates as TransferRates
from federation.placement.stagein import stage_in_estimate as stage_in_estimate

MAX_PROBE_AGE_S = 600.0


class Candidate(Frozen):
    """A feasible placement with its prediction."""

    site: str
    partition: str
    shape: Shape
    predicted_wait_s: float = Field(ge=0)
    wait_q90_s: float | None = Field(default=None, ge=0)
    wait_bound_s: float | None = Field(
        default=None, ge=0, description="the wait on Slurm's plan, every job run to its limit"
    )
    predicted_runtime_s: float = Field(default=0.0, ge=0)
    pending_jobs: int = Field(default=0, ge=0)
    partition_nodes: int = Field(default=0, ge=0, description="nodes in the partition (0: unknown)")
    free_fraction: float = Field(ge=0, le=1, description="share of the partition idle now")
    waste: float = Field(default=0.0, ge=0, le=1, description="share of a node's GPUs left idle")
    held_idle: float = Field(default=0.0, ge=0, le=1, description="share of a held node unused")
    """Whole-node classes only: the share of each node the job holds (and is charged for)
    but does not use; 0 where jobs share nodes (:func:`~.classes.held_idle`)."""
    spare_gpu_mem_gb: float = Field(default=0.0, ge=0, description="GPU memory beyond need")
    why: str
    stage_in_s: float = Field(default=0.0, ge=0, description="moving the task's input here")
    cold_start_s: float = Field(default=0.0, ge=0, description="of the wait: a new block's start")
    """The part of ``predicted_wait_s`` that is a new block's start-up (batch job submitted,
    worker pool started) where no block of the shape is warm
    (:mod:`federation.placement.coldstart`); 0 on a warm block, and where none is charged."""
    charge: float | None = Field(default=None, ge=0)
    """What the site bills for the shape's walltime, in ``charge_unit`` (its own: minimum
    charge and SU rate included; None in decisions recorded before charges were kept)."""
    charge_unit: str | None = None

    @property
    def predicted_start_s(self) -> float:
        """Input moved here first, then the queue wait (transfers and queue in series)."""
        return self.stage_in_s + self.predicted_wait_s

    @property
    def predicted_completion_s(self) -> float:
        return self.stage_in_s + self.predicted_wait_s + self.predicted_runtime_s


class Rejection(Frozen):
    """A (site, partition) that cannot take the task, and why."""

    site: str
    partition: str | None = None
    reason: str


class PlacementDecision(Frozen):
    """The decision trace: what was chosen, what else was possible, what was ruled out."""

    policy: str
    chosen: Candidate
    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    hedges: tuple[Candidate, ...] = ()
    """Extra copies submitted alongside ``chosen``; the first to start wins, others are
    cancelled."""
    snapshot_taken_at: datetime
    decided_at: datetime

    def explain(self) -> str:
        lines = [
            f"policy {self.policy}: chose {self.chosen.shape.describe()}",
            f"  because: {self.chosen.why}",
        ]
        for c in self.candidates:
            if c is self.chosen or (c.site, c.partition) == (
                self.chosen.site,
                self.chosen.partition,
            ):
                continue
            tie = ""
            if c.predicted_wait_s == self.chosen.predicted_wait_s:
                tie = _tie_note(c, self.chosen)
            lines.append(
                f"  not {c.site}/{c.partition}: predicted wait {c.predicted_wait_s:.0f} s "
                f"({c.why}{tie})"
            )
        for r in self.rejected:
            where = f"{r.site}/{r.partition}" if r.partition else r.site
            lines.append(f"  not {where}: {r.reason}")
        return "\n".join(lines)


def _tie_note(c: Candidate, chosen: Candidate) -> str:
    """Why ``c``, as soon as ``chosen``, lost to it (the order of ``policies._tie``)."""
    if c.waste > chosen.waste:
        return f"; same wait, but would strand {c.waste:.0%} of a node's GPUs"
    if c.held_idle > chosen.held_idle:
        return f"; same wait, but would hold whole nodes and leave {c.held_idle:.0%} unused"
    if c.spare_gpu_mem_gb > chosen.spare_gpu_mem_gb:
        return f"; same wait, but its GPUs have {c.spare_gpu_mem_gb:g} GB more than needed"
    return "; same wait, lost the tie-break (GPU fit, free room, name)"


def validate_envelope(envelope: ResourceEnvelope, sites: Sequence[SiteSpec]) -> None:
    """Raise :class:`BadEnvelopeError` for constraints no site could ever mean."""
    known_types = set().union(*(s.gpu_types for s in sites)) if sites else set()
    unknown = [t for t in envelope.gpu_types if t not in known_types]
    if unknown:
        raise BadEnvelopeError(
            f"unknown GPU type(s) {unknown}; the federation has: {sorted(known_types)}"
        )
    known_sites = {s.name for s in sites}
    bad_sites = [s for s in envelope.sites if s not in known_sites]
    bad_sites += [d.site for d in envelope.stage_in if d.site not in known_sites]
    if bad_sites:
        raise BadEnvelopeError(f"unknown site(s) {bad_sites}; known: {sorted(known_sites)}")
    classes = {c.name for s in sites for c in s.classes}
    classes |= {f"{s.name}:{c.name}" for s in sites for c in s.classes}
    if bad := [c for c in envelope.node_classes if c not in classes]:
        raise BadEnvelopeError(f"unknown node class(es) {bad}; known: {sorted(classes)}")
    qos = {q for s in sites for c in s.classes if (q := c.qos or s.qos)}
    if bad := [q for q in envelope.qos if q not in qos]:
        raise BadEnvelopeError(f"unknown QOS {bad}; the federation has: {sorted(qos)}")


def shape_in(
    envelope: ResourceEnvelope, site: SiteSpec, part: PartitionSpec, wall_why: str | None = None
) -> Shape | str:
    """The smallest shape of ``envelope`` that ``part`` can host, or why none fits (over
    the walltime limit: ``wall_why`` if given, where the limit is its QOS's live one)."""
    if envelope.sites and site.name not in envelope.sites:
        return "excluded by the envelope's site list"
    if envelope.partitions and not any(
        n in envelope.partitions or f"{site.name}:{n}" in envelope.partitions
        for n in {part.name, part.partition or part.name}
    ):
        return "excluded by the envelope's partition list"
    if envelope.node_classes and not (
        part.name in envelope.node_classes or f"{site.name}:{part.name}" in envelope.node_classes
    ):
        return "excluded by the envelope's node class list"
    qos = part.qos or site.qos
    if envelope.qos and qos not in envelope.qos:
        return f"QOS {qos or '(none)'} not in {list(envelope.qos)}"
    if envelope.arch and site.arch not in envelope.arch:
        return f"architecture {site.arch} not in {list(envelope.arch)}"
    if envelope.gpus_min > 0:
        if part.gpus_per_node == 0:
            return f"no GPUs (envelope needs {envelope.gpus_min})"
        if envelope.gpu_types and part.gpu_type not in envelope.gpu_types:
            return f"GPU type {part.gpu_type} not in {list(envelope.gpu_types)}"
        if envelope.gpus_min > part.gpus_per_node:
            return (
                f"{part.gpus_per_node} GPUs per node, envelope needs "
                f"{envelope.gpus_min} {'/'.join(envelope.gpu_types) or 'GPUs'}"
            )
        if envelope.gpu_mem_gb_min and (part.gpu_mem_gb or 0) < envelope.gpu_mem_gb_min:
            return f"{part.gpu_mem_gb} GB per GPU < {envelope.gpu_mem_gb_min} GB needed"
    elif part.gpus_per_node > 0 and any(p.gpus_per_node == 0 for p in site.partitions):
        return "GPU partition; a CPU-only task belongs on the site's CPU partition"
    if envelope.cpus_min > part.cpus_per_node:
        return f"{part.cpus_per_node} CPUs per node < {envelope.cpus_min} needed"
    if envelope.mem_gb_min > part.mem_gb_per_node:
        return f"{part.mem_gb_per_node} GB per node < {envelope.mem_gb_min} GB needed"
    if envelope.nodes > part.max_nodes:
        return f"{part.max_nodes} nodes per job < {envelope.nodes} needed"
    if envelope.walltime_s > part.max_walltime_s:
        return wall_why or f"max walltime {part.max_walltime_s} s < {envelope.walltime_s} s needed"
    return Shape(
        site=site.name,
        partition=part.name,
        nodes=envelope.nodes,
        cpus=envelope.cpus_min,
        mem_gb=max(1, math.ceil(envelope.mem_gb_min)),
        gpus=envelope.gpus_min,
        gpu_type=part.gpu_type if envelope.gpus_min else None,
        walltime_s=envelope.walltime_s,
        account=envelope.account or site.account_for(part.name),
    )


class _QueueView(NamedTuple):
    """One partition's queue, summarised once per snapshot for every shape placed on it."""

    pending: int
    pending_cpus: int
    pending_gpus: int
    ends: list[float]
    """End timestamps of ``running``, ascending."""
    running: list[JobRecord]
    open_ended: list[JobRecord]
    """Running jobs without an end time."""
    cum_cpus: list[int]
    """``cum_cpus[i]``: CPUs of ``running[: i + 1]`` (likewise ``cum_gpus``)."""
    cum_gpus: list[int]
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """``running``'s CPUs, GPUs and end timestamps as arrays (long queues with open-ended
    jobs only)."""


class _NodeView(NamedTuple):
    """A partition's usable nodes, as ``predict_wait`` reads them for one GPU type."""

    free: list[tuple[str, int, int, int]]
    """Per usable node, in snapshot order: (name, CPUs, memory MB, GPUs of the type) free."""
    cpus_free: int
    gpus_free: int


def _jobs_by_partition(site: SiteSnapshot) -> dict[str, list[JobRecord]]:
    """The site's jobs grouped by their ``partition`` field, in queue order (one pass)."""
    cache = derived(site)
    groups: dict[str, list[JobRecord]] | None = cache.get("jobs_by_partition")
    if groups is None:
        groups = {}
        for j in site.jobs:
            if (g := groups.get(j.partition)) is None:
                groups[j.partition] = [j]
            else:
                g.append(j)
        cache["jobs_by_partition"] = groups
    return groups


def _queue_view(site: SiteSnapshot, partition: str) -> _QueueView:
    """The partition's queue view, cached for as long as this (immutable) snapshot lives.

    Placing many tasks on one snapshot then costs one pass over its jobs, not one per task
    and partition (measured by ``bench/perf.py``: 100 sites x 1,000 jobs).
    """
    cache = derived(site)
    key = ("queue_view", partition)
    view: _QueueView | None = cache.get(key)
    if view is not None:
        return view
    n_pending = pending_cpus = pending_gpus = 0
    dated: list[tuple[float, JobRecord]] = []
    open_ended: list[JobRecord] = []
    for j in _jobs_by_partition(site).get(partition, ()):
        if j.state == "pending":
            n_pending += 1
            pending_cpus += j.cpus
            pending_gpus += j.gpus
        elif j.state == "running":
            if j.end_time is None:
                open_ended.append(j)
            else:
                dated.append((j.end_time.timestamp(), j))
    dated.sort(key=lambda e: e[0])  # stable: ties keep queue order
    running = [j for _, j in dated]
    ends = [t for t, _ in dated]
    arrays = None
    if open_ended and len(running) >= _VECTOR_MIN:
        arrays = (
            np.fromiter((j.cpus for j in running), np.float64, len(running)),
            np.fromiter((j.gpus for j in running), np.float64, len(running)),
            np.asarray(ends, np.float64),
        )
    view = _QueueView(
        pending=n_pending,
        pending_cpus=pending_cpus,
        pending_gpus=pending_gpus,
        ends=ends,
        running=running,
        open_ended=open_ended,
        cum_cpus=list(accumulate(j.cpus for j in running)),
        cum_gpus=list(accumulate(j.gpus for j in running)),
        arrays=arrays,
    )
    cache[key] = view
    return view


def _node_view(site: SiteSnapshot, partition: str, gpu_type: str | None) -> _NodeView:
    """The partition's usable nodes and what each has free, cached per snapshot."""
    cache = derived(site)
    key = ("node_view", partition, gpu_type)
    view: _NodeView | None = cache.get(key)
    if view is None:
        free = [
            (n.name, n.cpus_free, n.mem_mb_free, n.gpus_free(gpu_type))
            for n in site.nodes
            if n.partition == partition and n.usable
        ]
        view = _NodeView(
            free=free,
            cpus_free=sum(f[1] for f in free),
            gpus_free=sum(f[3] for f in free),
        )
        cache[key] = view
    return view


def predict_wait(
    shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
) -> tuple[float, str]:
    """Predicted queue wait (seconds) for ``shape`` in ``part``, and the reasoning.

    Fits-now: an idle-enough node exists and nothing is pending in the partition. Otherwise
    a fluid estimate: running jobs release their resources at their end times (start +
    time limit, as Slurm assumes); the pending jobs ahead and this shape must fit in what
    is released. Slurm's own start estimate for the last pending job is a lower bound.
    """
    nv = _node_view(site, part.partition, shape.gpu_type)
    if part.jobs_pending == 0:
        mem_mb = shape.mem_gb * 1024
        fitting = [
            f for f in nv.free if f[1] >= shape.cpus and f[2] >= mem_mb and f[3] >= shape.gpus
        ]
        if len(fitting) >= shape.nodes:
            name, cpus, mem, gpus = fitting[0]
            return 0.0, (
                f"fits now on {name} ({cpus} CPUs, {mem // 1024} GB, {gpus} GPUs free), "
                "nothing pending"
            )
    if not nv.free:
        return math.inf, "no usable nodes (all down or drained)"

    q = _queue_view(site, part.partition)
    free_cpus: float = nv.cpus_free
    free_gpus: float = nv.gpus_free
    need_cpus = shape.cpus * shape.nodes + q.pending_cpus
    need_gpus = shape.gpus * shape.nodes + q.pending_gpus
    free_cpus, free_gpus, t_free_ts = _release(
        q, part, now, free_cpus, free_gpus, need_cpus, need_gpus
    )
    wait = max(0.0, t_free_ts - now.timestamp())
    n_running = len(q.running) + len(q.open_ended)
    why = (
        f"{n_running} running, {q.pending} pending ahead; "
        f"{part.cpus_alloc}/{part.cpus_total} CPUs and "
        f"{sum(part.gpus_alloc_by_type.values())}/{sum(part.gpus_total_by_type.values())} "
        "GPUs allocated"
    )
    if part.latest_pending_start is not None:
        slurm_wait = (part.latest_pending_start - now).total_seconds()
        if slurm_wait > wait:
            wait = slurm_wait
            why += f"; Slurm estimates the last pending job starts in {slurm_wait:.0f} s"
    if free_cpus < need_cpus or free_gpus < need_gpus:
        return max(wait, float(part.max_time_s or 86400)), why + "; queue deeper than running jobs"
    return wait, why + f"; enough frees up in {wait:.0f} s"


_VECTOR_MIN = 256
"""Running jobs from which a release walk with open-ended jobs is done on arrays (fewer: a
loop); without open-ended jobs it is a binary search on the running jobs' running sums."""


def _release(
    q: _QueueView,
    part: PartitionSnapshot,
    now: datetime,
    free_cpus: float,
    free_gpus: float,
    need_cpus: float,
    need_gpus: float,
) -> tuple[float, float, float]:
    """Release running jobs in end order (open-ended ones count as ending now, their end
    taken as start + limit) until the need is met: (free CPUs, free GPUs, the latest end
    released, as a timestamp; now when nothing had to be)."""
    now_ts = now.timestamp()
    if free_cpus >= need_cpus and free_gpus >= need_gpus:
        return free_cpus, free_gpus, now_ts
    if not q.open_ended:
        if not q.running:
            return free_cpus, free_gpus, now_ts
        # Running sums only grow (counts are >= 0): the first prefix meeting both needs is
        # the later of the first meeting each; all of them when none does.
        last = min(
            len(q.running) - 1,
            max(
                bisect.bisect_left(q.cum_cpus, need_cpus - free_cpus),
                bisect.bisect_left(q.cum_gpus, need_gpus - free_gpus),
            ),
        )
        return (
            free_cpus + q.cum_cpus[last],
            free_gpus + q.cum_gpus[last],
            max(now_ts, q.ends[last]),  # ends ascend: the last released ends latest
        )
    cut = bisect.bisect_right(q.ends, now_ts)

    def open_end(j: JobRecord) -> float:
        limit = j.time_limit_s or part.max_time_s or 86400
        return (j.start_time.timestamp() if j.start_time else now_ts) + limit

    if q.arrays is None:
        t_free = now_ts
        for j in [*q.running[:cut], *q.open_ended, *q.running[cut:]]:
            if free_cpus >= need_cpus and free_gpus >= need_gpus:
                break
            free_cpus += j.cpus
            free_gpus += j.gpus
            t_free = max(t_free, j.end_time.timestamp() if j.end_time else open_end(j))
        return free_cpus, free_gpus, t_free
    cpus, gpus, ends = q.arrays
    o = q.open_ended
    cpus = np.concatenate((cpus[:cut], [j.cpus for j in o], cpus[cut:]))
    gpus = np.concatenate((gpus[:cut], [j.gpus for j in o], gpus[cut:]))
    ends = np.concatenate((ends[:cut], [open_end(j) for j in o], ends[cut:]))
    cc = free_cpus + np.cumsum(cpus)
    gg = free_gpus + np.cumsum(gpus)
    ok = (cc >= need_cpus) & (gg >= need_gpus)
    last = int(np.argmax(ok)) if ok.any() else len(cc) - 1
    return float(cc[last]), float(gg[last]), max(now_ts, float(ends[: last + 1].max()))


def _waste(part: PartitionSpec, shape: Shape) -> float:
    """Best-fit tie-break: GPUs a node would leave stranded (all of them for CPU tasks)."""
    if part.gpus_per_node == 0:
        return 0.0
    return (part.gpus_per_node - shape.gpus) / part.gpus_per_node


def _free_fraction(part: PartitionSnapshot, shape: Shape) -> float:
    if shape.gpus and part.gpus_total_by_type:
        total = sum(part.gpus_total_by_type.values())
        return max(0.0, min(1.0, (total - sum(part.gpus_alloc_by_type.values())) / total))
    return max(0.0, min(1.0, part.cpus_idle / part.cpus_total)) if part.cpus_total else 0.0


WaitFn = Callable[[Shape, PartitionSnapshot, SiteSnapshot, datetime], tuple[float, float, str]]
"""(shape, partition, site, now) -> (median wait s, 90th-percentile wait s, reasoning)."""
RuntimeFn = Callable[[Shape], float]


def snapshot_wait(
    shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
) -> tuple[float, float, str]:
    """:func:`predict_wait` as a :data:`WaitFn` (no spread: it is a point estimate)."""
    wait, why = predict_wait(shape, part, site, now)
    return wait, wait, why


def shape_ladder(envelope: ResourceEnvelope, base: Shape, part: PartitionSpec) -> list[Shape]:
    """``base`` and the larger shapes inside ``envelope`` a partition can host, by doubling
    the scaling resource (GPUs if any, else CPUs) and memory (and CPUs, for GPUs) with it."""
    key = "gpus" if base.gpus else "cpus"
    start = getattr(base, key)
    bound = envelope.gpus_max if base.gpus else envelope.cpus_max
    hi = min(bound or start, part.gpus_per_node if base.gpus else part.cpus_per_node)
    shapes = [base]
    n = start * 2
    while n <= hi:
        f = n / start
        update: dict[str, int] = {
            key: n,
            "mem_gb": int(min(part.mem_gb_per_node, envelope.mem_gb_max or 10**9, base.mem_gb * f)),
        }
        if base.gpus:
            update["cpus"] = min(part.cpus_per_node, envelope.cpus_max or 10**9, int(base.cpus * f))
        shapes.append(base.model_copy(update=update))
        n *= 2
    return shapes


def enumerate_candidates(
    envelope: ResourceEnvelope,
    sites: Sequence[SiteSpec],
    snapshot: FederationSnapshot,
    now: datetime,
    wait_fn: WaitFn = snapshot_wait,
    runtime_fn: RuntimeFn | None = None,
    ladder: bool = False,
    rates: TransferRates | None = None,
) -> tuple[list[Candidate], list[Rejection]]:
    """Every feasible (site, partition[, shape]) with predictions, and every rejection.

    A candidate away from the envelope's ``stage_in`` data carries the estimated transfer
    time (``stage_in_s``, size / ``rates``) in its completion and its ``why``."""
    validate_envelope(envelope, sites)
    candidates: list[Candidate] = []
    rejected: list[Rejection] = []
    for spec in sites:
        if envelope.sites and spec.name not in envelope.sites:  # whether probed or not
            reason = "excluded by the envelope's site list"
            rejected.extend(
                Rejection(site=spec.name, partition=p.name, reason=reason) for p in spec.partitions
            )
            continue
        snap = snapshot.site(spec.name)
        if snap is None or not snap.health.reachable:
            err = snap.health.error if snap else "not probed"
            rejected.append(Rejection(site=spec.name, reason=f"unhealthy: {err}"))
            continue
        if snap.health.probe_age_s > MAX_PROBE_AGE_S:
            rejected.append(
                Rejection(
                    site=spec.name,
                    reason=(
                        f"probe is {snap.health.probe_age_s:.0f} s old (> {MAX_PROBE_AGE_S:.0f} s)"
                    ),
                )
            )
            continue
        stage_s, stage_why = stage_in_estimate(envelope, spec.name, rates)
        for described in spec.partitions:
            live = live_class(spec, described, snap)  # its QOS's live limits hold
            part = live.cls
            shape = shape_in(envelope, spec, part, live.wall_reason(envelope.walltime_s))
            if isinstance(shape, str) or live.refusal:
                reason = shape if isinstance(shape, str) else str(live.refusal)
                rejected.append(Rejection(site=spec.name, partition=part.name, reason=reason))
                continue
            view = class_view(snap, part)
            if view is None:
                rejected.append(
                    Rejection(site=spec.name, partition=part.name, reason=no_match_reason(part))
                )
                continue
            psnap, csnap = view
            chosen_class = "" if part.partition == part.name else part.describe()
            if psnap.state not in ("up", "unknown"):
                rejected.append(
                    Rejection(
                        site=spec.name, partition=part.name, reason=f"partition is {psnap.state}"
                    )
                )
                continue
            for sh in shape_ladder(envelope, shape, part) if ladder else [shape]:
                wait, wait_hi, why = wait_fn(sh, psnap, csnap, now)
                if math.isinf(wait):
                    rejected.append(Rejection(site=spec.name, partition=part.name, reason=why))
                    break
                runtime = runtime_fn(sh) if runtime_fn else 0.0
                charge = shape_charge(part, sh)
                cost = f"costs {charge:.2f} {unit_label(part.charge_unit)}"
                candidates.append(
                    Candidate(
                        site=spec.name,
                        partition=part.name,
                        shape=sh,
                        predicted_wait_s=wait,
                        wait_q90_s=max(wait, wait_hi),
                        predicted_runtime_s=runtime,
                        free_fraction=_free_fraction(psnap, sh),
                        waste=_waste(part, sh),
                        held_idle=held_idle(part, sh),
                        spare_gpu_mem_gb=spare_gpu_mem_gb(part, envelope),
                        pending_jobs=psnap.jobs_pending,
                        partition_nodes=psnap.nodes_total,
                        why="; ".join(
                            w for w in (chosen_class, live.note, why, stage_why, cost) if w
                        ),
                        stage_in_s=stage_s,
                        charge=charge,
                        charge_unit=part.charge_unit,
                    )
                )
    return candidates, rejected


def no_feasible(rejected: Sequence[Rejection]) -> NoFeasibleSiteError:
    return NoFeasibleSiteError(
        "no site can run this envelope",
        {(f"{r.site}/{r.partition}" if r.partition else r.site): r.reason for r in rejected},
    )
