"""The default's second opinion: Slurm's plan (every job to its limit) charged in the ranking."""

from __future__ import annotations

from datetime import datetime

from test_placement import NOW, SPECS, _fed

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.snapshot import PartitionSnapshot, SiteSnapshot
from federation.placement.candidates import Candidate
from federation.placement.learned import BOUND_WEIGHT, auto_policy
from federation.placement.policies import copy_cost_s, hedge_gain_s, twin, twin_hedge

GPU = ResourceEnvelope(gpus_min=4, gpus_max=4, gpu_types=("a100",), cpus_min=16, mem_gb_min=64)


def _waits(by_site: dict[str, float]):  # type: ignore[no-untyped-def]
    def fn(
        shape: Shape, part: PartitionSnapshot, site: SiteSnapshot, now: datetime
    ) -> tuple[float, float, str]:
        w = by_site[site.site]
        return w, w, f"{w:.0f} s"

    return fn


TWIN = _waits({"delta": 600.0, "anvil": 1200.0, "deltaai": 9e5, "vista": 9e5, "local": 9e5})


def test_a_site_fast_only_if_every_job_ends_early_pays_for_the_gamble() -> None:
    # the twin says delta (600 s) beats anvil (1,200 s); Slurm's plan says delta's jobs
    # could hold it 20,000 s, anvil's 1,300 s: charged a quarter of the gap, anvil wins
    plan = _waits({"delta": 20_000.0, "anvil": 1_300.0, "deltaai": 9e5, "vista": 9e5, "local": 9e5})
    alone = twin(TWIN, None).decide(GPU, SPECS, _fed(), NOW)
    guarded = auto_policy(TWIN, None, plan).decide(GPU, SPECS, _fed(), NOW)
    assert alone.chosen.site == "delta"
    assert guarded.chosen.site == "anvil" and guarded.policy == "auto"
    # the predictions shown stay the twin's; the plan is recorded beside them
    by_site = {c.site: c for c in guarded.candidates}
    assert by_site["delta"].predicted_wait_s == 600.0
    assert by_site["delta"].wait_bound_s == 20_000.0
    assert by_site["anvil"].wait_bound_s == 1_300.0
    # charged: 0.5 x 19,400 s on delta against 0.5 x 100 s on anvil
    assert BOUND_WEIGHT == 0.5


def test_where_the_plan_agrees_the_default_places_as_the_twin_does() -> None:
    plan = _waits({"delta": 700.0, "anvil": 1_250.0, "deltaai": 9e5, "vista": 9e5, "local": 9e5})
    alone = twin(TWIN, None).decide(GPU, SPECS, _fed(), NOW)
    guarded = auto_policy(TWIN, None, plan).decide(GPU, SPECS, _fed(), NOW)
    assert guarded.chosen.site == alone.chosen.site == "delta"
    assert [c.site for c in guarded.candidates] == [c.site for c in alone.candidates]


def test_a_plan_shorter_than_the_twin_is_no_credit() -> None:
    # the plan is a second opinion on how long a wait can get, never a discount
    plan = _waits({"delta": 0.0, "anvil": 0.0, "deltaai": 0.0, "vista": 0.0, "local": 0.0})
    guarded = auto_policy(TWIN, None, plan).decide(GPU, SPECS, _fed(), NOW)
    by_site = {c.site: c for c in guarded.candidates}
    assert by_site["delta"].wait_bound_s == 600.0  # raised to the twin's wait
    assert guarded.chosen.site == "delta"


def _cand(site: str, wait: float, bound: float | None, q90: float | None = None) -> Candidate:
    shape = Shape(site=site, partition="gpu", nodes=1, cpus=16, gpus=4, mem_gb=64, walltime_s=3600)
    return Candidate(
        site=site,
        partition="gpu",
        shape=shape,
        predicted_wait_s=wait,
        wait_q90_s=q90,
        wait_bound_s=bound,
        predicted_runtime_s=600.0,
        free_fraction=0.0,
        why="test",
    )


def test_a_hedge_copy_gains_only_what_slurms_plan_agrees_it_gains() -> None:
    # the favourite: twin 600 s (q90 8,000 s), plan agrees at 700 s. A copy at anvil: twin
    # 2,000 s, so a 6,000 s gain on the twin's bad case, but Slurm's plan holds it 40,000 s
    best = _cand("delta", 600.0, 700.0, q90=8_000.0)
    assert hedge_gain_s(best, _cand("anvil", 2_000.0, None)) == 6_000.0  # no plan: the twin's
    assert hedge_gain_s(best, _cand("anvil", 2_000.0, 40_000.0)) == 0.0
    # a favourite whose plan is far out, against a copy both opinions call quick: bought
    risky = _cand("delta", 600.0, 30_000.0, q90=8_000.0)
    assert hedge_gain_s(risky, _cand("anvil", 2_000.0, 2_500.0)) == 6_000.0


def test_a_hedge_copy_must_save_more_than_it_costs_the_jobs_queued_behind_it() -> None:
    # a 1-node copy in a 4-node partition with 8 jobs pending, held 2,000 s (the copy's own
    # wait; the favourite's is 5,000 s): each pending job may wait a quarter of that longer
    copy = _cand("anvil", 2_000.0, None).model_copy(
        update={"pending_jobs": 8, "partition_nodes": 4}
    )
    assert copy_cost_s(5_000.0, copy) == 8 * 0.25 * 2_000.0
    assert copy_cost_s(1_000.0, copy) == 8 * 0.25 * 1_000.0  # cancelled when the task starts
    assert copy_cost_s(5_000.0, _cand("anvil", 2_000.0, None)) == 0.0  # size unknown: free
    idle = copy.model_copy(update={"pending_jobs": 0})
    assert copy_cost_s(5_000.0, idle) == 0.0  # nobody queued behind it
    # the rule's hedge (a close runner-up) is refused where it would cost more than it saves
    pol = twin_hedge(TWIN, None, within=1.0, spread_s=1e9)
    best = _cand("delta", 600.0, None, q90=3_000.0)
    cheap = _cand("anvil", 1_000.0, None)
    dear = cheap.model_copy(update={"pending_jobs": 40, "partition_nodes": 2})
    assert hedge_gain_s(best, cheap) > 0
    assert pol._hedges([best, cheap]) == (cheap,)
    assert pol._hedges([best, dear]) == ()
