"""One placement decision: a named (or given) policy ranks the candidates.

Kept apart from :mod:`.candidates` (which the policies build on), so that neither the
candidates nor the policies import each other back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from federation.core.envelope import ResourceEnvelope
from federation.core.snapshot import FederationSnapshot
from federation.core.spec import SiteSpec
from federation.placement.candidates import PlacementDecision
from federation.placement.learned import AUTO, LearnedPlacement
from federation.placement.policies import Policy, get_policy


def place(
    envelope: ResourceEnvelope,
    sites: Sequence[SiteSpec],
    snapshot: FederationSnapshot,
    policy: str | Policy = AUTO,
    now: datetime | None = None,
    *,
    new_task: bool = True,
) -> PlacementDecision:
    """Rank every feasible (site, partition) for ``envelope`` with a named policy.

    ``new_task=False`` for a preview (no hedge budget earned or spent). ``auto`` (the
    default) is the twin on these sites with nothing learned yet (a coordinator keeps one
    that learns: :class:`~federation.placement.learned.LearnedPlacement`).
    Raises :class:`NoFeasibleSiteError` (a reason per site) when nothing is feasible.
    """
    pol = LearnedPlacement(sites, hedge=False).policy if policy == AUTO else get_policy(policy)
    return pol.decide(envelope, sites, snapshot, now or datetime.now(UTC), new_task=new_task)
