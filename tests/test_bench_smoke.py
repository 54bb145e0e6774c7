"""The benchmark functions run at tiny sizes and give sane, non-empty results (no timing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import bench_parsing, load, perf  # noqa: E402


def test_synthetic_federation_has_every_site_and_its_queue() -> None:
    specs, snap, now = perf.synthetic_federation(5, 40)
    assert [s.name for s in specs] == [s.site for s in snap.sites]
    assert len(specs) == 5
    assert all(len(s.jobs) == 40 for s in snap.sites)
    assert all(s.health.reachable for s in snap.sites)
    assert snap.taken_at == now


@pytest.mark.parametrize("n_sites", [1, 4, 12])
def test_placement_latencies_are_positive_and_counted(n_sites: int) -> None:
    lat = perf.placement_latencies(n_sites, 30, repeat=3)
    assert len(lat) == 6  # a CPU and a GPU decision per repeat
    assert all(t > 0 for t in lat)


def test_placement_over_synthetic_sites_considers_every_site() -> None:
    from federation.placement.decide import place

    specs, snap, now = perf.synthetic_federation(7, 100)
    d = place(perf.GPU_ENVELOPE, specs, snap, now=now)
    assert d.chosen.shape.gpus == 1
    assert {c.site for c in d.candidates} | {r.site for r in d.rejected} == {s.name for s in specs}


def test_parse_times_measures_both_steps() -> None:
    times = bench_parsing.parse_times(200, repeat=2)
    assert set(times) == {"parse_squeue", "build_site_snapshot"}
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in times.values())


def test_quantile_nearest_rank() -> None:
    vals = [float(i) for i in range(1, 101)]
    assert perf.quantile(vals, 0.5) == 50.0
    assert perf.quantile(vals, 0.95) == 95.0
    assert perf.quantile([3.0], 0.95) == 3.0


def test_suite_without_federation_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    argv = [
        "--skip-dispatch",
        "--skip-resume",
        "--jobs-per-site",
        "20",
        "--placement-repeat",
        "2",
        "--parse-jobs",
        "300",
        "--parse-repeat",
        "1",
        "--json",
        str(out),
    ]
    perf.main(argv)  # exit code reflects targets, which tests do not judge
    data: dict[str, Any] = json.loads(out.read_text())
    names = [f["name"] for f in data["figures"]]
    assert any("4 sites" in n for n in names) and any("100 sites" in n for n in names)
    assert any("parse_squeue" in n for n in names)
    assert all(f["value"] > 0 for f in data["figures"])
    assert all(f["target"] for f in data["figures"])


def test_load_placement_grid_and_windows() -> None:
    from rich.console import Console

    rows = load.placement_grid([2, 3], [0, 10], repeat=1, console=Console(quiet=True))
    assert [(r["sites"], r["jobs_per_site"]) for r in rows] == [(2, 0), (2, 10), (3, 0), (3, 10)]
    assert all(r["median_ms"] > 0 and r["p95_ms"] >= r["median_ms"] for r in rows)
    assert load._windows([1.0, 2.0, 3.0, 4.0], 0.0, 2) == [1.0, 1.0]
    assert load.rss_mb() > 0


def test_tally_counts_terminal_events_once_each() -> None:
    from datetime import UTC, datetime

    from federation.runtime.events import Event

    t = load.Tally()
    now = datetime.now(UTC)
    for seq, kind in enumerate(["task.queued", "task.completed", "task.failed", "task.started"]):
        t(Event(seq=seq, kind=kind, task_id=f"t{seq}", at=now, detail={"error": "boom"}))
    assert (t.completed, t.failed, t.terminal) == (1, 1, 2)
    assert t.errors == ["boom"]


@pytest.mark.slurm
def test_load_tasks_and_groups_are_all_accounted_for(coord: Any) -> None:
    from rich.console import Console

    quiet = Console(quiet=True)
    sites = sorted(coord.backends)
    t = load.run_tasks(coord, sites[:2], 6, quiet, bars=False, timeout_s=600)
    assert t["submitted"] == 6 and t["unaccounted"] == 0
    assert t["completed"] + t["failed"] == 6
    assert t["wrong_values"] == 0
    g = load.run_groups(coord, 1, 2, quiet, bars=False, timeout_s=600)
    assert g["groups_done"] == 1 and g["unaccounted"] == 0
    assert g["children_completed"] + g["children_failed"] == 2
