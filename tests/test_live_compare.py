"""The live experiment's comparison with the replay: ranking agreement and wait misses."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.live_compare import (  # noqa: E402
    compare_lines,
    kendall_tau,
    replay_means,
    wait_miss_lines,
)


def test_kendall_tau_counts_agreeing_and_disagreeing_pairs() -> None:
    assert kendall_tau(["a", "b", "c"], ["a", "b", "c"]) == (1.0, 3, 0)
    assert kendall_tau(["a", "b", "c"], ["c", "b", "a"]) == (-1.0, 0, 3)
    tau, conc, disc = kendall_tau(["a", "b", "c"], ["b", "a", "c"])
    assert (conc, disc) == (2, 1) and tau == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="different items"):
        kendall_tau(["a"], ["b"])


def test_the_live_ranking_is_put_beside_the_replays(tmp_path: Path) -> None:
    path = tmp_path / "replay.json"
    group = {
        "trace": "KTH-SP2",
        "regime": "busy",
        "policies": {
            "best-feasible": {"mean_extra_s": 500.0},
            "twin": {"mean_extra_s": 400.0},
            "twin-watch": {"mean_extra_s": 90.0},
            "oracle": {"mean_extra_s": 0.0},
        },
    }
    path.write_text(json.dumps({"groups": [group]}))
    replay = replay_means(path, "KTH-SP2", "busy")
    assert replay == {"best-feasible": 500.0, "twin": 400.0, "twin-watch": 90.0}
    live = [
        {"policy": "twin", "mean extra s": 10.0},
        {"policy": "twin-watch", "mean extra s": 20.0},
        {"policy": "best-feasible", "mean extra s": 80.0},
        {"policy": "fixed:delta", "mean extra s": 5.0},  # not in the replay: left out
    ]
    text = "\n".join(compare_lines(live, replay, "KTH-SP2:busy"))
    assert "live: twin < twin-watch < best-feasible" in text
    assert "replay (KTH-SP2:busy): twin-watch < twin < best-feasible" in text
    assert "Kendall tau +0.33 (2 pairs agree, 1 disagree)" in text and "differs" in text
    with pytest.raises(KeyError, match="no group KTH-SP2:light"):
        replay_means(path, "KTH-SP2", "light")


@dataclass
class _Row:
    policy: str
    predicted_wait_s: float
    wait_s: float | None
    slurm_wait_s: float | None


def test_wait_misses_prefer_sacct_and_count_the_minute() -> None:
    rows = [
        _Row("twin", 0.0, 500.0, 30.0),  # sacct says 30 s: within the minute
        _Row("twin", 100.0, 400.0, None),  # no sacct: the coordinator's 300 s miss
        _Row("twin", 10.0, None, None),  # no wait known: not counted
    ]
    table = wait_miss_lines(rows, ["twin", "best-feasible"])
    assert "| twin | 2 | 165 | 50.0 |" in table
    assert "| best-feasible | 0 | - | - |" in table
