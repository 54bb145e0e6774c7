"""A digital twin of a site's queue, built from what a probe sees, to predict waits.

Slurm's own start estimates (and the snapshot rule in :mod:`federation.placement.candidates`) assume
every job runs to its time limit. The twin replays the visible queue in the same
EASY-backfill simulator the benchmark uses (:mod:`federation.sim.queue`), but with run
times drawn from the learned usage model (:class:`UsageRatioModel`, per partition once it
has seen enough of its jobs): running jobs end after their conditional remaining time,
pending jobs run for a quantile of their limit. It sees
only what a real coordinator sees: node allocations, running and pending jobs with their
requested limits and start times, and the history of how long finished jobs really ran.

Running jobs are seeded on the very nodes the snapshot says they hold
(``JobRecord.node_names``, :meth:`SimSite.seed_running`), so the twin has the site's
fragmentation; pending jobs keep the scheduler's order (priority, submit time, job id). With
an empty usage model (every job runs to its limit) and no later arrivals, the twin's wait is
then the site's own (``bench/twin_fidelity.py``). Without node names (older probes) running
jobs are placed by the simulator's own node choice, which can differ.
"""

from __future__ import annotations

import random
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import FederationSnapshot, JobRecord, PartitionSnapshot, SiteSnapshot
from federation.core.spec import SiteSpec
from federation.placement.candidates import enumerate_candidates, snapshot_wait
from federation.placement.overlay import OWN_JOB_PREFIX
from federation.placement.runtime_model import UsageRatioModel
from federation.sim.queue import DEFAULT_EPOCH, SimJob, SimRequestError, SimSite

_ProbeKey = tuple[str, float, int, int, int, int]
_TwinKey = tuple[str, datetime, int, float, str]
"""(site, snapshot time, jobs in it, usage quantile, partition)."""
_Order = tuple[list[JobRecord], list[JobRecord]]
_WaitKey = tuple[str, datetime, int, float, _ProbeKey]


_asked = threading.local()


def asked_shapes(
    envelope: ResourceEnvelope,
    sites: Sequence[SiteSpec],
    snapshot: FederationSnapshot,
    now: datetime,
    ladder: bool,
) -> list[tuple[SiteSnapshot, Shape]]:
    """Every (site, shape) a decision on ``envelope`` asks a wait for, in the order asked.

    The enumeration runs once per decision: the last answer is kept (per thread) for the
    same objects, as a decision's twin and its :class:`~federation.placement.guard.WaitBound`
    both ask before it ranks."""
    key = (envelope, tuple(sites), snapshot, now, ladder)
    last = getattr(_asked, "last", None)
    if last is not None and len(last[0][1]) == len(key[1]):
        k = last[0]
        same = k[0] is key[0] and k[2] is key[2] and k[3] == key[3] and k[4] == key[4]
        if same and all(a is b for a, b in zip(k[1], key[1], strict=True)):
            return list(last[1])
    out: list[tuple[SiteSnapshot, Shape]] = []

    def record(
        shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, _now: datetime
    ) -> tuple[float, float, str]:
        out.append((site, shape))
        return 0.0, 0.0, ""

    enumerate_candidates(envelope, sites, snapshot, now, record, None, ladder)
    _asked.last = (key, tuple(out))
    return out


class TwinPredictor:
    """Wait quantiles per candidate from a per-site twin (cached per snapshot).

    ``q_mid``/``q_high``: the quantiles behind the reported median and upper wait.

    ``samples=0`` plugs one usage-model quantile into every job (a *lower* usage quantile
    means jobs end sooner, so it gives the optimistic wait). That is biased when jobs end at
    widely spread times: a probe waits for the *first* jobs to end, and the earliest of many
    medians is later than the median of the earliest. ``samples=K`` instead draws each job's
    run time from the usage distribution, independently per job, in ``K`` twins (seeded
    from the site and snapshot time, so decisions are reproducible), and reports the
    ``q_mid`` and ``q_high`` quantiles of the ``K`` waits.

    Waits are memoized per (snapshot, twin, probe shape), so policies sharing a predictor
    pay once; :meth:`prepare` computes every shape a decision will ask for in one
    :meth:`SimSite.what_if_many` pass per twin and partition (exact: the same numbers as
    asking one shape at a time).
    """

    def __init__(
        self,
        specs: Mapping[str, SiteSpec],
        usage: UsageRatioModel,
        *,
        q_mid: float = 0.5,
        q_high: float = 0.8,
        start_delay_s: float = 0.0,
        samples: int = 0,
        max_jobs: int | None = None,
        orders_from: TwinPredictor | None = None,
    ) -> None:
        self.max_jobs = max_jobs
        """A site whose snapshot lists more jobs is predicted from the snapshot alone (a
        twin costs about its queue length per replay; None: no limit)."""
        self.specs = dict(specs)
        self.usage = usage
        self.q_mid, self.q_high = q_mid, q_high
        self.start_delay_s = start_delay_s
        self.samples = samples
        self._cache: OrderedDict[_TwinKey, SimSite] = OrderedDict()
        self._waits: dict[_WaitKey, float] = {}
        self._orders: OrderedDict[tuple[str, datetime, int, datetime], dict[str, _Order]] = (
            OrderedDict() if orders_from is None else orders_from._orders
        )
        """Each snapshot's queue in the scheduler's order (shared with ``orders_from``: a
        predictor asked about the same snapshots sorts each queue once for both)."""

    def twin(self, site: SiteSnapshot, now: datetime, q: float, partition: str) -> SimSite:
        """The twin of ``partition`` with every job at usage quantile ``q`` (``q < 0``:
        sample ``-q - 1``).

        Partitions share nothing in the simulator, so each has a twin of its own jobs: a
        decision builds the partitions it asks about, not the whole site. The coordinator's
        own latest submissions (:mod:`.overlay`: pending jobs at the end of ``site.jobs``,
        behind everything the probe saw) are added to a copy of the twin with fewer of them,
        or of the twin of the probed queue, instead of replaying the whole queue again: a
        burst placed from one snapshot costs its own jobs, not one queue per decision. They
        queue behind every probed job, so the result is the same."""
        key = (site.site, site.taken_at, len(site.jobs), q, partition)
        tw = self._cache.get(key)
        if tw is not None:
            self._cache.move_to_end(key)
            return tw
        if self.max_jobs is not None and len(site.jobs) > self.max_jobs:
            raise SimRequestError(
                f"{len(site.jobs)} jobs in the queue, more than this twin replays ({self.max_jobs})"
            )
        own = _own_suffix(site.jobs)
        if not own:
            tw = self._build(site, now, q, partition)
        else:
            n_base = len(site.jobs) - own
            done, prev = 0, None
            for m in range(own - 1, -1, -1):  # the longest chain of ours already built
                prev = self._cache.get((site.site, site.taken_at, n_base + m, q, partition))
                if prev is not None:
                    done = m
                    break
            if prev is None:
                probed = site.model_copy(update={"jobs": site.jobs[:n_base]})
                base_key = (site.site, site.taken_at, n_base, q, partition)
                prev = self._remember(base_key, self._build(probed, now, q, partition))
            added = [
                (i, j)
                for i, j in enumerate(site.jobs[n_base + done :], start=done + 1)
                if j.partition == partition and j.state == "pending"
            ]
            tw = prev  # a twin is never changed once built (a what-if plays a copy)
            if added:
                tw = prev.clone()
                self._add_own(tw, site, added, q)
        return self._remember(key, tw)

    def _remember(self, key: _TwinKey, tw: SimSite) -> SimSite:
        self._cache[key] = tw
        while len(self._cache) > self._cache_size():  # least recently used first
            self._cache.popitem(last=False)
        if len(self._waits) > 64 * self._cache_size() * 8:
            self._waits.clear()  # a memo: recomputed when asked again
        return tw

    def _add_own(
        self, tw: SimSite, site: SiteSnapshot, own: Sequence[tuple[int, JobRecord]], q: float
    ) -> None:
        """Queue our own submissions (each with its place among ours) behind all in ``tw``."""
        spec = self.specs[site.site]
        nodes = {p: tw.node_count(p) for p in tw.partitions}
        jobs = []
        for i, j in own:
            draw = q if q >= 0 else self._own_draw(site, q, i)
            jobs.append(_fit(self._as_pending(j, site.site, draw, _OWN_ROOM - i), spec, nodes))
        tw.submit_many(jobs)

    @staticmethod
    def _own_draw(site: SiteSnapshot, q: float, i: int) -> float:
        seed = zlib.crc32(f"{site.site}|{site.taken_at.isoformat()}|{q}|own{i}".encode())
        return random.Random(seed).random()

    def _cache_size(self) -> int:
        return 4 * (64 + 2 * self.samples)

    def _quantiles(self, site: SiteSnapshot, q: float) -> Callable[[], float]:
        """Each job's usage quantile: ``q`` for all, or (``q < 0``) an independent draw."""
        if q >= 0:
            return lambda: q
        seed = zlib.crc32(f"{site.site}|{site.taken_at.isoformat()}|{q}".encode())
        rng = random.Random(seed)
        return rng.random

    def _build(
        self, site: SiteSnapshot, now: datetime, q: float, partition: str | None = None
    ) -> SimSite:
        """The twin of ``partition``'s jobs (None: every partition's)."""
        draw = self._quantiles(site, q)
        spec = self.specs[site.site]
        known = {p.name for p in spec.partitions if partition is None or p.name == partition}
        index: dict[str, dict[str, int]] = {p: {} for p in known}
        for n in site.nodes:
            ix = index.get(n.partition)
            if n.usable and ix is not None and n.name not in ix:
                ix[n.name] = len(ix)
        nodes = {p: max(1, len(index[p])) for p in known}
        tw = SimSite(spec, nodes=nodes, start_delay_s=self.start_delay_s)
        # The twin's clock reads seconds since a fixed epoch (rounded to the microseconds of
        # the snapshot's timestamps), so job ends that coincide at the site coincide here too.
        tw.advance(round((now - DEFAULT_EPOCH).total_seconds(), 6))
        ordered = self._ordered(site, now)
        running = [j for p in known for j in ordered.get(p, ((), ()))[0]]
        pending = [j for p in known for j in ordered.get(p, ((), ()))[1]]
        if len(known) > 1:  # every partition's: in the site's order (as one list would be)
            running, pending = self._merged(running, pending, now)
        jobs: list[SimJob] = []
        for j in running:
            job = self._as_running(j, site.site, now, draw())
            if j.node_names and not self._seed(tw, j, job, index[j.partition]):
                continue  # seeded on its nodes, or it holds no node the twin has
            jobs.append(job)
        n_pend = len(pending)
        jobs += [
            self._as_pending(j, site.site, draw(), _OWN_ROOM + n_pend - i)
            for i, j in enumerate(pending)
        ]
        tw.submit_many([_fit(job, spec, nodes) for job in jobs])
        return tw

    def _ordered(self, site: SiteSnapshot, now: datetime) -> dict[str, _Order]:
        """Per partition, the running jobs by start and the pending ones in the scheduler's
        order (priority, then submit time, then job id): sorted once per snapshot, for every
        quantile's and partition's twin."""
        key = (site.site, site.taken_at, len(site.jobs), now)
        got = self._orders.get(key)
        if got is None:
            running, pending = self._merged(
                [j for j in site.jobs if j.state == "running"],
                [j for j in site.jobs if j.state == "pending"],
                now,
            )
            got = {}
            for j in running:
                got.setdefault(j.partition, ([], []))[0].append(j)
            for j in pending:
                got.setdefault(j.partition, ([], []))[1].append(j)
            self._orders[key] = got
            while len(self._orders) > 4 * len(self.specs) + 8:
                self._orders.popitem(last=False)
        return got

    @staticmethod
    def _merged(
        running: list[JobRecord], pending: list[JobRecord], now: datetime
    ) -> tuple[list[JobRecord], list[JobRecord]]:
        ids = {j.job_id: _id_key(j.job_id) for j in (*running, *pending)}
        running = sorted(running, key=lambda j: (j.start_time or now, ids[j.job_id]))
        pending = sorted(
            pending, key=lambda j: (-(j.priority or 0), j.submit_time or now, ids[j.job_id])
        )
        return running, pending

    @staticmethod
    def _seed(tw: SimSite, j: JobRecord, job: SimJob, index: Mapping[str, int]) -> bool:
        """Seed a running job on the nodes it holds; ``True``: still to be placed by the sim."""
        held = sorted({index[n] for n in j.node_names if n in index})
        if not held:  # all its nodes are unusable (draining...) or outside the partition
            return False
        if len(held) != job.nodes:
            job = replace(job, nodes=len(held))
        try:
            tw.seed_running(job, held)
        except SimRequestError:  # the snapshot disagrees with itself: let the twin place it
            return True
        return False

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

    def _as_running(self, j: JobRecord, site: str, now: datetime, q: float) -> SimJob:
        limit = self._limit(j, site)
        elapsed = max(0.0, (now - j.start_time).total_seconds()) if j.start_time else 0.0
        if j.end_time is not None:  # Slurm's end for a running job: start + limit, exactly
            left_limit = max(1.0, (j.end_time - now).total_seconds())
        else:
            left_limit = max(1.0, limit - elapsed)
        left = max(1.0, self.usage.remaining_s(site, limit, elapsed, q, j.partition))
        if left >= left_limit - 1.0:  # runs to its limit (up to the rounding of the record):
            left = left_limit  # end exactly then, together with jobs sharing that end
        return self._job(j, left_limit, left, 10**9)

    def _as_pending(self, j: JobRecord, site: str, q: float, prio: int) -> SimJob:
        limit = self._limit(j, site)
        run = self.usage.duration_s(site, limit, q, j.partition)
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

    @staticmethod
    def _probe_key(shape: Shape) -> _ProbeKey:
        return (
            shape.partition,
            float(shape.walltime_s),
            shape.nodes,
            shape.cpus,
            shape.mem_gb,
            shape.gpus,
        )

    def _qs(self, site: str) -> list[float]:
        """The twins :meth:`__call__` consults for ``site``: sampled, or two quantiles."""
        n = self.usage.samples(site)
        if self.samples > 0 and n > 0:
            return [-1.0 - k for k in range(self.samples)]
        # nothing finished seen there yet: every job runs to its limit at any quantile
        return [self.q_mid, self.q_high] if n > 0 else [self.q_mid]

    def wait(self, shape: Shape, site: SiteSnapshot, now: datetime, q: float) -> float:
        key = (site.site, site.taken_at, len(site.jobs), q, self._probe_key(shape))
        w = self._waits.get(key)
        if w is None:
            tw = self.twin(site, now, q, shape.partition)
            start, _ = tw.what_if(self._probe_job(shape, 60.0))
            w = self._waits[key] = max(0.0, start - tw.now - self.start_delay_s)
        return w

    def prepare(
        self,
        envelope: ResourceEnvelope,
        sites: Sequence[SiteSpec],
        snapshot: FederationSnapshot,
        now: datetime,
        ladder: bool,
    ) -> None:
        """Compute the waits of every shape a decision on ``envelope`` will ask for.

        One forward pass per twin and partition for all the shapes
        (:meth:`SimSite.what_if_many`) instead of one per shape; the results land in the
        memo that :meth:`wait` reads, so the decision itself is unchanged.
        """
        asked: dict[str, tuple[SiteSnapshot, dict[_ProbeKey, Shape]]] = {}
        for site, shape in asked_shapes(envelope, sites, snapshot, now, ladder):
            asked.setdefault(site.site, (site, {}))[1].setdefault(self._probe_key(shape), shape)
        for site, shapes in asked.values():
            by_part: dict[str, list[tuple[_ProbeKey, Shape]]] = {}
            for k, sh in shapes.items():
                by_part.setdefault(sh.partition, []).append((k, sh))
            try:
                for q in self._qs(site.site):
                    for part, wanted in by_part.items():
                        self._prepare_part(site, now, q, part, wanted)
            except SimRequestError:  # the decision falls back for this site (__call__)
                continue

    def _prepare_part(
        self,
        site: SiteSnapshot,
        now: datetime,
        q: float,
        partition: str,
        wanted: list[tuple[_ProbeKey, Shape]],
    ) -> None:
        todo = [
            (k, sh)
            for k, sh in wanted
            if (site.site, site.taken_at, len(site.jobs), q, k) not in self._waits
        ]
        if not todo:
            return
        tw = self.twin(site, now, q, partition)
        starts = tw.what_if_many([self._probe_job(sh, 60.0) for _, sh in todo])
        for (k, _), (start, _) in zip(todo, starts, strict=True):
            wait = max(0.0, start - tw.now - self.start_delay_s)
            self._waits[(site.site, site.taken_at, len(site.jobs), q, k)] = wait

    def __call__(
        self, shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
    ) -> tuple[float, float, str]:
        """The :data:`~federation.placement.candidates.WaitFn` interface. A site whose
        snapshot the twin cannot replay (a job no partition of the site could hold) is
        predicted from the snapshot alone, saying so."""
        try:
            return self._twin_wait(shape, part, site, now)
        except SimRequestError as e:
            mid, high, why = snapshot_wait(shape, part, site, now)
            return mid, high, f"{why} (no twin: {e})"

    def _twin_wait(
        self, shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
    ) -> tuple[float, float, str]:
        n = self.usage.samples(site.site)
        if self.samples > 0 and n > 0:
            waits = sorted(self.wait(shape, site, now, q) for q in self._qs(site.site))
            mid = _quantile(waits, self.q_mid)
            high = max(mid, _quantile(waits, self.q_high))
            how = f"{self.samples} sampled twins"
        else:
            mid = self.wait(shape, site, now, self.q_mid)
            # no finished job seen: one twin, every job to its limit (the quantile is moot)
            high = max(mid, self.wait(shape, site, now, self.q_high)) if n > 0 else mid
            how = "quantile twin" if n > 0 else "every job to its limit"
        why = (
            f"twin: {part.jobs_running} running, {part.jobs_pending} pending; median wait "
            f"{mid:.0f} s, p{int(self.q_high * 100)} {high:.0f} s "
            f"({how}, usage model from {n} finished jobs)"
        )
        return mid, high, why


def _fit(job: SimJob, spec: SiteSpec, nodes: Mapping[str, int]) -> SimJob:
    """``job`` as the twin's partition can hold it: a real queue shows jobs over the
    partition's documented limits (a special QOS, a reservation, a record from before a
    change), which the twin keeps, at the most its partition allows."""
    p = spec.partition(job.partition)
    cap_s = float(p.max_walltime_s)
    if (
        job.walltime_s <= cap_s
        and job.run_s <= cap_s
        and job.nodes <= nodes.get(p.name, job.nodes)
        and job.cpus_per_node <= p.cpus_per_node
        and job.mem_mb_per_node <= p.mem_gb_per_node * 1024
        and job.gpus_per_node <= p.gpus_per_node
    ):
        return job  # the common case: within every limit, nothing to copy
    return replace(
        job,
        walltime_s=min(job.walltime_s, cap_s),
        run_s=min(job.run_s, cap_s),
        nodes=min(job.nodes, nodes.get(p.name, job.nodes)),
        cpus_per_node=min(job.cpus_per_node, p.cpus_per_node),
        mem_mb_per_node=min(job.mem_mb_per_node, p.mem_gb_per_node * 1024),
        gpus_per_node=min(job.gpus_per_node, p.gpus_per_node),
    )


_OWN_ROOM = 10**6
"""Priorities of the probed queue's pending jobs start above this; our own submissions
(at most this many per snapshot) take the ones below, and the probe of a decision 0."""


def _own_suffix(jobs: Sequence[JobRecord]) -> int:
    """How many of ``jobs``, at the end, are our own submissions (:mod:`.overlay`): they
    are added after the probed jobs (never an own id among those), so found by bisection."""
    lo, hi = 0, len(jobs)  # the first own job is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if jobs[mid].job_id.startswith(OWN_JOB_PREFIX):
            hi = mid
        else:
            lo = mid + 1
    return len(jobs) - lo


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` of an ascending, non-empty list."""
    pos = q * (len(sorted_vals) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _id_key(job_id: str) -> tuple[int, str]:
    """Job ids in submission order: ``123`` and ``123_4`` by their numeric part."""
    head = job_id.split("_", 1)[0].split(".", 1)[0]
    return (int(head), job_id) if head.isdigit() else (2**62, job_id)
