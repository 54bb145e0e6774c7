"""A budget for hedge copies: at most ``copies_per_task`` copies per task on average, spent
where the predicted gain per copy is largest.

Every copy beyond a task's first costs the sites real room (it queues, backfill plans around
it, and a copy that starts beside the winner burns its allocation until it is cancelled), so
a policy that hedges gets a budget:

* **Credit.** Each task placed earns ``copies_per_task - 1`` extra copies of credit (0.2 at
  the default 1.2), plus a small opening allowance (``opening``) so that the first tasks are
  not refused for want of history; an extra copy spends one. The average over any prefix of
  tasks stays at most ``copies_per_task`` plus ``opening / tasks``.
* **Where.** Offers (a hedge at submission, or one more copy for a task still queued) come
  with a *predicted gain* in seconds: how much sooner the task is expected to finish with the
  copy. The budget remembers the gains it was offered and grants an offer only if its gain
  is in the top share it can afford: at least the ``1 - rate`` quantile of the gains offered
  so far, where ``rate`` is the share of offers the credit earned so far could pay for. Small
  gains (a hedge "just in case" on an idle federation) are refused while large ones (a task
  stuck far past its prediction) are paid for.
* **Floor.** A copy whose gain is under ``min_gain_s`` is never bought.

The budget is the policy's own state (one per policy and coordinator); it is not persisted
across restarts.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

__all__ = ["HedgeBudget"]


@dataclass
class HedgeBudget:
    copies_per_task: float = 1.2
    """Average copies per task at most (the first copy included)."""
    opening: float = 1.0
    """Extra copies allowed before any credit is earned."""
    min_gain_s: float = 60.0
    """A copy must be predicted to save at least this much."""
    history: int = 2000
    """How many of the latest offered gains rank an offer."""

    tasks: int = 0
    extra: int = 0
    offers: int = 0
    _gains: list[float] = field(default_factory=list)
    _order: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.copies_per_task < 1:
            raise ValueError(f"copies_per_task must be >= 1, got {self.copies_per_task}")

    @property
    def credit(self) -> float:
        return self.opening + (self.copies_per_task - 1.0) * self.tasks - self.extra

    def placed(self) -> None:
        """A task was placed (it earns its share of credit)."""
        with self._lock:
            self.tasks += 1

    def threshold_s(self) -> float:
        """The gain an offer needs now (``inf`` while there is no credit for a copy)."""
        with self._lock:
            return self._threshold()

    def _threshold(self) -> float:
        if self.credit < 1.0:
            return float("inf")
        if not self._order:
            return self.min_gain_s
        affordable = (self.copies_per_task - 1.0) * max(self.tasks, 1) + self.opening
        rate = min(1.0, affordable / max(self.offers, 1))
        k = int((1.0 - rate) * len(self._order))
        return max(self.min_gain_s, self._order[min(k, len(self._order) - 1)] if k else 0.0)

    def would_buy(self, gain_s: float) -> bool:
        """Whether :meth:`offer` would buy it now, without remembering or paying (a preview)."""
        return gain_s >= self.threshold_s()

    def offer(self, gain_s: float) -> bool:
        """Whether a copy predicted to save ``gain_s`` is bought (and paid for, if so)."""
        with self._lock:
            self._remember(gain_s)
            if gain_s < self._threshold():
                return False
            self.extra += 1
            return True

    def _remember(self, gain_s: float) -> None:
        self.offers += 1
        self._gains.append(gain_s)
        bisect.insort(self._order, gain_s)
        if len(self._gains) > self.history:
            old = self._gains.pop(0)
            del self._order[bisect.bisect_left(self._order, old)]

    @property
    def copies_so_far(self) -> float:
        """Copies per task so far (1.0 before any task)."""
        return 1.0 + self.extra / self.tasks if self.tasks else 1.0
