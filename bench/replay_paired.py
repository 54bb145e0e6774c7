"""The default against ``best-feasible``, seed by seed (issue 26): never worse, a good citizen.

* **Never worse**: the judged policy's pooled mean and P95 extra completion are at most
  best-feasible's (within 1 s), and on at most 1 in 10 busy seeds is either worse.
* **A good citizen**: the background jobs' extra wait per task placed is compared *paired*,
  seed by seed (both policies met the same background jobs), because one cell's figure
  swings by thousands of seconds with the order backfill happens to pick. Reported: the mean
  paired difference (judged minus best-feasible) with its 95% confidence interval (Student's
  t over the seeds). "No more than best-feasible's" holds when the mean difference is at most
  0 or the interval includes 0 (no difference the seeds can show).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bench.replay_cell import Cell
from federation.placement.metrics import PolicySummary, fmt_s

if TYPE_CHECKING:
    from bench.replay_report import Verdict

REFERENCE = "best-feasible"
MAX_WORSE_SHARE = 0.1
"""Busy seeds on which the judged policy may be worse than best-feasible (1 in 10)."""
BG_BOUND = 1.2
"""The judged policy's pooled background delay per task: at most this times best-feasible's
(``bf + (BG_BOUND - 1) |bf|``, see the module docstring)."""

_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
_T975 |= {9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}
"""Student's t, two-sided 95%, by degrees of freedom (a larger df takes the next one below)."""


def t975(df: int) -> float:
    if df < 1:
        return math.inf
    return _T975[max(k for k in _T975 if k <= df)] if df <= 30 else 1.96


@dataclass
class Paired:
    """The judged policy against best-feasible over one (trace, regime)."""

    mean_ok: bool
    p95_ok: bool
    worse_seeds: list[int]
    busy_seeds: int
    bg_diff_s: float | None
    bg_ci_s: tuple[float, float] | None
    bg_s: float | None = None
    """The judged policy's pooled background delay per task."""
    bg_ref_s: float | None = None
    """Best-feasible's."""
    mean_s: float = 0.0
    """The judged policy's pooled mean extra (and ``p95_s``; ``*_ref_s``: best-feasible's)."""
    mean_ref_s: float = 0.0
    p95_s: float = 0.0
    p95_ref_s: float = 0.0

    @property
    def seeds_ok(self) -> bool:
        return len(self.worse_seeds) <= MAX_WORSE_SHARE * self.busy_seeds

    @property
    def bg_ok(self) -> bool:
        if self.bg_diff_s is None or self.bg_ci_s is None:
            return True
        return self.bg_diff_s <= 0 or self.bg_ci_s[0] <= 0

    @property
    def ok(self) -> bool:
        return self.mean_ok and self.p95_ok and self.seeds_ok and self.bg_ok

    @property
    def bg_limit_s(self) -> float | None:
        """The most background delay per task the bound allows (None: not measured)."""
        if self.bg_ref_s is None:
            return None
        return bg_limit(self.bg_ref_s)

    @property
    def bg_bound_ok(self) -> bool:
        limit = self.bg_limit_s
        return limit is None or self.bg_s is None or self.bg_s <= limit

    @property
    def bounds_ok(self) -> bool:
        """Issue 35: pooled mean and P95 no worse than best-feasible's, and the background
        delay within :data:`BG_BOUND` of best-feasible's."""
        return self.mean_ok and self.p95_ok and self.bg_bound_ok


def bg_limit(ref_s: float) -> float:
    """The background delay per task allowed against best-feasible's ``ref_s`` (1 s slack)."""
    return ref_s + (BG_BOUND - 1.0) * abs(ref_s) + 1.0


def bg_per_task(cells: Sequence[Cell], policy: str) -> float | None:
    """The background jobs' extra wait per task ``policy`` placed, over ``cells``."""
    if policy not in cells[0].bg_delay:
        return None
    total = sum(c.bg_delay[policy][0] for c in cells)
    tasks = sum(len(c.outcomes[policy]) for c in cells)
    return total / tasks if tasks else None


def paired(
    cells: Sequence[Cell], verdicts: Sequence[Verdict], mine: PolicySummary, ref: PolicySummary
) -> Paired:
    """The judged policy (pooled: ``mine``) against best-feasible (``ref``) over ``cells``,
    seed by seed from the targets' ``verdicts`` (a judged seed is a busy one, or any light
    one)."""
    judged = mine.policy
    worse = [
        v.seed
        for v in verdicts
        if v.judged
        and (
            v.summary.mean_extra_s > v.reference.mean_extra_s + 1.0
            or v.summary.p95_extra_s > v.reference.p95_extra_s + 1.0
        )
    ]
    diffs = []
    for c in cells:
        a, b = bg_per_task([c], judged), bg_per_task([c], REFERENCE)
        if a is not None and b is not None:
            diffs.append(a - b)
    diff = float(np.mean(diffs)) if diffs else None
    ci = None
    if len(diffs) >= 2:
        half = t975(len(diffs) - 1) * float(np.std(diffs, ddof=1)) / math.sqrt(len(diffs))
        ci = (float(np.mean(diffs)) - half, float(np.mean(diffs)) + half)
    return Paired(
        mean_ok=mine.mean_extra_s <= ref.mean_extra_s + 1.0,
        p95_ok=mine.p95_extra_s <= ref.p95_extra_s + 1.0,
        worse_seeds=worse,
        busy_seeds=sum(v.judged for v in verdicts),
        bg_diff_s=diff,
        bg_ci_s=ci,
        bg_s=bg_per_task(cells, judged),
        bg_ref_s=bg_per_task(cells, REFERENCE),
        mean_s=mine.mean_extra_s,
        mean_ref_s=ref.mean_extra_s,
        p95_s=mine.p95_extra_s,
        p95_ref_s=ref.p95_extra_s,
    )


def paired_lines(judged: str, p: Paired) -> list[str]:
    bg = (
        "-"
        if p.bg_diff_s is None
        else f"{fmt_s(p.bg_diff_s)} s/task"
        + (f" (95% CI {fmt_s(p.bg_ci_s[0])} to {fmt_s(p.bg_ci_s[1])})" if p.bg_ci_s else "")
    )
    return [
        f"{judged} against best-feasible: pooled mean {'<=' if p.mean_ok else '>'} bf's, "
        f"pooled P95 {'<=' if p.p95_ok else '>'} bf's; worse on "
        f"{len(p.worse_seeds)} of {p.busy_seeds} judged seeds"
        + (f" ({', '.join(map(str, p.worse_seeds))})" if p.worse_seeds else "")
        + f"; background delay minus bf's, paired by seed: {bg}. "
        f"**Never worse than best-feasible: {'yes' if p.ok else 'no'}.**",
        "",
        f"Tail and background bounds: pooled P95 {fmt_s(p.p95_s)} s against bf's "
        f"{fmt_s(p.p95_ref_s)} s ({'<=' if p.p95_ok else '>'}), mean {fmt_s(p.mean_s)} s "
        f"against {fmt_s(p.mean_ref_s)} s ({'<=' if p.mean_ok else '>'}), background delay "
        f"{_s(p.bg_s)} s/task against bf's {_s(p.bg_ref_s)} (at most {_s(p.bg_limit_s)}: "
        f"{'within' if p.bg_bound_ok else 'beyond'} 1.2x). "
        f"**Never worse at the tail, background within 1.2x: {'yes' if p.bounds_ok else 'no'}.**",
        "",
    ]


def _s(x: float | None) -> str:
    return "-" if x is None else fmt_s(x)


def paired_json(p: Paired) -> dict[str, object]:
    return {
        "mean_ok": p.mean_ok,
        "p95_ok": p.p95_ok,
        "worse_seeds": p.worse_seeds,
        "judged_seeds": p.busy_seeds,
        "bg_diff_s_per_task": p.bg_diff_s,
        "bg_diff_ci95_s": list(p.bg_ci_s) if p.bg_ci_s else None,
        "bg_ok": p.bg_ok,
        "ok": p.ok,
        "bg_s_per_task": p.bg_s,
        "bg_ref_s_per_task": p.bg_ref_s,
        "bg_limit_s_per_task": p.bg_limit_s,
        "bg_bound_ok": p.bg_bound_ok,
        "bounds_ok": p.bounds_ok,
    }
