"""Placement quality measures, as the paper reports them and a few it did not.

"Additional completion time" is a task's completion time under a policy minus the fastest
completion any feasible placement would have had (the oracle), for the same task, submitted
at the same moment into the same queue state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from federation.core.model import Frozen


@dataclass(frozen=True)
class Outcome:
    """One task under one policy."""

    completion_s: float
    wait_s: float
    oracle_completion_s: float
    oracle_wait_s: float
    predicted_wait_s: float | None = None
    copies: int = 1
    hedge_held_s: float = 0.0
    """Queue time held by copies cancelled when another copy started."""
    duplicate_run_s: float = 0.0
    """Time copies ran beside the winner (started before the coordinator saw the winner's
    start) until they were cancelled."""
    slurm_predicted_wait_s: float | None = None
    """Slurm's own start estimate for the chosen copy (every job to its limit), beside
    the policy's ``predicted_wait_s``."""

    @property
    def extra_s(self) -> float:
        return max(0.0, self.completion_s - self.oracle_completion_s)


class PolicySummary(Frozen):
    """The paper's columns plus tail, near-fastest and hedging cost."""

    policy: str
    tasks: int
    fastest_pct: float
    near_fastest_pct: float
    median_completion_s: float
    mean_completion_s: float
    mean_wait_s: float
    median_extra_s: float
    mean_extra_s: float
    p95_extra_s: float
    p99_extra_s: float
    oracle_queued_pct: float
    wait_within_60s_pct: float | None = None
    wait_within_600s_pct: float | None = None
    copies_per_task: float = 1.0
    hedge_held_s_per_task: float = 0.0
    duplicate_run_s_per_task: float = 0.0
    slurm_within_60s_pct: float | None = None


def near_fastest(o: Outcome, rel: float = 0.10, abs_s: float = 30.0) -> bool:
    """Within 10% or 30 s of the fastest placement (whichever is looser)."""
    return o.extra_s <= max(rel * o.oracle_completion_s, abs_s)


def summarize(
    policy: str, outcomes: Sequence[Outcome], *, fastest_tol_s: float = 1.0, queued_s: float = 60.0
) -> PolicySummary:
    """Aggregate outcomes; ``queued_s``: the oracle 'had to queue' when its wait exceeds it."""
    if not outcomes:
        raise ValueError(f"policy {policy}: no outcomes to summarize")
    comp = np.array([o.completion_s for o in outcomes])
    extra = np.array([o.extra_s for o in outcomes])
    preds = [(o.predicted_wait_s, o.wait_s) for o in outcomes if o.predicted_wait_s is not None]
    n = len(outcomes)

    def pct(k: int, total: int) -> float:
        return round(100.0 * k / total, 1)

    within = None
    within10 = None
    if preds:
        err = np.array([abs(p - w) for p, w in preds])
        within = pct(int((err <= 60).sum()), len(preds))
        within10 = pct(int((err <= 600).sum()), len(preds))
    slurm = [
        abs(o.slurm_predicted_wait_s - o.wait_s)
        for o in outcomes
        if o.slurm_predicted_wait_s is not None
    ]
    slurm_within = pct(sum(e <= 60 for e in slurm), len(slurm)) if slurm else None
    return PolicySummary(
        policy=policy,
        tasks=n,
        fastest_pct=pct(int((extra <= fastest_tol_s).sum()), n),
        near_fastest_pct=pct(sum(near_fastest(o) for o in outcomes), n),
        median_completion_s=float(np.median(comp)),
        mean_completion_s=float(comp.mean()),
        mean_wait_s=float(np.mean([o.wait_s for o in outcomes])),
        median_extra_s=float(np.median(extra)),
        mean_extra_s=float(extra.mean()),
        p95_extra_s=float(np.percentile(extra, 95)),
        p99_extra_s=float(np.percentile(extra, 99)),
        oracle_queued_pct=pct(sum(o.oracle_wait_s > queued_s for o in outcomes), n),
        wait_within_60s_pct=within,
        wait_within_600s_pct=within10,
        copies_per_task=float(np.mean([o.copies for o in outcomes])),
        hedge_held_s_per_task=float(np.mean([o.hedge_held_s for o in outcomes])),
        duplicate_run_s_per_task=float(np.mean([o.duplicate_run_s for o in outcomes])),
        slurm_within_60s_pct=slurm_within,
    )


def hedged(
    starts_ends: Sequence[tuple[float, float]], submit_s: float
) -> tuple[float, float, float]:
    """Outcome of submitting copies at once and cancelling the rest when the first starts.

    Returns (completion after submit, wait, queue time the cancelled copies held).
    """
    return hedged_over_time([(submit_s, s, e) for s, e in starts_ends], submit_s)


def first_to_start(copies: Sequence[tuple[float, float, float]]) -> int:
    """The index of the copy that runs: the first to start (``(submitted, start, end)``
    each), the sooner to end among those that start together."""
    return min(range(len(copies)), key=lambda i: (copies[i][1], copies[i][2]))


def hedged_over_time(
    copies: Sequence[tuple[float, float, float]], submit_s: float
) -> tuple[float, float, float]:
    """:func:`hedged` for copies submitted at different times: ``(submitted, start, end)``.

    The first copy to start wins; every other copy is cancelled then, having held the queue
    from its own submission. Times are returned relative to the task's ``submit_s``.
    """
    if not copies:
        raise ValueError("hedged() needs at least one copy")
    if any(c[0] < submit_s or c[1] < c[0] for c in copies):
        raise ValueError(f"a copy was submitted before the task or started before it: {copies}")
    win = first_to_start(copies)
    _, start, end = copies[win]
    held = sum(max(0.0, min(s, start) - sub) for i, (sub, s, _) in enumerate(copies) if i != win)
    return end - submit_s, start - submit_s, held


def fmt_s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.0f}"
