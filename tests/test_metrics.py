"""Placement quality measures with hand-computed values."""

from __future__ import annotations

import pytest

from federation.placement.metrics import Outcome, hedged, near_fastest, summarize


def _o(c: float, oc: float, w: float = 0.0, ow: float = 0.0, pw: float | None = None) -> Outcome:
    return Outcome(
        completion_s=c, wait_s=w, oracle_completion_s=oc, oracle_wait_s=ow, predicted_wait_s=pw
    )


def test_near_fastest_is_ten_percent_or_thirty_seconds() -> None:
    assert near_fastest(_o(129, 100))  # 29 s late: within 30 s
    assert not near_fastest(_o(131, 100))
    assert near_fastest(_o(1100, 1000))  # 10% of 1000
    assert not near_fastest(_o(1101, 1000))


def test_summary_columns() -> None:
    outs = [
        _o(100, 100, 0, 0, 0),
        _o(200, 100, 100, 0, 50),
        _o(400, 100, 300, 200, 300),
        _o(1000, 100, 900, 0, 0),
    ]
    s = summarize("p", outs)
    assert s.tasks == 4
    assert s.fastest_pct == 25.0
    assert s.median_completion_s == 300
    assert s.mean_completion_s == 425
    assert s.mean_wait_s == 325
    assert s.median_extra_s == 200  # extras: 0, 100, 300, 900
    assert s.mean_extra_s == 325
    assert s.p95_extra_s == pytest.approx(810)
    assert s.oracle_queued_pct == 25.0
    assert s.wait_within_60s_pct == 75.0  # errors 0, 50, 0, 900
    assert s.wait_within_600s_pct == 75.0


def test_hedge_first_start_wins_and_loser_held_queue_time() -> None:
    comp, wait, held = hedged([(500.0, 900.0), (200.0, 1400.0)], submit_s=100.0)
    assert (comp, wait) == (1300.0, 100.0)  # the copy that started first ran to the end
    assert held == 100.0  # the other copy queued from 100 to 200, then was cancelled
    with pytest.raises(ValueError):
        hedged([], 0.0)


def test_a_copy_added_later_can_win_and_the_first_holds_until_then() -> None:
    from federation.placement.metrics import hedged_over_time

    # submitted at 0 (starts at 5000), a second copy at 1800 starts at 2000 and wins
    comp, wait, held = hedged_over_time([(0.0, 5000.0, 5600.0), (1800.0, 2000.0, 2700.0)], 0.0)
    assert (comp, wait, held) == (2700.0, 2000.0, 2000.0)
    # a later copy that never beats the first held the queue from its own submission
    comp, wait, held = hedged_over_time([(0.0, 900.0, 1500.0), (600.0, 4000.0, 4600.0)], 0.0)
    assert (comp, wait, held) == (1500.0, 900.0, 300.0)
    with pytest.raises(ValueError, match="submitted before the task"):
        hedged_over_time([(-1.0, 0.0, 1.0)], 0.0)


def test_empty_outcomes_is_an_error() -> None:
    with pytest.raises(ValueError, match="no outcomes"):
        summarize("p", [])
