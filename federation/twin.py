"""A digital twin of a site's queue, built from what a probe sees, to predict waits.

Slurm's own start estimates (and the snapshot rule in :mod:`federation.placement`) assume
every job runs to its time limit. The twin replays the visible queue in the same
EASY-backfill simulator the benchmark uses (:mod:`federation.sim.queue`), but with run
times drawn from the learned usage model (:class:`UsageRatioModel`): running jobs end after
their conditional remaining time, pending jobs run for a quantile of their limit. It sees
only what a real coordinator sees: node allocations, running and pending jobs with their
requested limits and start times, and the history of how long finished jobs really ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from federation.envelope import Shape
from federation.runtime_model import UsageRatioModel
from federation.sim.queue import SimJob, SimSite
from federation.sites.spec import SiteSpec
from federation.snapshot import JobRecord, PartitionSnapshot, SiteSnapshot


class TwinPredictor:
    """Wait quantiles per candidate from a per-site twin (cached per snapshot).

    ``quantiles``: the usage-model quantiles behind the reported median and upper wait
    (a *lower* usage quantile means jobs end sooner, so it gives the optimistic wait).
    """

    def __init__(
        self,
        specs: Mapping[str, SiteSpec],
        usage: UsageRatioModel,
        *,
        q_mid: float = 0.5,
        q_high: float = 0.8,
        start_delay_s: float = 0.0,
    ) -> None:
        self.specs = dict(specs)
        self.usage = usage
        self.q_mid, self.q_high = q_mid, q_high
        self.start_delay_s = start_delay_s
        self._cache: dict[tuple[str, datetime, float], SimSite] = {}

    def twin(self, site: SiteSnapshot, now: datetime, q: float) -> SimSite:
        key = (site.site, site.taken_at, q)
        tw = self._cache.get(key)
        if tw is None:
            if len(self._cache) > 64:
                self._cache.clear()
            tw = self._cache[key] = self._build(site, now, q)
        return tw

    def _build(self, site: SiteSnapshot, now: datetime, q: float) -> SimSite:
        spec = self.specs[site.site]
        counts: dict[str, int] = {}
        for n in site.nodes:
            if n.usable:
                counts[n.partition] = counts.get(n.partition, 0) + 1
        known = {p.name for p in spec.partitions}
        nodes = {p: max(1, counts.get(p, 0)) for p in known}
        tw = SimSite(spec, nodes=nodes, start_delay_s=self.start_delay_s)
        running = sorted(
            (j for j in site.jobs if j.state == "running" and j.partition in known),
            key=lambda j: j.start_time or now,
        )
        pending = [j for j in site.jobs if j.state == "pending" and j.partition in known]
        pending.sort(key=lambda j: (-(j.priority or 0), j.submit_time or now))
        jobs = [self._as_running(j, site.site, now, q) for j in running]
        n_pend = len(pending)
        jobs += [self._as_pending(j, site.site, q, n_pend - i) for i, j in enumerate(pending)]
        tw.submit_many([j for j in jobs if j is not None])
        return tw

    def _limit(self, j: JobRecord, site: str) -> float:
        if j.time_limit_s:
            return float(j.time_limit_s)
        spec = self.specs[site]
        return float(max(p.max_walltime_s for p in spec.partitions))

    @staticmethod
    def _job(j: JobRecord, walltime_s: float, run_s: float, priority: int) -> SimJob:
        nodes = max(1, j.nodes)
        return SimJob(
            partition=j.partition,
            walltime_s=walltime_s,
            run_s=run_s,
            nodes=nodes,
            cpus_per_node=max(1, j.cpus // nodes),
            mem_mb_per_node=int(j.mem_mb or 0),
            gpus_per_node=j.gpus // nodes,
            priority=priority,
        )

    def _as_running(self, j: JobRecord, site: str, now: datetime, q: float) -> SimJob | None:
        limit = self._limit(j, site)
        elapsed = max(0.0, (now - j.start_time).total_seconds()) if j.start_time else 0.0
        left_limit = max(1.0, limit - elapsed)
        left = max(1.0, self.usage.remaining_s(site, limit, elapsed, q))
        return self._job(j, left_limit, min(left, left_limit), 10**9)

    def _as_pending(self, j: JobRecord, site: str, q: float, prio: int) -> SimJob:
        limit = self._limit(j, site)
        run = self.usage.duration_s(site, limit, q)
        return self._job(j, limit, min(run, limit), prio)

    def _probe_job(self, shape: Shape, runtime_s: float) -> SimJob:
        return SimJob(
            partition=shape.partition,
            walltime_s=float(shape.walltime_s),
            run_s=min(runtime_s, float(shape.walltime_s)),
            nodes=shape.nodes,
            cpus_per_node=shape.cpus,
            mem_mb_per_node=shape.mem_gb * 1024,
            gpus_per_node=shape.gpus,
            priority=0,
        )

    def wait(self, shape: Shape, site: SiteSnapshot, now: datetime, q: float) -> float:
        start, _ = self.twin(site, now, q).what_if(self._probe_job(shape, 60.0))
        return max(0.0, start - self.start_delay_s)

    def __call__(
        self, shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
    ) -> tuple[float, float, str]:
        """The :data:`~federation.placement.WaitFn` interface."""
        mid = self.wait(shape, site, now, self.q_mid)
        high = max(mid, self.wait(shape, site, now, self.q_high))
        n = self.usage.samples(site.site)
        why = (
            f"twin: {part.jobs_running} running, {part.jobs_pending} pending; median wait "
            f"{mid:.0f} s, p{int(self.q_high * 100)} {high:.0f} s "
            f"(usage model from {n} finished jobs)"
        )
        return mid, high, why
