"""Runtime knowledge a coordinator can learn: how long tasks take, and how long jobs really run.

* :class:`TaskRuntimeModel` keeps observed runtimes of *our* tasks per workload, hardware
  (site and partition) and shape, estimates scaling (speedup per doubling of GPUs or CPUs),
  and predicts the runtime of an untried (site, partition, shape), scaled by a datasheet
  prior of the hardware's speed (:mod:`federation.core.hardware`) until it has run there.
* :class:`UsageRatioModel` keeps, per site and per (site, partition), the share of
  requested walltime that finished jobs really used (what ``sacct`` shows a real
  coordinator). Slurm's own estimates assume every job runs to its limit; in the shared
  traces the median job uses 40% (KTH) or under 2% (CEA-Curie) of it. The model gives
  conditional remaining-time quantiles for running jobs and duration quantiles for pending
  ones. Finished jobs alone are a biased sample (short jobs finish first; the long ones
  are still running when we look), so the jobs a probe saw running enter as right-censored
  observations (:meth:`UsageRatioModel.look`) of a Kaplan-Meier estimate.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from federation.core.envelope import Shape
from federation.core.hardware import SpeedFn
from federation.core.snapshot import SiteSnapshot


def shape_units(shape: Shape) -> int:
    """The resource a workload scales with: GPUs if it has any, else CPUs (times nodes)."""
    return (shape.gpus if shape.gpus else shape.cpus) * shape.nodes


@dataclass
class TaskRuntimeModel:
    """Observed task runtimes; predictions for untried hardware and shapes.

    Observations are kept per workload and hardware (site and partition: one site's
    partitions may hold different GPUs). ``default_speedup_per_doubling`` is the prior
    before two shapes have been observed on one partition (the paper measured 1.90x and
    1.96x for DDP on 1->2->4 GPUs). ``speed`` is the prior relative speed of a shape's
    hardware (e.g. :func:`federation.core.hardware.speed_prior`; ``None``: all alike): it scales
    what was seen elsewhere to a partition the workload has not run on yet, and is not used
    once it has.
    """

    default_speedup_per_doubling: float = 1.8
    speed: SpeedFn | None = None
    optimism: float = 0.0
    """On hardware the workload has not run on, predict this share faster than the prior
    says (optimistic initial values): among otherwise equal partitions the untried one is
    tried once, and its observation replaces the guess. 0: none."""
    max_per_hardware: int = 64
    """Observations kept per workload and hardware: the latest (a long-running service
    learns from every task it ran; its predictions stay as cheap as its first)."""
    _obs: dict[str, list[tuple[tuple[str, str], int, float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Per workload: ((site, partition), units, runtime_s, prior speed there)."""
    _memo: dict[str, dict[tuple[str, str, int, bool, float], float]] = field(default_factory=dict)
    """Predictions since the workload's last observation (cleared per workload on one)."""
    _slope: dict[str, float] = field(default_factory=dict)

    def _speed(self, shape: Shape) -> float:
        return 1.0 if self.speed is None else max(1e-6, self.speed(shape))

    def observe(self, workload: str, shape: Shape, runtime_s: float) -> None:
        if runtime_s > 0:
            hw = (shape.site, shape.partition)
            obs = self._obs[workload]
            obs.append((hw, shape_units(shape), runtime_s, self._speed(shape)))
            if sum(1 for where, *_ in obs if where == hw) > self.max_per_hardware:
                oldest = next(i for i, o in enumerate(obs) if o[0] == hw)
                del obs[oldest]
            self._slope.pop(workload, None)
            self._memo.pop(workload, None)

    def speedup_per_doubling(self, workload: str) -> float:
        """Least-squares slope of log(runtime) on log2(units) within each partition, pooled."""
        known = self._slope.get(workload)
        if known is None:
            known = self._slope[workload] = self._fit_slope(workload)
        return known

    def _fit_slope(self, workload: str) -> float:
        by_hw: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
        for hw, units, t, _ in self._obs.get(workload, []):
            by_hw[hw].append((units, t))
        num = den = 0.0
        for pts in by_hw.values():
            if len({u for u, _ in pts}) < 2:
                continue
            xs = [math.log2(u) for u, _ in pts]
            ys = [math.log2(t) for _, t in pts]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            num += sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
            den += sum((x - mx) ** 2 for x in xs)
        if den == 0:
            return self.default_speedup_per_doubling
        return float(min(2.0, max(1.0, 2 ** (-num / den))))

    def predict(self, workload: str, shape: Shape, default_s: float) -> float:
        """Predicted runtime of ``workload`` at ``shape`` (``default_s`` at 1 unit on the
        reference hardware if it has run nowhere yet)."""
        memo = self._memo.setdefault(workload, {})
        key = (shape.site, shape.partition, shape_units(shape), bool(shape.gpus), default_s)
        known = memo.get(key)
        if known is None:
            known = memo[key] = self._predict(workload, shape, default_s)
        return known

    def _predict(self, workload: str, shape: Shape, default_s: float) -> float:
        obs = self._obs.get(workload, [])
        s = self.speedup_per_doubling(workload)
        units = shape_units(shape)
        hw = (shape.site, shape.partition)
        here = [(u, t) for where, u, t, _ in obs if where == hw]
        if here:
            return _scaled(here, units, s)
        speed = self._speed(shape) * (1.0 + self.optimism if obs else 1.0)
        if obs:  # what was seen elsewhere, at the reference speed, then at this hardware's
            ref = _scaled([(u, t * sp) for _, u, t, sp in obs], units, s)
            return ref / speed
        return float(default_s / (s ** math.log2(max(1, units))) / speed)


def _scaled(points: list[tuple[int, float]], units: int, speedup: float) -> float:
    """Median over observations of each runtime scaled to ``units`` by the speedup law."""
    vals = sorted(float(t * speedup ** (math.log2(u) - math.log2(units))) for u, t in points)
    return vals[len(vals) // 2]


@dataclass
class UsageRatioModel:
    """Per site, and per (site, partition), the distribution of used runtime / requested
    walltime: a Kaplan-Meier estimate from finished jobs (events) and the jobs last seen
    running (right-censored at their elapsed share of the limit).

    Without censored observations (no :meth:`look`) it is the empirical distribution of the
    finished jobs. A query names the site and, optionally, the partition: the partition's
    own distribution once it has ``min_partition_samples`` finished jobs, else the site's
    (partitions of one site can run very different work: a GPU partition's jobs are not its
    CPU partition's). Mass the estimate leaves beyond its last finished job (long jobs seen
    only running) is taken as running to the limit.

    **Same-limit history.** Jobs asking the same limit on the same partition are mostly one
    kind of work (a sweep of one application, one user's campaign): the last
    ``history`` such jobs that finished say more about the next one than the partition's
    pooled ratios, which the many short jobs dominate (a sweep of 8-hour jobs each running
    7.6 hours was predicted at 0.08 of its limit by the pooled model, and the twin sent
    tasks behind it; measured in ``bench/replay.py``, KTH-SP2 busy). With at least
    ``history_min`` of them, a pending job's run time is drawn from them (their quantile
    ``q``), and a running job's remaining time from those longer than its elapsed time
    (none longer: it runs to its limit). This is the "recent history" runtime predictor of
    the batch-scheduling literature, keyed by limit where a probe shows no user.
    """

    max_samples: int = 5000
    history: int = 4
    history_min: int = 2
    min_partition_samples: int = 30
    grid: int = 1000
    """Quantiles kept of a censored estimate (its resolution)."""
    _ratios: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    _censored: dict[str, list[float]] = field(default_factory=dict)
    _cache: dict[str, list[float]] = field(default_factory=dict)
    _same_limit: dict[tuple[str, str | None, int], list[float]] = field(default_factory=dict)

    @staticmethod
    def _key(site: str, partition: str | None) -> str:
        return site if partition is None else f"{site}\x1f{partition}"

    def observe(
        self, site: str, requested_s: float, used_s: float, partition: str | None = None
    ) -> None:
        """A finished job (``sacct``): its limit and the time it really ran."""
        if requested_s <= 0 or used_s < 0:
            return
        r = min(1.0, used_s / requested_s)
        if self.history > 0:
            recent = self._same_limit.setdefault((site, partition, round(requested_s)), [])
            recent.append(min(used_s, requested_s))
            del recent[: -self.history]
        for key in {self._key(site, None), self._key(site, partition)}:
            arr = self._ratios[key]
            if len(arr) >= self.max_samples:
                arr.pop(0 if r >= arr[len(arr) // 2] else -1)  # keep the sample bounded
            bisect.insort(arr, r)
            self._cache.pop(key, None)

    def look(self, snapshot: SiteSnapshot) -> None:
        """The jobs ``snapshot`` shows running (with a start and a limit) replace the
        censored observations of its site and partitions: each has used at least its
        elapsed share of its limit so far."""
        site = snapshot.site
        by_key: dict[str, list[float]] = defaultdict(list)
        for j in snapshot.jobs:
            if j.state != "running" or j.start_time is None or not j.time_limit_s:
                continue
            elapsed = (snapshot.taken_at - j.start_time).total_seconds()
            r = min(1.0, max(0.0, elapsed / j.time_limit_s))
            by_key[self._key(site, None)].append(r)
            by_key[self._key(site, j.partition)].append(r)
        prefix = self._key(site, "")
        for key in [k for k in self._censored if k == site or k.startswith(prefix)]:
            del self._censored[key]
            self._cache.pop(key, None)
        for key, rs in by_key.items():
            self._censored[key] = rs
            self._cache.pop(key, None)

    def _recent(self, site: str, partition: str | None, limit_s: float) -> list[float]:
        """The latest same-limit run times on the partition, sorted (empty: too few)."""
        if self.history <= 0 or partition is None:
            return []
        recent = self._same_limit.get((site, partition, round(limit_s)))
        if recent is None or len(recent) < self.history_min:
            return []
        return sorted(recent)

    def samples(self, site: str, partition: str | None = None) -> int:
        """Finished jobs behind the site's (or the partition's) distribution."""
        return len(self._ratios.get(self._key(site, partition), []))

    def _dist(self, site: str, partition: str | None) -> list[float]:
        """Sorted usage ratios whose empirical distribution is the estimate to use."""
        key = self._key(site, partition)
        if partition is not None and self.samples(site, partition) < self.min_partition_samples:
            key = self._key(site, None)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        events = self._ratios.get(key, [])
        censored = self._censored.get(key, [])
        out = kaplan_meier_quantiles(events, censored, self.grid) if censored else events
        self._cache[key] = out
        return out

    def duration_s(
        self, site: str, limit_s: float, q: float = 0.5, partition: str | None = None
    ) -> float:
        """Quantile ``q`` of a pending job's run time given its requested limit."""
        same = self._recent(site, partition, limit_s)
        if same:
            return max(1.0, same[min(len(same) - 1, int(q * len(same)))])
        arr = self._dist(site, partition)
        if not arr:
            return limit_s  # Slurm's assumption, until we know better
        return max(1.0, arr[min(len(arr) - 1, int(q * len(arr)))] * limit_s)

    def remaining_s(
        self,
        site: str,
        limit_s: float,
        elapsed_s: float,
        q: float = 0.5,
        partition: str | None = None,
    ) -> float:
        """Quantile ``q`` of a running job's remaining time, given it survived ``elapsed_s``."""
        left = max(0.0, limit_s - elapsed_s)
        same = self._recent(site, partition, limit_s)
        if same:
            longer = [x for x in same if x > elapsed_s]
            if not longer:  # it has outlived its kind: assume it runs to its limit
                return left
            return max(
                0.0, min(left, longer[min(len(longer) - 1, int(q * len(longer)))] - elapsed_s)
            )
        arr = self._dist(site, partition)
        if not arr or limit_s <= 0:
            return left
        cut = bisect.bisect_right(arr, elapsed_s / limit_s)
        tail = arr[cut:]
        if not tail:  # it has outlived every job we saw: assume it runs to its limit
            return left
        r = tail[min(len(tail) - 1, int(q * len(tail)))]
        return max(0.0, min(left, r * limit_s - elapsed_s))


def kaplan_meier_quantiles(events: list[float], censored: list[float], grid: int) -> list[float]:
    """``grid`` evenly spaced quantiles of the Kaplan-Meier estimate of a distribution on
    [0, 1] from ``events`` (observed values) and right-``censored`` ones (known only to be
    at least that large). Mass beyond the last event goes to 1.0 (the limit). No events:
    empty (nothing is known)."""
    if not events:
        return []
    ev = np.asarray(events, dtype=float)
    every = np.sort(np.concatenate([ev, np.asarray(censored, dtype=float)]))
    values, deaths = np.unique(ev, return_counts=True)
    at_risk = len(every) - np.searchsorted(every, values, side="left")
    cdf = 1.0 - np.cumprod(1.0 - deaths / at_risk)
    u = (np.arange(grid) + 0.5) / grid
    idx = np.searchsorted(cdf, u, side="left")
    return [float(values[k]) if k < len(values) else 1.0 for k in idx]
