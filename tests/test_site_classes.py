"""Node classes chosen by constraint and QOS, not by partition: NERSC Perlmutter as a site
folder (``federation/sites_data/perlmutter``), placement over a hand-built live snapshot of
it, and the Slurm options its jobs would carry, read off the endpoint's own template and
provider. No Slurm: the snapshot is built here as a probe would report it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from perlmutter_scene import CPU, FIXTURE, GPU40, NOW, perlmutter, renamed_copy, snapshot
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import NoFeasibleSiteError
from federation.core.snapshot import (
    FederationSnapshot,
)
from federation.core.spec import SiteSpec
from federation.interfaces.cli.main import app as cli_app
from federation.placement.candidates import PlacementDecision
from federation.placement.decide import place
from federation.sites.endpoint_config import render_user_config, stale_files
from federation.sites.sbatch_preview import option_value, sbatch_options
from federation.sites.user_config import shape_to_user_config


@pytest.fixture(scope="module")
def pm() -> SiteSpec:
    return perlmutter()


def _place(pm: SiteSpec, snap: FederationSnapshot | None = None, **env: Any) -> PlacementDecision:
    return place(ResourceEnvelope(**env), [pm], snap or snapshot(), now=NOW)


def test_the_fixture_loads_and_its_endpoint_files_are_current(pm: SiteSpec) -> None:
    assert pm.config_dir == FIXTURE.resolve()
    names = {c.name for c in pm.classes}
    assert names >= {"gpu", "gpu_hbm80g", "gpu_debug", "gpu_shared", "cpu", "cpu_shared"}
    assert all(c.partition is None for c in pm.classes)  # nodes chosen by -C, never -p
    assert pm.account_for("gpu") == "m1234_g" and pm.account_for("cpu") == "m1234"
    assert pm.submit_options("gpu_hbm80g").constraint == "gpu&hbm80g"
    assert pm.partition("gpu_shared").whole_nodes is False
    assert pm.partition("gpu").whole_nodes is True  # node-hours: whole nodes
    assert stale_files(pm) == []  # `federation sites generate-configs --root ...` made them


def test_80_gb_gpus_only_on_hbm80g(pm: SiteSpec) -> None:
    big = _place(pm, gpus_min=1, gpu_mem_gb_min=60, walltime_s=3600)
    assert big.chosen.partition == "gpu_hbm80g"
    reasons = {r.partition: r.reason for r in big.rejected}
    assert "40 GB" in reasons["gpu"] and "40 GB" in reasons["gpu_shared"]
    small = _place(pm, gpus_min=4, gpus_max=4, cpus_min=64, mem_gb_min=200, walltime_s=3600)
    assert small.chosen.partition == "gpu"
    # the 40 GB nodes busy: -C gpu still reaches the 80 GB node, so `gpu` is as soon there
    busy = snapshot(busy=frozenset({"nid001", "nid002"}))
    d = _place(pm, busy, gpus_min=4, gpus_max=4, cpus_min=64, mem_gb_min=200, walltime_s=3600)
    assert d.chosen.partition == "gpu" and d.chosen.predicted_wait_s == 0


def test_debug_only_within_30_minutes(pm: SiteSpec) -> None:
    short = _place(pm, gpus_min=1, walltime_s=1200, qos=("debug",))
    assert short.chosen.partition == "gpu_debug"
    with pytest.raises(NoFeasibleSiteError) as err:
        _place(pm, gpus_min=1, walltime_s=2400, qos=("debug",))
    assert "max walltime 1800 s < 2400 s needed" in err.value.reasons["perlmutter/gpu_debug"]
    long = _place(pm, gpus_min=1, walltime_s=2400)
    assert long.chosen.partition != "gpu_debug"
    reasons = {r.partition: r.reason for r in long.rejected}
    assert reasons["gpu_debug"] == "max walltime 1800 s < 2400 s needed"


def test_a_partial_node_task_goes_to_the_shared_class(pm: SiteSpec) -> None:
    d = _place(pm, gpus_min=1, gpus_max=1, cpus_min=16, mem_gb_min=32, walltime_s=3600)
    assert d.chosen.partition == "gpu_shared"
    whole = next(c for c in d.candidates if c.partition == "gpu")
    assert d.chosen.charge == pytest.approx(0.25)
    assert whole.charge == pytest.approx(1.0)  # a whole node-hour
    assert "not perlmutter/gpu: predicted wait 0 s" in d.explain()
    assert "same wait, but would hold whole nodes and leave 75% unused" in d.explain()
    cpu = _place(pm, cpus_min=8, mem_gb_min=16, walltime_s=3600)
    assert cpu.chosen.partition == "cpu_shared"


def test_a_class_absent_from_the_live_snapshot_is_refused_with_the_reason(pm: SiteSpec) -> None:
    no80 = snapshot(nodes=(("nid001", "gpu_ss11", GPU40), ("nid004", "regular_milan_ss11", CPU)))
    with pytest.raises(NoFeasibleSiteError) as err:
        _place(pm, no80, gpus_min=1, gpu_mem_gb_min=60)
    assert err.value.reasons["perlmutter/gpu_hbm80g"] == (
        "no live node matches class gpu_hbm80g (partition any, constraint gpu&hbm80g)"
    )


def test_a_gpu_job_carries_the_constraint_qos_and_g_account_and_no_partition(
    pm: SiteSpec,
) -> None:
    uec = shape_to_user_config("gpu", 1, 16, 64, 1, 1800, site=pm)
    rendered = render_user_config(pm, uec)
    assert "partition:" not in rendered
    assert 'constraint: "gpu"' in rendered and 'qos: "regular"' in rendered
    opts = sbatch_options(pm, uec)
    assert option_value(opts, "--constraint") == "gpu"
    assert option_value(opts, "--qos") == "regular"
    assert option_value(opts, "--account") == "m1234_g"
    assert option_value(opts, "--gpus-per-node") == "1"
    assert not any(o.startswith(("--partition", "-p")) for o in opts)
    cpu = sbatch_options(pm, shape_to_user_config("cpu_shared", 1, 8, 16, 0, 600, site=pm))
    assert option_value(cpu, "--account") == "m1234" and option_value(cpu, "--qos") == "shared"


def test_a_copy_under_another_name_passes_config_check(tmp_path: Path) -> None:
    """Issue 34: a seventh site is a folder and a line in federation.yaml, no code."""
    folder, config = renamed_copy(tmp_path, "saul", also=("local",))
    runner = CliRunner()
    r = runner.invoke(cli_app, ["config", "check", "--config", str(config)])
    assert r.exit_code == 0, r.output
    assert f"saul: local account (site default) (site folder {folder.resolve()})" in r.stdout
    r = runner.invoke(cli_app, ["doctor", "--offline", "--config", str(config)])
    assert r.exit_code == 0, r.output
