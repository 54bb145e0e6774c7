"""The replay benchmark's watch bookkeeping: when watched tasks are judged and scored."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest
from test_placement import NOW, SPECS, _fed

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.replay import (  # noqa: E402
    WORKLOADS,
    Learning,
    Pending,
    _next_tick,
    _score_started,
    true_runtime,
)
from federation.placement.candidates import snapshot_wait  # noqa: E402
from federation.placement.metrics import Outcome  # noqa: E402
from federation.placement.policies import Watch, twin_watch  # noqa: E402
from federation.placement.runtime_model import TaskRuntimeModel  # noqa: E402

W = WORKLOADS[0]
SPEC_BY_NAME = {s.name: s for s in SPECS}


def _pending(copies: list[tuple[str, float, float, float]], submit_s: float = 1000.0) -> Pending:
    pol = twin_watch(snapshot_wait, lambda s: 600.0, watch=Watch(every_s=600.0))
    first = pol.decide(W.envelope, SPECS, _fed(), NOW)
    placed = [first.chosen] * len(copies)
    return Pending(pol, W, submit_s, 1.0, first, copies, (1100.0, 1700.0), placed)


def test_a_watched_task_is_scored_by_the_copy_that_started_first() -> None:
    # the first copy queues until 9000 s; a copy added at 4000 s starts at 4200 s and wins
    p = _pending([("delta", 1000.0, 9000.0, 9600.0)])
    assert not p.started_by(5000.0)
    p.copies.append(("anvil", 4000.0, 4200.0, 4900.0))
    assert p.started_by(5000.0) and not p.started_by(4199.0)
    o = p.outcome()
    assert o.completion_s == 3900.0 and o.wait_s == 3200.0
    assert o.oracle_completion_s == 700.0 and o.oracle_wait_s == 100.0
    assert o.copies == 2 and o.hedge_held_s == 3200.0  # delta's copy held 1000 s..4200 s
    assert o.extra_s == 3200.0


def test_started_tasks_are_scored_once_and_the_rest_keep_waiting() -> None:
    early = _pending([("delta", 1000.0, 1500.0, 2100.0)])
    late = _pending([("anvil", 1000.0, 8000.0, 8600.0)])
    outcomes: dict[str, list[Outcome]] = defaultdict(list)
    learning = Learning(TaskRuntimeModel)
    still = _score_started([early, late], 2000.0, outcomes, SPEC_BY_NAME, learning)
    assert still == [late]
    assert [o.completion_s for o in outcomes["twin-watch"]] == [1100.0]
    assert _score_started(still, 2000.0, outcomes, SPEC_BY_NAME, learning) == [late]
    assert len(outcomes["twin-watch"]) == 1


def test_runtimes_are_learned_when_the_copy_that_ran_ends() -> None:
    learning = Learning(TaskRuntimeModel)
    model = learning.model("twin-watch")  # the policy's own model
    # two copies: the second starts first (at 1200 s) and ends at 2300 s; it is the one learned
    p = _pending([("delta", 1000.0, 5000.0, 5600.0), ("anvil", 1000.0, 1200.0, 2300.0)])
    assert p.winner() == 1
    won = p.placed[1].shape
    prior = model.predict(W.name, won, default_s=1.0)
    _score_started([p], 1500.0, defaultdict(list), SPEC_BY_NAME, learning)
    learning.learn_until(2299.0)  # still running: nothing known yet
    assert model.predict(W.name, won, default_s=1.0) == prior
    learning.learn_until(2300.0)
    expected = true_runtime(W, won, SPEC_BY_NAME[won.site], p.noise)
    assert model.predict(W.name, won, default_s=1.0) == pytest.approx(expected)
    learning.learn_until(1e9)  # learned once, and by that policy only
    assert len(model._obs[W.name]) == 1
    assert list(learning.models) == ["twin-watch"]


@pytest.mark.parametrize(
    ("t", "next_round", "end", "watching", "expected"),
    [
        (0.0, 1800.0, 7200.0, True, 600.0),  # a watch tick before the next round
        (1500.0, 1800.0, 7200.0, True, 1800.0),  # the round comes first
        (0.0, 1800.0, 7200.0, False, 1800.0),  # nothing watched: round to round
        (7200.0, 9000.0, 7200.0, True, 7800.0),  # after the last round: ticks only
        (7200.0, 9000.0, 7200.0, False, float("inf")),  # and then nothing: the run ends
    ],
)
def test_next_tick(
    t: float, next_round: float, end: float, watching: bool, expected: float
) -> None:
    pending = [_pending([("delta", 0.0, 1e9, 1e9 + 600)])] if watching else []
    assert _next_tick(t, next_round, end, 600.0, pending) == expected


def test_usage_accuracy_summary_by_hand() -> None:
    import numpy as np

    from bench.usage_accuracy import summary

    # (true wait, predicted wait): exact, 20 min early, 2 h late, exact at zero
    s = summary(np.array([[600.0, 600.0], [1800.0, 600.0], [0.0, 7200.0], [0.0, 0.0]]))
    assert s["within 10 min %"] == 50.0
    assert s["within 1 h %"] == 75.0
    assert s["too early %"] == 25.0
    logs = sorted([0.0, np.log(1860 / 660), np.log(60 / 7260), 0.0])
    assert s["median log(true/pred)"] == pytest.approx((logs[1] + logs[2]) / 2)
    assert s["mean |log|"] == pytest.approx(np.mean(np.abs(logs)))
