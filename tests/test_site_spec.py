"""Site descriptions: per-partition submission settings and the charge in each site's unit."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from federation.core.spec import PartitionSpec, SiteSpec, load_site

CPU = {"nodes_real": 2, "nodes_local": 1, "max_walltime_s": 3600}


def _part(**kw: Any) -> PartitionSpec:
    return PartitionSpec.model_validate({"name": "p", **CPU, **kw})


def test_charge_units_as_the_guides_state_them() -> None:
    delta, deltaai, anvil, vista = (load_site(n) for n in ("delta", "deltaai", "anvil", "vista"))
    assert delta.partition("cpu").charge_unit == "core-hours"
    for spec, name in ((delta, "gpuA100x4"), (delta, "gpuA40x4"), (deltaai, "ghx4")):
        assert spec.partition(name).charge_unit == "gpu-hours"
    assert {p.charge_unit for p in anvil.partitions} == {"gpu-hours"}
    assert {p.charge_unit for p in vista.partitions} == {"node-hours"}
    rates = {p.name: p.charge_su_per_unit for p in vista.partitions}
    assert rates == {"gh": 1.0, "gh-dev": 1.0, "gg": 0.33}
    assert vista.partition("gh").nodes_real == 600


def test_charge_examples_from_the_guides() -> None:
    delta, deltaai, vista = load_site("delta"), load_site("deltaai"), load_site("vista")
    # Delta: an exclusive CPU node for an hour is 128 SU; a whole 4-way GPU node 4 SU
    assert delta.partition("cpu").charge(1, 128, 0, 1.0) == 128.0
    assert delta.partition("gpuA100x4").charge(1, 64, 4, 1.0, mem_gb=256) == 4.0
    # ... memory past ~2 GB per core is billed as cores; past a GPU share (16 cores) as GPUs
    assert delta.partition("cpu").charge(1, 1, 0, 2.0, mem_gb=8) == 8.0
    assert delta.partition("gpuA100x4").charge(1, 32, 1, 1.0) == 2.0
    # DeltaAI: memory past one superchip's 120 GB is billed as more GH200s (the guide's own
    # example bills 300 GB as two; by 120 GB shares it is three: README says so)
    assert deltaai.partition("ghx4").charge(1, 16, 1, 1.0, mem_gb=240) == 2.0
    assert deltaai.partition("ghx4").charge(1, 16, 1, 1.0, mem_gb=300) == 3.0
    assert deltaai.partition("ghx4").charge(1, 73, 1, 1.0) == 2.0  # past 72 cores
    assert deltaai.partition("ghx4").charge(2, 288, 4, 0.5) == 4.0
    # Vista: node-hours at the queue's rate, at least 15 minutes
    assert vista.partition("gh").charge(4, 72, 1, 2.0) == 8.0
    assert vista.partition("gg").charge(1, 144, 0, 1.0) == pytest.approx(0.33)
    assert vista.partition("gh-dev").charge(1, 1, 0, 0.01) == 0.25


def test_charge_rejects_impossible_jobs() -> None:
    p = load_site("delta").partition("cpu")
    for args in ((0, 1, 0, 1.0), (1, -1, 0, 1.0), (1, 1, 0, -1.0)):
        with pytest.raises(ValueError):
            p.charge(*args)


def test_account_for_and_submit_options() -> None:
    delta = load_site("delta")
    assert delta.accounts == ("bbka-delta-cpu", "bbka-delta-gpu")
    opts = delta.submit_options("gpuA40x4")
    assert (opts.account, opts.constraint, opts.qos) == ("bbka-delta-gpu", "scratch", None)
    assert delta.constraint_features("cpu") == ("scratch",)
    anvil = load_site("anvil")
    assert {p.name: anvil.account_for(p.name) for p in anvil.partitions} == {
        "gpu": "cis230000-gpu",
        "ai": "cis230000-ai",
    }
    vista = load_site("vista")
    assert vista.accounts == ("ASC23000",)
    assert vista.submit_options("gg").mem_request == "refused"
    assert vista.submit_options("gh").gpu_request == "implied-by-partition"
    with pytest.raises(KeyError):
        delta.account_for("nope")


def test_partition_overrides_and_adds_to_the_site() -> None:
    site = SiteSpec(
        name="s",
        institution="i",
        arch="x86_64",
        access="login-node",
        default_account="acct",
        qos="normal",
        constraint="work&scratch",
        scheduler_options=("--requeue",),
        partitions=(
            _part(cpus_per_node=8, mem_gb_per_node=16),
            _part(
                name="g",
                cpus_per_node=8,
                mem_gb_per_node=16,
                gpus_per_node=2,
                gpu_type="l4",
                account="acct-gpu",
                qos="gpu",
                gpu_request="implied-by-partition",
                scheduler_options=("--gpu-bind=closest",),
            ),
        ),
    )
    g = site.submit_options("g")
    assert (g.account, g.qos, g.constraint, g.gpu_request) == (
        "acct-gpu",
        "gpu",
        "work&scratch",
        "implied-by-partition",
    )
    assert g.scheduler_options == ("--requeue", "--gpu-bind=closest")
    assert site.submit_options("p").scheduler_options == ("--requeue",)
    assert site.constraint_features("p") == ("work", "scratch")
    assert site.partition("g").charge_unit == "gpu-hours"  # GPUs given, unit not: GPU-hours


@pytest.mark.parametrize(
    "bad",
    [
        {"charge_unit": "gpu-hours"},  # no GPUs
        {"scheduler_options": ["#SBATCH --x"]},
        {"scheduler_options": ["--x=1 --y=2"]},
        {"scheduler_options": ["--x=$(id)"]},
        {"constraint": "a b"},
        {"constraint": "[a|b]*2"},
        {"account": "a;b"},
        {"qos": "x\ny"},
        {"charge_su_per_unit": 0},
    ],
)
def test_bad_partition_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _part(cpus_per_node=8, mem_gb_per_node=16, **bad)
