"""A second opinion on every candidate's wait: Slurm's own plan, every job run to its limit.

The twin predicts waits from a learned usage model: most jobs end early, so most queues move
faster than Slurm's plan says, and ranking on the twin's median is what makes it near-fastest
for most tasks (docs/placement.md, the replay benchmark). Its misses are one-sided, and
they are the tail: a queue whose jobs do run to their limits (a sweep of 8-hour jobs on a
partition whose usage model is dominated by short ones) waits far longer than the twin said.

:class:`WaitBound` asks a second predictor for each candidate, the same backfill replay with
every job running to its limit (``best-feasible``'s view), and records it on the candidate
(``wait_bound_s``). The default ranking then charges a candidate ``weight`` times how far
that plan lies beyond the twin's median (:func:`bounded_key`): a site where both agree
keeps its twin completion, and a site that is fast only if every job there ends early pays
for the gamble. Nothing in it is set per trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from federation.core.envelope import ResourceEnvelope
from federation.core.snapshot import FederationSnapshot
from federation.core.spec import SiteSpec
from federation.placement.candidates import Candidate, WaitFn

__all__ = ["WaitBound", "bounded_key"]


@dataclass
class WaitBound:
    """Each candidate's wait on Slurm's plan (every job to its limit), and its weight."""

    wait_fn: WaitFn
    """A predictor of the plan (``TwinPredictor`` with an empty usage model)."""
    weight: float = 0.5  # the default's (learned.BOUND_WEIGHT)
    """How much of the gap between the plan and the twin's median a candidate is charged."""

    def prepare(
        self,
        envelope: ResourceEnvelope,
        sites: Sequence[SiteSpec],
        snapshot: FederationSnapshot,
        now: datetime,
        ladder: bool,
    ) -> None:
        then = getattr(self.wait_fn, "prepare", None)
        if then is not None:
            then(envelope, sites, snapshot, now, ladder)

    def apply(
        self, cands: Sequence[Candidate], snapshot: FederationSnapshot, now: datetime
    ) -> list[Candidate]:
        """``cands`` with ``wait_bound_s`` set (a candidate its site's snapshot lacks keeps
        None and is ranked on the twin alone)."""
        out = []
        for c in cands:
            site = snapshot.site(c.site)
            part = site.partition(c.partition) if site is not None else None
            if site is None or part is None:
                out.append(c)
                continue
            bound, _, _ = self.wait_fn(c.shape, part, site, now)
            out.append(c.model_copy(update={"wait_bound_s": max(c.predicted_wait_s, bound)}))
        return out


def bounded_key(c: Candidate, weight: float) -> float:
    """The charge for how far Slurm's plan lies beyond the predicted wait (0 without one)."""
    if c.wait_bound_s is None:
        return 0.0
    return weight * max(0.0, c.wait_bound_s - c.predicted_wait_s)
