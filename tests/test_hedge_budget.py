"""The hedge budget: at most N copies per task on average, bought where the gain is largest."""

from __future__ import annotations

import numpy as np
import pytest
from test_placement import NOW, SPECS, _fed

from federation.core.envelope import ResourceEnvelope
from federation.placement.budget import HedgeBudget
from federation.placement.candidates import snapshot_wait
from federation.placement.policies import hedge_gain_s, twin_hedge


def test_the_average_never_exceeds_the_budget_beyond_the_opening() -> None:
    b = HedgeBudget(copies_per_task=1.2, opening=1.0, min_gain_s=0.0)
    rng = np.random.default_rng(0)
    for n in range(1, 2001):
        b.placed()
        for _ in range(int(rng.integers(0, 3))):  # 0-2 offers per task
            b.offer(float(rng.exponential(600.0)))
        assert b.extra <= 0.2 * n + 1.0 + 1e-9
    assert 1.15 <= b.copies_so_far <= 1.2 + 1.0 / 2000


def test_copies_are_bought_where_the_gain_is_largest() -> None:
    b = HedgeBudget(copies_per_task=1.2, min_gain_s=0.0)
    rng = np.random.default_rng(1)
    bought, refused = [], []
    for _ in range(3000):
        b.placed()
        g = float(rng.exponential(600.0))
        (bought if b.offer(g) else refused).append(g)
    assert len(bought) <= 0.2 * 3000 + 1
    assert np.median(bought) > 3 * np.median(refused)


def test_small_gains_are_never_bought_and_a_preview_spends_nothing() -> None:
    b = HedgeBudget(copies_per_task=2.0, min_gain_s=60.0)
    b.placed()
    assert not b.offer(59.0)
    assert b.would_buy(600.0) and b.extra == 0 and b.offers == 1
    assert b.offer(600.0) and b.extra == 1


def test_a_budget_below_one_copy_is_refused() -> None:
    with pytest.raises(ValueError, match="copies_per_task"):
        HedgeBudget(copies_per_task=0.9)


def test_a_hedging_policy_places_no_copy_its_budget_cannot_pay_for() -> None:
    env = ResourceEnvelope(gpus_min=1, gpus_max=1, cpus_min=8, mem_gb_min=32, walltime_s=3600)
    free = twin_hedge(snapshot_wait, None, within=10.0)  # hedges whenever a site is close
    d = free.decide(env, SPECS, _fed(), NOW)
    assert d.hedges, "without a budget the rule hedges here"
    broke = twin_hedge(
        snapshot_wait, None, within=10.0, budget=HedgeBudget(copies_per_task=1.0, opening=0.0)
    )
    for _ in range(3):
        assert broke.decide(env, SPECS, _fed(), NOW).hedges == ()
    rich = HedgeBudget(copies_per_task=2.0, opening=5.0, min_gain_s=0.0)
    paid = twin_hedge(snapshot_wait, None, within=10.0, budget=rich)
    preview = paid.decide(env, SPECS, _fed(), NOW, new_task=False)
    assert rich.tasks == 0 and rich.extra == 0  # a preview earns and spends nothing
    d = paid.decide(env, SPECS, _fed(), NOW)
    assert rich.tasks == 1 and rich.extra == len(d.hedges) == len(preview.hedges)
    for h in d.hedges:
        assert hedge_gain_s(d.chosen, h) >= 0.0
