"""The live experiment on the real local Slurm federation: a tiny run, every task accounted for.

No timing assertions: how fast the policies are is what the benchmark prints, not a test.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from federation.sim.traces import default_trace_dir

pytestmark = pytest.mark.slurm

BENCH = Path(__file__).resolve().parents[1] / "bench" / "live_experiment.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("live_experiment", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["live_experiment"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_probe_command_picks_the_run_time_by_partition() -> None:
    live = _module()
    w = live.WORKLOADS[1]
    cmd = live.probe_command(w)
    for part, secs in w.seconds.items():
        assert f"{part}) t={secs};;" in cmd
    assert cmd.endswith("sleep $t")


@pytest.mark.timeout(600)
def test_tiny_live_run_accounts_for_every_task(local: Any) -> None:
    traces = default_trace_dir()
    if not (traces / "KTH-SP2-1996-2.1-cln.swf.gz").exists():
        pytest.skip(f"KTH-SP2 trace not in {traces}: set FEDERATION_TRACES")
    live = _module()
    sites = ["delta", "anvil", "vista"]
    from federation.deploy.local import LocalSites

    res = live.run_live(
        jobs=2,
        sites=sites,
        trace_dir=traces,
        round_s=5.0,
        max_bg_per_site=10,
        result_timeout_s=60.0,  # unfinished by then: reported as such, not lost
        local=LocalSites(home=local.home, sites=sites),
        log=lambda *a, **k: None,
    )
    n_pol = len(res.policies)
    assert n_pol == 3 and res.policies[0] == "fixed:delta"
    assert res.policies[1] == "best-feasible" and res.policies[2] == "twin"
    # every task is in the result (or counted as unplaced), once, with policy and workload
    assert len(res.rows) + sum(res.unplaced.values()) == 2 * n_pol
    keys = {(r.round, r.policy, r.workload) for r in res.rows}
    assert len(keys) == len(res.rows)
    for r in res.rows:
        assert r.site in sites
        if r.policy == "fixed:delta":
            assert r.site == "delta"
        if r.status == "completed":
            assert r.completion_s is not None and r.completion_s > 0
            assert r.slurm_job_id
    table = res.table()
    assert [t["policy"] for t in table] == res.policies
    for t in table:
        assert t["tasks"] + res.unplaced.get(t["policy"], 0) == 2
        assert 0 <= t["completed"] <= t["tasks"]
        assert sum(t["sites"].values()) == t["tasks"]
        if t["completed"]:
            assert not math.isnan(t["mean compl. s"])
            assert t["median extra s"] >= 0
    text = res.render()
    assert text.count("\n| ") == 1 + n_pol  # header and one row per policy
    assert sum(res.background_jobs.values()) + res.background_rejected > 0


def test_hedge_compares_twin_hedge_and_a_watch_in_real_seconds() -> None:
    live = _module()
    from federation.core.spec import load_sites
    from federation.placement.policies import Watch
    from federation.placement.runtime_model import TaskRuntimeModel, UsageRatioModel

    specs = {s.name: s for s in load_sites(["delta", "anvil"])}
    args = (specs, UsageRatioModel(), TaskRuntimeModel(), live.WORKLOADS[0], "delta", 4)
    assert [p.name for p in live.make_policies(*args)] == ["fixed:delta", "best-feasible", "twin"]
    pols = live.make_policies(*args, hedge=True, round_s=30.0)
    assert [p.name for p in pols][3:] == ["twin-hedge", "twin-watch"]
    assert pols[3].watch is None
    assert pols[4].watch == Watch(every_s=15.0, overdue_s=10.0, margin_s=10.0)
    assert pols[4].hedge_within == pols[3].hedge_within
