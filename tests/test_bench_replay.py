"""The replay benchmark: runtimes learned when tasks end, ticks, per-seed verdicts, one cell."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.replay_cell import Cell, Learning, _next_tick, run_cell  # noqa: E402
from bench.replay_paired import bg_limit  # noqa: E402
from bench.replay_report import judge, render  # noqa: E402
from bench.replay_setup import WORKLOADS, CellOptions  # noqa: E402
from federation.core.envelope import Shape  # noqa: E402
from federation.placement.metrics import Outcome  # noqa: E402
from federation.placement.runtime_model import TaskRuntimeModel  # noqa: E402
from federation.sim.trace_model import TraceJob  # noqa: E402

W = WORKLOADS[0]


def test_runtimes_are_learned_when_the_task_ends_not_when_it_is_placed() -> None:
    learning = Learning(TaskRuntimeModel())
    shape = Shape(
        site="delta", partition="cpu", nodes=1, cpus=16, gpus=0, mem_gb=32, walltime_s=3600
    )
    prior = learning.model.predict(W.name, shape, default_s=1.0)
    learning.ran(2300.0, W.name, shape, 1100.0)
    learning.learn_until(2299.0)
    assert learning.model.predict(W.name, shape, default_s=1.0) == prior
    learning.learn_until(2300.0)
    assert learning.model.predict(W.name, shape, default_s=1.0) == pytest.approx(1100.0)
    learning.learn_until(1e9)
    assert len(learning.model._obs[W.name]) == 1


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
    assert _next_tick(t, next_round, end, 600.0, watching) == expected


def _o(extra: float, oracle_wait: float = 600.0, err: float = 0.0, copies: int = 1) -> Outcome:
    return Outcome(
        completion_s=1000.0 + extra,
        wait_s=oracle_wait + extra,
        oracle_completion_s=1000.0,
        oracle_wait_s=oracle_wait,
        predicted_wait_s=oracle_wait + extra + err,
        copies=copies,
    )


def _cell(regime: str, ours: list[Outcome], bf: list[Outcome], seed: int = 0) -> Cell:
    return Cell("T", regime, seed, {"twin-watch": ours, "best-feasible": bf}, {}, 0.0)


def test_a_busy_seed_is_judged_on_its_own_figures() -> None:
    bf = [_o(x) for x in np.linspace(0, 4000, 100)]
    good = judge(_cell("busy", [_o(0.0)] * 95 + [_o(200.0)] * 5, bf), "twin-watch")
    assert good.judged and good.ok, good.why
    tail = judge(_cell("busy", [_o(0.0)] * 90 + [_o(3000.0)] * 10, bf), "twin-watch")
    assert tail.judged and not tail.ok and "P95" in tail.why
    blind = judge(_cell("busy", [_o(0.0, err=300.0)] * 100, bf), "twin-watch")
    assert not blind.ok and "wait ±1 min" in blind.why


def test_a_busy_seed_where_nothing_queued_is_listed_not_judged() -> None:
    calm = [_o(0.0, oracle_wait=0.0)] * 100
    v = judge(_cell("busy", calm, calm), "twin-watch")
    assert not v.judged and v.ok and "not busy" in v.why


def test_a_light_seed_fails_when_worse_than_best_feasible() -> None:
    bf = [_o(0.0)] * 100
    v = judge(_cell("light", [_o(0.0)] * 99 + [_o(500.0)], bf), "twin-watch")
    assert v.judged and not v.ok and "mean" in v.why


def test_the_report_shows_the_worst_seed_and_the_budget() -> None:
    bf = [_o(x) for x in np.linspace(0, 4000, 100)]
    cells = [
        _cell("busy", [_o(0.0)] * 100, bf, seed=0),
        _cell("busy", [_o(0.0)] * 80 + [_o(3000.0)] * 20, bf, seed=1),
    ]
    for c in cells:
        c.utilization = dict.fromkeys(("delta", "deltaai", "anvil", "vista"), 0.9)
    text, data = render(cells, 1.0, "test", "twin-watch", 1.2)
    assert "Worst judged seed (1)" in text and "1 of 2" in text
    assert data["all_ok"] is False
    assert [s["ok"] for s in data["groups"][0]["seeds"]] == [True, False]


def _tiny_trace() -> list[TraceJob]:
    rng = np.random.default_rng(3)
    jobs = []
    for i in range(3000):
        run = float(rng.exponential(3600.0)) + 60.0
        jobs.append(
            TraceJob(
                job_id=i + 1,
                submit_s=i * 120.0,
                wait_s=0.0,
                run_s=run,
                procs=int(rng.choice([1, 4, 16, 64])),
                requested_walltime_s=run * float(rng.uniform(1.0, 4.0)),
            )
        )
    return jobs


def test_one_cell_runs_every_policy_with_copies_in_the_queues() -> None:
    opts = CellOptions(
        hours=3.0,
        warmup_h=6.0,
        policies=("best-feasible", "twin", "twin-watch"),
        twin_samples=4,
        budget=1.2,
    )
    cell = run_cell("tiny", _tiny_trace(), "busy", 0, opts)
    assert set(cell.outcomes) == {"best-feasible", "twin", "twin-watch", "oracle"}
    n = len(cell.outcomes["oracle"])
    assert n == 6 * len(WORKLOADS)  # a round every 30 min for 3 h, every task scored
    for p in ("best-feasible", "twin", "twin-watch"):
        assert len(cell.outcomes[p]) == n
        assert all(o.completion_s >= o.wait_s >= 0 for o in cell.outcomes[p])
        assert p in cell.bg_delay
    copies = np.mean([o.copies for o in cell.outcomes["twin-watch"]])
    assert copies <= 1.2 + 1.0 / n  # the budget, plus its opening allowance


def test_the_background_bound_is_a_fifth_beyond_best_feasibles_figure_either_sign() -> None:
    assert bg_limit(1000.0) == pytest.approx(1201.0)  # 1.2x, and 1 s of slack
    assert bg_limit(-1000.0) == pytest.approx(-799.0)  # a negative figure: 1.2x would be below
    assert bg_limit(0.0) == pytest.approx(1.0)


def test_the_report_says_whether_the_tail_and_background_bounds_hold() -> None:
    bf = [_o(x) for x in np.linspace(0, 4000, 100)]
    cells = [_cell("busy", [_o(0.0)] * 100, bf, seed=s) for s in (0, 1)]
    for c in cells:
        c.utilization = dict.fromkeys(("delta", "deltaai", "anvil", "vista"), 0.9)
        c.bg_delay = {"twin-watch": (1300.0 * 100, 100), "best-feasible": (1000.0 * 100, 100)}
    text, data = render(cells, 1.0, "test", "twin-watch", 1.2)
    assert "background within 1.2x: no" in text and data["tail_and_bg_bounds"] is False
    for c in cells:
        c.bg_delay["twin-watch"] = (1150.0 * 100, 100)
    text, data = render(cells, 1.0, "test", "twin-watch", 1.2)
    assert "background within 1.2x: yes" in text and data["tail_and_bg_bounds"] is True
    assert data["groups"][0]["vs_best_feasible"]["bg_limit_s_per_task"] == pytest.approx(1201.0)
