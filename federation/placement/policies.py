"""Placement policies behind one interface.

Each policy enumerates candidates with :func:`enumerate_candidates` (the same feasibility
rules and the same rejection reasons for all), predicts with its own wait/runtime
functions, and ranks. Every decision records all candidates and every rejection.

* ``fixed:<site>`` — always the named site (its best partition): the paper's baseline.
* ``shortest-queue`` — fewest pending jobs in the partition.
* ``earliest-start`` — soonest predicted start (snapshot estimate; foundation rule).
* ``best-feasible`` — minimum predicted completion (wait + runtime) with Slurm-style waits
  (every job runs to its limit): the paper's best policy.
* ``twin`` — ours: waits from a digital twin of each partition fed with the snapshot and a
  learned usage model (jobs end early), runtimes from observed scaling; picks the shape in
  the envelope with the best completion, a bigger shape only when it helps by more than a
  usefulness threshold; ranks on completion plus a risk premium on the wait's spread.
* ``twin-hedge`` — ours: ``twin`` plus a second copy at another site when the runner-up is
  close or the favourite's wait is uncertain; the first copy to start wins, the other is
  cancelled (its queue time is reported as the hedge's cost). It runs live too
  (``Coordinator(policy="twin-hedge")`` with snapshot waits, or any hedging ``Policy``):
  the coordinator ships the copies and cancels the losers (``task.hedge_cancelled``).
* ``twin-watch`` — ours: ``twin-hedge`` that keeps watching. While every copy of a task is
  still queued past its predicted start, each new snapshot re-judges it: where a fresh
  request, in the envelope's smallest shape, now finishes sooner (by a margin) than the
  held copies, each site charged its own copy's lateness, one more copy goes there (up to
  ``Watch.max_copies``; a smaller request at a holding site counts as a new place). Queues
  that end early or late by surprise are caught a probe interval later instead of never.
  Live, the coordinator judges each such task again on one timer and one thread
  (``task.copy_added``); opt-in (``Coordinator.charge_late_copies``), it also charges new
  placements the lateness of its own queued copies (:mod:`federation.placement.lateness`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import BadEnvelopeError
from federation.core.snapshot import FederationSnapshot
from federation.core.spec import SiteSpec
from federation.placement.budget import HedgeBudget
from federation.placement.candidates import (
    Candidate,
    PlacementDecision,
    Rejection,
    RuntimeFn,
    WaitFn,
    enumerate_candidates,
    no_feasible,
    snapshot_wait,
)
from federation.placement.coldstart import ColdStart
from federation.placement.guard import WaitBound, bounded_key

SortKey = Callable[[Candidate], tuple[float, ...]]
PrepareFn = Callable[
    [ResourceEnvelope, Sequence[SiteSpec], FederationSnapshot, datetime, bool], None
]
"""Called before a decision's enumeration (e.g. to batch the wait predictions it will ask)."""


@dataclass(frozen=True)
class Watch:
    """How a policy keeps judging a task whose copies are all still queued."""

    every_s: float = 600.0
    """How often the task is judged again (the coordinator's probe cadence or slower)."""
    overdue_s: float = 300.0
    """Judged only once it is queued this much longer than its chosen copy's prediction."""
    margin_s: float = 300.0
    """A new place must finish it at least this much sooner to earn a copy."""
    max_copies: int = 4
    """Copies at most over the task's life, each at a new place (:attr:`places`)."""
    late_weight: float = 1.0
    """How much of a held copy's lateness (queued past its predicted wait) its site's fresh
    predictions are charged: a predictor wrong there once is likely wrong there again."""
    places: Literal["site", "shape"] = "shape"
    """What makes a place new: another site (``site``), or any (site, partition, shape) the
    task has not had a copy at (``shape``: a smaller request at a holding site counts)."""
    shapes: Literal["any", "smallest"] = "smallest"
    """Which shapes an added copy may take: the fresh decision's best (``any``), or only
    the envelope's smallest at each partition (``smallest``), the request that fits the
    most holes when predictions have proved wrong."""
    charge: Literal["task", "site"] = "site"
    """Whose lateness a holding site is charged: the task's (queued past the chosen copy's
    prediction) for every holding site, or (``site``) each copy's own, also when ranking
    new places at that site."""

    def place(self, c: Candidate) -> str | Shape:
        """The identity :attr:`places` gives a copy."""
        return c.site if self.places == "site" else c.shape


def _tie(c: Candidate) -> tuple[float, ...]:
    """Among equal scores: GPUs stranded, then a held node's unused share (a shared class
    for a partial node), then spare GPU memory (bigger GPUs kept for who needs them), then
    the emptier place."""
    return (c.waste, c.held_idle, c.spare_gpu_mem_gb, -c.free_fraction)


@dataclass
class Policy:
    """A named ranking over the shared candidate enumeration."""

    name: str
    key: SortKey
    wait_fn: WaitFn = snapshot_wait
    runtime_fn: RuntimeFn | None = None
    ladder: bool = False
    only_site: str | None = None
    usefulness: float = 0.0
    """A larger shape must beat the smallest one's score by this fraction to be chosen."""
    hedge_within: float | None = None
    """Hedge when the best other site's score is within this fraction of the favourite's."""
    hedge_spread_s: float | None = None
    """Hedge when the favourite's wait spread (q90 - q50) exceeds this many seconds."""
    max_copies: int = 2
    """Copies at most (the chosen one included), each at a different site."""
    notes: dict[str, str] = field(default_factory=dict)
    prepare: PrepareFn | None = None
    """Runs before the enumeration; must not change any prediction (only precompute)."""
    watch: Watch | None = None
    """Keep judging a task still queued (see :meth:`extra_copy`); None: decide once."""
    budget: HedgeBudget | None = None
    """Copies beyond the first are bought from this budget (None: every rule-made copy)."""
    bound: WaitBound | None = None
    """A second opinion on each candidate's wait (Slurm's plan), for the ranking to charge."""
    cold_start: ColdStart | None = None
    """Charges a cold block's start-up where no block of the shape is warm, and waits a
    warm one on its block (:mod:`federation.placement.coldstart`; a coordinator's only)."""

    def decide(
        self,
        envelope: ResourceEnvelope,
        sites: Sequence[SiteSpec],
        snapshot: FederationSnapshot,
        now: datetime,
        *,
        new_task: bool = True,
    ) -> PlacementDecision:
        """Rank the candidates and pick one (plus hedge copies, if the policy hedges).

        ``new_task=False``: a preview or a re-judgement of a task already placed; it earns
        no hedge budget and spends none (its hedges are those the budget would buy now).
        """
        if self.prepare is not None:
            self.prepare(envelope, sites, snapshot, now, self.ladder)
        cands, rejected = enumerate_candidates(
            envelope, sites, snapshot, now, self.wait_fn, self.runtime_fn, self.ladder
        )
        if self.bound is not None and cands:
            self.bound.prepare(envelope, sites, snapshot, now, self.ladder)
            cands = self.bound.apply(cands, snapshot, now)
        if self.cold_start is not None and cands:
            cands = self.cold_start.apply(cands, sites, snapshot, now)
        if self.only_site is not None:
            rejected += [
                Rejection(
                    site=c.site, partition=c.partition, reason=f"policy pins {self.only_site}"
                )
                for c in cands
                if c.site != self.only_site and c.shape == _smallest(cands, c)
            ]
            cands = [c for c in cands if c.site == self.only_site]
        if not cands:
            raise no_feasible(rejected)
        ranked = sorted(cands, key=lambda c: (*self.key(c), c.site, c.partition, c.shape.gpus))
        chosen = self._apply_usefulness(ranked)
        ranked = [chosen] + [c for c in ranked if c is not chosen]
        if new_task and self.budget is not None:
            self.budget.placed()
        return PlacementDecision(
            policy=self.name,
            chosen=chosen,
            candidates=tuple(ranked),
            rejected=tuple(rejected),
            hedges=self._hedges(ranked, spend=new_task),
            snapshot_taken_at=snapshot.taken_at,
            decided_at=now,
        )

    def overdue(self, first: PlacementDecision, copies: int, queued_s: float) -> bool:
        """Whether a task with ``copies`` copies, all queued for ``queued_s``, is judged again:
        it is watched, below ``max_copies``, and ``overdue_s`` past its predicted wait."""
        w = self.watch
        if w is None or copies >= w.max_copies:
            return False
        return queued_s >= first.chosen.predicted_wait_s + w.overdue_s

    def extra_copy(
        self,
        first: PlacementDecision,
        fresh: PlacementDecision,
        holding: Sequence[Candidate],
        queued_s: float,
        tried: Sequence[Candidate] = (),
        held_for_s: Sequence[float] | None = None,
    ) -> Candidate | None:
        """Where to add a copy of a task whose copies ``holding`` are all still queued.

        ``first`` is the decision made on submit, ``fresh`` one made now on a new snapshot,
        ``queued_s`` how long the task has waited, ``tried`` every copy it ever had (none is
        placed again where one was), ``held_for_s`` how long each held copy has been
        queued (default: ``queued_s``, copies shipped with the task). A copy is added only
        when the task is overdue (queued ``overdue_s`` past the chosen copy's predicted
        wait), the copies are fewer than ``max_copies``, and a new place finishes it, by the
        fresh prediction, ``margin_s`` sooner than a fresh submission of any held copy (a
        conservative stand-in for the queued copies, which are further ahead).

        A site holding a copy is charged ``late_weight`` times that copy's lateness (how
        long it is queued past its own predicted wait): a predictor wrong there once is
        likely wrong there again. With ``Watch.charge == "site"`` the charge also counts
        when ranking the new places at that site. What a new place is, and which shapes it
        may take, is :attr:`Watch.places` and :attr:`Watch.shapes`.
        """
        if not self.overdue(first, len(holding), queued_s):
            return None
        w = self.watch
        assert w is not None
        late: dict[str, float] = {}
        if w.charge == "task":  # the first rule: the task's lateness, at every holding site
            task_late = w.late_weight * max(0.0, queued_s - first.chosen.predicted_wait_s)
            late = dict.fromkeys((c.site for c in holding), task_late)
        else:
            ages = list(held_for_s) if held_for_s is not None else [queued_s] * len(holding)
            for c, age in zip(holding, ages, strict=True):
                lateness = w.late_weight * max(0.0, age - c.predicted_wait_s)
                late[c.site] = max(late.get(c.site, 0.0), lateness)

        def score(c: Candidate, charged: bool) -> float:
            return self.key(c)[0] + (late.get(c.site, 0.0) if charged else 0.0)

        used = {w.place(c) for c in (*tried, *holding)}
        smallest = {(c.site, c.partition): _smallest(fresh.candidates, c) for c in fresh.candidates}
        others = [
            c
            for c in fresh.candidates
            if w.place(c) not in used
            and (w.shapes == "any" or c.shape == smallest[(c.site, c.partition)])
        ]
        if not others:
            return None
        ranked = w.charge == "site"
        best = min(others, key=lambda c: score(c, ranked)) if ranked else others[0]
        # a held copy's stand-in: a fresh request of its shape (places="site": the best
        # fresh request at its site, the first rule)
        held = {w.place(c) for c in holding}
        stand_ins = [c for c in fresh.candidates if w.place(c) in held]
        here = [score(c, True) for c in stand_ins]
        if here and score(best, ranked) + w.margin_s >= min(here):
            return None
        if best.wait_bound_s is not None:  # Slurm's plan beside the twin: it must agree
            plan = [_plan_completion_s(c, late.get(c.site, 0.0)) for c in stand_ins]
            mine = _plan_completion_s(best, late.get(best.site, 0.0))
            if plan and mine + w.margin_s >= min(plan):
                return None
        gain = (min(here) if here else score(first.chosen, True)) - score(best, ranked)
        held_wait = [c.predicted_wait_s + late.get(c.site, 0.0) for c in stand_ins]
        cost = copy_cost_s(min(held_wait, default=best.predicted_wait_s), best)
        gain -= cost
        if cost > 0 and gain <= 0:  # it would cost the jobs queued behind it more than it saves
            return None
        if self.budget is not None and not self.budget.offer(gain):
            return None
        return best

    def _apply_usefulness(self, ranked: list[Candidate]) -> Candidate:
        best = ranked[0]
        if not self.ladder or self.usefulness <= 0:
            return best
        # the smallest shape at the best candidate's site/partition, or anywhere
        small = [c for c in ranked if c.shape == _smallest(ranked, c)]
        base = small[0] if small else best
        if best is base:
            return best
        if self.key(best)[0] < self.key(base)[0] * (1 - self.usefulness):
            return best
        return base

    def _hedges(self, ranked: list[Candidate], spend: bool = True) -> tuple[Candidate, ...]:
        if self.hedge_within is None and self.hedge_spread_s is None:
            return ()
        best = ranked[0]
        spread = (best.wait_q90_s or best.predicted_wait_s) - best.predicted_wait_s
        risky = self.hedge_spread_s is not None and spread > self.hedge_spread_s
        out = self._rule_hedges(ranked, risky)
        cost = {id(c): copy_cost_s(best.predicted_wait_s, c) for c in out}
        net = {id(c): hedge_gain_s(best, c) - cost[id(c)] for c in out}
        # a copy must be worth more than it costs the jobs queued behind it
        out = tuple(c for c in out if cost[id(c)] == 0 or net[id(c)] > 0)
        if self.budget is None:
            return out
        buy = self.budget.offer if spend else self.budget.would_buy
        return tuple(c for c in out if buy(net[id(c)]))

    def _rule_hedges(self, ranked: list[Candidate], risky: bool) -> tuple[Candidate, ...]:
        best = ranked[0]
        out: list[Candidate] = []
        used = {best.site}
        for other in ranked[1:]:
            if len(out) >= self.max_copies - 1:
                break
            if other.site in used:
                continue
            close = (
                self.hedge_within is not None
                and self.key(other)[0] <= self.key(best)[0] * (1 + self.hedge_within) + 1.0
            )
            if close or risky:
                out.append(other)
                used.add(other.site)
        return tuple(out)


def hedge_gain_s(best: Candidate, other: Candidate) -> float:
    """How much sooner a copy at ``other`` is predicted to finish the task than ``best``
    alone, in the favourite's bad case: its completion with the wait at its q90 (a point
    prediction without a spread is given half its wait as one, a prior: waits are uncertain
    in proportion to their length), against the copy's own predicted completion."""
    spread = (
        best.wait_q90_s - best.predicted_wait_s
        if best.wait_q90_s is not None
        else 0.5 * best.predicted_wait_s
    )
    gain = max(0.0, best.predicted_completion_s + spread - other.predicted_completion_s)
    if best.wait_bound_s is not None and other.wait_bound_s is not None:
        gain = min(gain, max(0.0, _plan_completion_s(best) - _plan_completion_s(other)))
    return gain


def copy_cost_s(hold_s: float, copy: Candidate) -> float:
    """The extra waiting a queued ``copy`` is expected to impose on the jobs queued behind
    it, in seconds summed over them: it holds its place until it starts or the task starts
    elsewhere (the shorter of its predicted wait and ``hold_s``, the held copy's), and while
    queued ahead of them it may hold each of the partition's pending jobs back by its share
    of the partition's nodes for that time (backfill plans around it). A copy is bought only
    for a gain above this: a task's second is worth a background job's. 0 where the
    partition's size is unknown."""
    if copy.partition_nodes <= 0:
        return 0.0
    hold = max(0.0, min(hold_s, copy.predicted_wait_s))
    share = min(1.0, copy.shape.nodes / copy.partition_nodes)
    return copy.pending_jobs * share * hold


def _plan_completion_s(c: Candidate, late_s: float = 0.0) -> float:
    """``c``'s completion on Slurm's plan (its wait bound), plus ``late_s``."""
    wait = c.wait_bound_s if c.wait_bound_s is not None else c.predicted_wait_s
    return c.stage_in_s + wait + c.predicted_runtime_s + late_s


def _smallest(cands: Sequence[Candidate], c: Candidate) -> Shape:
    """The smallest shape among candidates on the same site and partition as ``c``."""
    same = [x.shape for x in cands if (x.site, x.partition) == (c.site, c.partition)]
    return min(same, key=lambda s: (s.gpus, s.cpus, s.mem_gb))


def fixed_site(site: str) -> Policy:
    return Policy(
        name=f"fixed:{site}", key=lambda c: (c.predicted_wait_s, *_tie(c)), only_site=site
    )


def shortest_queue() -> Policy:
    return Policy(
        name="shortest-queue", key=lambda c: (float(c.pending_jobs), c.predicted_wait_s, *_tie(c))
    )


def earliest_start() -> Policy:
    # the start counts the stage-in transfer too (0 when the data is already at the site)
    return Policy(name="earliest-start", key=lambda c: (c.predicted_start_s, *_tie(c)))


def best_feasible(runtime_fn: RuntimeFn | None = None) -> Policy:
    return Policy(
        name="best-feasible",
        runtime_fn=runtime_fn,
        key=lambda c: (c.predicted_completion_s, *_tie(c)),
    )


def twin(
    wait_fn: WaitFn,
    runtime_fn: RuntimeFn | None,
    *,
    risk: float = 0.25,
    usefulness: float = 0.05,
    name: str = "twin",
    bound: WaitBound | None = None,
) -> Policy:
    """Completion plus ``risk`` times the wait's spread; shapes from the envelope's ladder.
    With ``bound``, plus its weight times how far Slurm's plan lies beyond the wait
    (:mod:`federation.placement.guard`)."""
    weight = bound.weight if bound is not None else 0.0

    def key(c: Candidate) -> tuple[float, ...]:
        spread = (c.wait_q90_s or c.predicted_wait_s) - c.predicted_wait_s
        return (c.predicted_completion_s + risk * spread + bounded_key(c, weight), *_tie(c))

    return Policy(
        name=name,
        key=key,
        wait_fn=wait_fn,
        runtime_fn=runtime_fn,
        ladder=True,
        usefulness=usefulness,
        prepare=getattr(wait_fn, "prepare", None),
        bound=bound,
    )


def twin_hedge(
    wait_fn: WaitFn,
    runtime_fn: RuntimeFn | None,
    *,
    within: float = 0.5,
    spread_s: float = 300.0,
    risk: float = 0.25,
    max_copies: int = 2,
    budget: HedgeBudget | None = None,
    bound: WaitBound | None = None,
) -> Policy:
    p = twin(wait_fn, runtime_fn, risk=risk, name="twin-hedge", bound=bound)
    p.hedge_within = within
    p.hedge_spread_s = spread_s
    p.max_copies = max_copies
    p.budget = budget
    return p


def twin_watch(
    wait_fn: WaitFn,
    runtime_fn: RuntimeFn | None,
    *,
    watch: Watch | None = None,
    max_copies: int = 2,
    budget: HedgeBudget | None = None,
    bound: WaitBound | None = None,
) -> Policy:
    """``twin-hedge`` that re-judges a task while all its copies are still queued."""
    p = twin_hedge(wait_fn, runtime_fn, max_copies=max_copies, budget=budget, bound=bound)
    p.name = "twin-watch"
    p.watch = watch or Watch()
    return p


_SIMPLE: dict[str, Callable[[], Policy]] = {
    "earliest-start": earliest_start,
    "shortest-queue": shortest_queue,
    "best-feasible": best_feasible,
}


_SNAPSHOT_PREDICTED: dict[str, Callable[[], Policy]] = {
    "twin-hedge": lambda: twin_hedge(snapshot_wait, None),
    "twin-watch": lambda: twin_watch(snapshot_wait, None),
}
"""Predictor-based policies a coordinator can name in configuration: waits from the
snapshot alone (:func:`~federation.placement.candidates.snapshot_wait`, a point estimate, so a hedge
is placed when the runner-up site is close), no runtime model. A coordinator with learned
predictors passes the :class:`Policy` itself (``twin_hedge(TwinPredictor(...), runtime)``)."""


def with_cold_start(policy: Policy, step: ColdStart) -> Policy:
    """``policy`` with its candidates charged a cold block's start-up, and warm ones waited
    on their block, by ``step`` (:mod:`federation.placement.coldstart`)."""
    if policy.cold_start is step:
        return policy
    return replace(policy, cold_start=step)


def get_policy(name: str | Policy) -> Policy:
    """A policy by name (``fixed:<site>`` pins a site), or the policy itself."""
    if isinstance(name, Policy):
        return name
    if name.startswith("fixed:"):
        return fixed_site(name.split(":", 1)[1])
    if name in _SIMPLE:
        return _SIMPLE[name]()
    if name in _SNAPSHOT_PREDICTED:
        return _SNAPSHOT_PREDICTED[name]()
    raise BadEnvelopeError(
        f"unknown placement policy {name!r}; use one of "
        f"{sorted([*_SIMPLE, *_SNAPSHOT_PREDICTED])} or 'fixed:<site>' "
        "(twin and the other predictor-based policies: build them with "
        "federation.placement.policies)"
    )
