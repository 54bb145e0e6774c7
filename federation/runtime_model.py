"""Runtime knowledge a coordinator can learn: how long tasks take, and how long jobs really run.

* :class:`TaskRuntimeModel` keeps observed runtimes of *our* tasks per workload, hardware
  (site and partition) and shape, estimates scaling (speedup per doubling of GPUs or CPUs),
  and predicts the runtime of an untried (site, partition, shape), scaled by a datasheet
  prior of the hardware's speed (:mod:`federation.hardware`) until it has run there.
* :class:`UsageRatioModel` keeps, per site, the share of requested walltime that finished
  jobs really used (what ``sacct`` shows a real coordinator). Slurm's own estimates assume
  every job runs to its limit; in the shared traces the median job uses 40% (KTH) or under
  2% (CEA-Curie) of it. The model gives conditional remaining-time quantiles for running
  jobs and duration quantiles for pending ones.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field

from federation.envelope import Shape
from federation.hardware import SpeedFn


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
    hardware (e.g. :func:`federation.hardware.speed_prior`; ``None``: all alike): it scales
    what was seen elsewhere to a partition the workload has not run on yet, and is not used
    once it has.
    """

    default_speedup_per_doubling: float = 1.8
    speed: SpeedFn | None = None
    optimism: float = 0.0
    """On hardware the workload has not run on, predict this share faster than the prior
    says (optimistic initial values): among otherwise equal partitions the untried one is
    tried once, and its observation replaces the guess. 0: none."""
    _obs: dict[str, list[tuple[tuple[str, str], int, float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Per workload: ((site, partition), units, runtime_s, prior speed there)."""

    def _speed(self, shape: Shape) -> float:
        return 1.0 if self.speed is None else max(1e-6, self.speed(shape))

    def observe(self, workload: str, shape: Shape, runtime_s: float) -> None:
        if runtime_s > 0:
            hw = (shape.site, shape.partition)
            self._obs[workload].append((hw, shape_units(shape), runtime_s, self._speed(shape)))

    def speedup_per_doubling(self, workload: str) -> float:
        """Least-squares slope of log(runtime) on log2(units) within each partition, pooled."""
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
    """Per site, the empirical distribution of (used runtime / requested walltime)."""

    max_samples: int = 5000
    _ratios: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def observe(self, site: str, requested_s: float, used_s: float) -> None:
        if requested_s <= 0 or used_s < 0:
            return
        r = min(1.0, used_s / requested_s)
        arr = self._ratios[site]
        if len(arr) >= self.max_samples:
            arr.pop(0 if r >= arr[len(arr) // 2] else -1)  # keep the sample bounded, balanced
        bisect.insort(arr, r)

    def samples(self, site: str) -> int:
        return len(self._ratios.get(site, []))

    def duration_s(self, site: str, limit_s: float, q: float = 0.5) -> float:
        """Quantile ``q`` of a pending job's run time given its requested limit."""
        arr = self._ratios.get(site)
        if not arr:
            return limit_s  # Slurm's assumption, until we know better
        return max(1.0, arr[min(len(arr) - 1, int(q * len(arr)))] * limit_s)

    def remaining_s(self, site: str, limit_s: float, elapsed_s: float, q: float = 0.5) -> float:
        """Quantile ``q`` of a running job's remaining time, given it survived ``elapsed_s``."""
        arr = self._ratios.get(site)
        left = max(0.0, limit_s - elapsed_s)
        if not arr or limit_s <= 0:
            return left
        cut = bisect.bisect_right(arr, elapsed_s / limit_s)
        tail = arr[cut:]
        if not tail:  # it has outlived every job we saw: assume it runs to its limit
            return left
        r = tail[min(len(tail) - 1, int(q * len(tail)))]
        return max(0.0, min(left, r * limit_s - elapsed_s))
