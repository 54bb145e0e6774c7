"""What a probe of a simulated site sees: job statuses and site snapshots.

:func:`_render_snapshot` renders a site's partitions as the same
:class:`~federation.core.snapshot.SiteSnapshot` a probe of a real site produces (nodes,
partitions, running jobs and pending jobs with Slurm-style start estimates), and
:func:`_status` tells where one job stands as a :class:`~federation.sim.jobs.SimJobStatus`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from itertools import islice
from typing import Literal

from federation.core.snapshot import (
    JobRecord,
    NodeRecord,
    NodeStateName,
    PartitionSnapshot,
    SiteHealth,
    SiteSnapshot,
)
from federation.sim.jobs import _Q, SimJobState, SimJobStatus, UnknownSimJobError, _Run, _tick
from federation.sim.partition import _Part


def _render_snapshot(
    site: str,
    partitions: Iterable[_Part],
    now: float,
    taken: datetime,
    estimate_limit: int | None,
    node_recs: dict[tuple[str, int, int, int, int], NodeRecord],
    run_recs: dict[tuple[str, datetime], JobRecord],
) -> SiteSnapshot:
    """Site ``site`` as a probe would see it at ``now`` (simulated s), stamped ``taken``.

    ``node_recs`` and ``run_recs`` are the site's caches of snapshot records of unchanged
    nodes and running jobs (immutable, so shared between snapshots); they are filled here.
    """
    origin = taken - timedelta(seconds=now)  # wall clock of t = 0 in this snapshot

    def stamp(t: float) -> datetime:
        return origin + timedelta(seconds=t)

    nodes: list[NodeRecord] = []
    parts: list[PartitionSnapshot] = []
    jobs: list[JobRecord] = []
    for p in partitions:
        gtype = p.spec.gpu_type
        states: dict[str, int] = {}
        cache = node_recs
        if len(cache) > 100_000:
            cache.clear()
        rcache = run_recs
        if len(rcache) > 100_000:
            rcache.clear()
        for i in range(p.n):
            fc = p.free_c[i]
            state: NodeStateName = "idle" if fc == p.C else ("allocated" if fc == 0 else "mixed")
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
        est = p.estimates(estimate_limit)
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
                site=site,
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
        site=site,
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
