"""The coordinator's own queued copies as evidence against its wait predictor.

A wait predictor that sees only the queue as it stands (the twin, Slurm's estimates) cannot
know the jobs that will arrive and backfill ahead of a request. The coordinator can see
where that is happening: its own copies still queued past their predicted waits. A new
request at the same site and partition that is no smaller than such a copy (as many or
more nodes, CPUs, GPUs and memory, and as long a time limit) needs at least the room that
copy is still waiting for, so it is charged that copy's lateness on top of its
prediction. Smaller or shorter requests are not charged: they may fit holes (or backfill
windows) the copy cannot.

The charge is a lower bound (the late copies have not started yet, so their true lateness
is larger still) and it goes away as soon as they start or are cancelled. It is written
into the candidate's ``why``, so a decision trace shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import FederationSnapshot, PartitionSnapshot, SiteSnapshot
from federation.core.spec import SiteSpec
from federation.placement.candidates import WaitFn
from federation.placement.policies import Policy, PrepareFn


@dataclass(frozen=True)
class QueuedCopy:
    """One of the coordinator's copies still queued: what it asked, was told, has waited."""

    shape: Shape
    predicted_wait_s: float
    queued_s: float

    @property
    def late_s(self) -> float:
        return max(0.0, self.queued_s - self.predicted_wait_s)

    def no_larger_than(self, shape: Shape) -> bool:
        s = self.shape
        return (
            (s.site, s.partition) == (shape.site, shape.partition)
            and s.nodes <= shape.nodes
            and s.cpus <= shape.cpus
            and s.gpus <= shape.gpus
            and s.mem_gb <= shape.mem_gb
            and s.walltime_s <= shape.walltime_s
        )


class LateBoard:
    """The lateness a new request would be charged, from the copies ``source`` lists now."""

    def __init__(self, source: Callable[[], Iterable[QueuedCopy]], weight: float = 1.0) -> None:
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.source = source
        self.weight = weight
        self._copies: Sequence[QueuedCopy] | None = None

    def refresh(self) -> None:
        """Read the source once for the decision about to be made (see :class:`LateAdjusted`)."""
        self._copies = [c for c in self.source() if c.late_s > 0]

    def charge_s(self, shape: Shape) -> float:
        copies = self._copies if self._copies is not None else list(self.source())
        late = (c.late_s for c in copies if c.no_larger_than(shape))
        return self.weight * max(late, default=0.0)


class LateAdjusted:
    """A :data:`~federation.placement.candidates.WaitFn`: ``inner``'s waits plus the board's charge.

    :meth:`prepare` reads the board once per decision, then runs ``then`` (default:
    ``inner``'s own ``prepare``, if it has one).
    """

    def __init__(self, inner: WaitFn, board: LateBoard, then: PrepareFn | None = None) -> None:
        self.inner = inner
        self.board = board
        self.then = then if then is not None else getattr(inner, "prepare", None)

    def prepare(
        self,
        envelope: ResourceEnvelope,
        sites: Sequence[SiteSpec],
        snapshot: FederationSnapshot,
        now: datetime,
        ladder: bool,
    ) -> None:
        self.board.refresh()
        if self.then is not None:
            self.then(envelope, sites, snapshot, now, ladder)

    def __call__(
        self, shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
    ) -> tuple[float, float, str]:
        mid, high, why = self.inner(shape, part, site, now)
        charge = self.board.charge_s(shape)
        if charge <= 0:
            return mid, high, why
        return (
            mid + charge,
            high + charge,
            f"{why}; +{charge:.0f} s: a copy of ours no larger than this is queued here "
            f"{charge:.0f} s past its predicted wait",
        )


def with_late_board(policy: Policy, board: LateBoard) -> Policy:
    """``policy`` deciding on its waits plus ``board``'s charge (itself if already so)."""
    if isinstance(policy.wait_fn, LateAdjusted):
        return policy
    adjusted = LateAdjusted(policy.wait_fn, board, then=policy.prepare)
    return replace(policy, wait_fn=adjusted, prepare=adjusted.prepare)
