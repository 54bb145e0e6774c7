"""Credit in each site's own units: sshare (text and JSON) for every account a site charges
-> one AllocationScope per account on SiteSnapshot.allocations, counted in the unit its
partitions bill (core-hours, GPU-hours, node-hours); budgets per account."""

from __future__ import annotations

import copy
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from federation.core.charge import charged_partitions, common_unit, shape_charge
from federation.core.envelope import Shape
from federation.core.errors import ParseError
from federation.core.snapshot import AllocationScope, SiteSnapshot
from federation.core.spec import load_site
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.parsing.sshare import (
    SSHARE_FIELDS,
    allocation_from_shares,
    parse_sshare_json,
    parse_sshare_text,
)

SAMPLES = Path(
    os.environ.get(
        "FEDERATION_SLURM_SAMPLES", Path(__file__).resolve().parents[2] / "shared" / "slurm-samples"
    )
)
FIXTURES = Path(__file__).parent / "fixtures"

# `sshare --noheader --parsable2 --format=<SSHARE_FIELDS>` as Slurm 22.05 prints it for an
# account with usage, a GrpTRESMins cpu limit and two users.
TEXT = (
    "root||||7200000||1.000000||0.000000|\n"
    " root|root|1||0||0.000000|0.000000|0.000000|\n"
    " bbka-delta||1|0.500000|7200000|0.400000|0.400000||1.250000|cpu=600000,mem=9000\n"
    "  bbka-delta|alice|1|0.500000|5400000|0.300000|0.750000|0.625000|0.666667|\n"
    "  bbka-delta|bob|1|0.500000|1800000|0.100000|0.250000|0.875000|2.000000|\n"
)


def test_text_rows_become_association_and_user_records() -> None:
    rows = parse_sshare_text(TEXT)
    acct = next(r for r in rows if r.name == "bbka-delta" and r.kind == "association")
    assert acct.usage == 7_200_000 and acct.grp_cpu_minutes == 600_000
    assert acct.grp_billing_minutes is None
    alice = next(r for r in rows if r.name == "alice")
    assert (alice.kind, alice.parent, alice.fairshare_factor) == ("user", "bbka-delta", 0.625)


def test_allocation_converts_units() -> None:
    scope = allocation_from_shares(parse_sshare_text(TEXT), "BBKA-Delta")  # case-insensitive
    assert scope is not None
    assert scope.used_units == 2000.0  # 7,200,000 billing-s / 3600
    assert scope.limit_units == 10000.0  # 600,000 CPU-min / 60 (no billing limit)
    assert scope.remaining_units == 8000.0
    assert scope.unit is None  # the site's facts were not given
    assert scope.fairshare == 0.625  # the first user's factor in that account
    assert scope.source == "sshare"


def test_a_billing_limit_wins_and_a_cpu_limit_is_no_gpu_allocation() -> None:
    both = TEXT.replace("cpu=600000,mem=9000", "cpu=600000,billing=12000,mem=9000")
    rows = parse_sshare_text(both)
    assert next(r for r in rows if r.name == "bbka-delta").grp_billing_minutes == 12000
    scope = allocation_from_shares(rows, "bbka-delta", unit="gpu-hours")
    assert scope is not None and scope.limit_units == 200.0  # billing-minutes / 60
    cpu_only = allocation_from_shares(parse_sshare_text(TEXT), "bbka-delta", unit="gpu-hours")
    assert cpu_only is not None and cpu_only.limit_units is None  # CPU-minutes, not GPU-hours
    cores = allocation_from_shares(parse_sshare_text(TEXT), "bbka-delta", unit="core-hours")
    assert cores is not None and cores.limit_units == 10000.0


def test_allocation_defaults_to_the_users_account_and_none_when_absent() -> None:
    rows = parse_sshare_text(TEXT)
    first = allocation_from_shares(rows)
    assert first is not None and first.account == "root"  # the first user row's account
    assert allocation_from_shares(rows, "nosuch") is None


def test_bad_text_names_the_line() -> None:
    with pytest.raises(ParseError, match="sshare line 2: 3 fields"):
        parse_sshare_text("root||||0||0.000000||0.000000|\na|b|c\n")
    with pytest.raises(ParseError, match="RawUsage: expected a whole number"):
        parse_sshare_text(" acct|u|1||lots|||||\n")


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared slurm-samples not present")
def test_json_sample_2411_user_rows_give_usage() -> None:
    rows = parse_sshare_json((SAMPLES / "ivolabbe__farnarkle-sshare-json-24.11.6.json").read_text())
    root = next(r for r in rows if r.name == "root")
    assert (root.grp_cpu_minutes, root.grp_billing_minutes) == (None, None)  # set: false
    scope = allocation_from_shares(rows, "oz030", unit="core-hours", partitions=("cpu",))
    assert scope is not None  # only the user row is in the sample
    assert scope.source == "sshare (user rows)"
    assert (scope.unit, scope.partitions) == ("core-hours", ("cpu",))
    assert scope.used_units == pytest.approx(17196426 / 3600, abs=1e-3)
    assert scope.limit_units is None  # group_minutes billing and cpu are {"set": false}
    assert scope.fairshare == pytest.approx(0.5206949412365867)
    assert allocation_from_shares(rows, "oz031") is None


def _probe(sshare: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """A probe result: a real recorded one from the fixtures, with a chosen sshare entry."""
    import json

    recorded = FIXTURES / "probe_output" / "probetest-22.05.8.json"
    probe: dict[str, Any] = copy.deepcopy(json.loads(recorded.read_text()))
    probe.pop("sshare", None)
    if sshare is not None:
        probe["sshare"] = sshare
    probe.update(extra)
    return probe


def _entry(stdout: str, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    return {
        "argv": ["sshare", "--noheader", "--parsable2"],
        "rc": rc,
        "stdout": stdout,
        "stderr": stderr,
        "duration_s": 0.01,
        "timed_out": False,
        "error": None,
        "fields": list(SSHARE_FIELDS),
    }


# `sshare --accounts bbka-delta-cpu,bbka-delta-gpu`: Delta's two charge names, each with
# a GrpTRESMins billing limit in its own unit (core-minutes and GPU-minutes).
DELTA = (
    " bbka-delta-cpu||1|0.500000|36000000|0.400000|0.400000||1.250000|billing=3000000\n"
    "  bbka-delta-cpu|alice|1|1.000000|36000000|0.400000|1.000000|0.625000|1.000000|\n"
    " bbka-delta-gpu||1|0.500000|1800000|0.100000|0.100000||2.000000|billing=39000\n"
    "  bbka-delta-gpu|alice|1|1.000000|1800000|0.100000|1.000000|0.875000|1.000000|\n"
)


def _delta_snapshot(**extra: Any) -> SiteSnapshot:
    accounts = ["bbka-delta-cpu", "bbka-delta-gpu"]
    probe = _probe(_entry(DELTA), accounts=accounts, **extra)
    return build_site_snapshot("delta", probe, spec=load_site("delta"))


def test_every_account_of_a_site_in_its_own_unit() -> None:
    snap = _delta_snapshot()
    cpu, gpu = snap.allocations
    assert (cpu.account, cpu.unit, cpu.partitions) == ("bbka-delta-cpu", "core-hours", ("cpu",))
    assert (cpu.used_units, cpu.limit_units) == (10000.0, 50000.0)  # core-hours
    assert (gpu.account, gpu.unit) == ("bbka-delta-gpu", "gpu-hours")
    assert gpu.partitions == ("gpuA100x4", "gpuA40x4")
    assert (gpu.used_units, gpu.limit_units, gpu.remaining_units) == (500.0, 650.0, 150.0)
    assert snap.allocation == cpu  # the default account's
    assert snap.allocation_for("gpuA40x4") == gpu and snap.allocation_for("cpu") == cpu
    assert snap.allocation_of("BBKA-DELTA-GPU") == gpu
    assert snap.allocation_for("nosuch") is None


def test_units_per_account_follow_the_sites_partitions() -> None:
    units = {
        name: {a: common_unit(ps) for a, ps in charged_partitions(load_site(name)).items()}
        for name in ("delta", "anvil", "deltaai", "vista", "local")
    }
    assert units["delta"] == {"bbka-delta-cpu": "core-hours", "bbka-delta-gpu": "gpu-hours"}
    assert units["anvil"] == {"cis230000-gpu": "gpu-hours", "cis230000-ai": "gpu-hours"}
    assert units["deltaai"] == {"bbka-dtai-gh": "gpu-hours"}
    assert units["vista"] == {"ASC23000": "node-hours"}  # gh, gh-dev and gg, rates apart
    assert units["local"] == {"local": "SUs"}  # core-hours and GPU-hours on one account
    # an account named in federation.yaml in place of the default takes its partitions
    assert list(charged_partitions(load_site("delta"), "bbka-delta")) == [
        "bbka-delta",
        "bbka-delta-gpu",
    ]


def test_budgets_per_account_fill_missing_limits() -> None:
    no_gpu_limit = DELTA.replace("billing=39000", "")
    probe = _probe(
        _entry(no_gpu_limit),
        accounts=["bbka-delta-cpu", "bbka-delta-gpu"],
        budgets={"bbka-delta-gpu": 700.0, "bbka-delta-cpu": 1.0},
    )
    cpu, gpu = build_site_snapshot("delta", probe, spec=load_site("delta")).allocations
    assert cpu.limit_units == 50000.0  # the site's own limit wins
    assert (gpu.limit_units, gpu.remaining_units) == (700.0, 200.0)  # GPU-hours
    assert "configured budget" in gpu.source


def test_an_account_sshare_does_not_know_is_a_warning_and_its_budget_still_counts() -> None:
    probe = _probe(
        _entry(DELTA),
        accounts=["bbka-delta-cpu", "bbka-delta-gpu", "bbka-extra"],
        budgets={"bbka-extra": 5.0},
    )
    snap = build_site_snapshot("delta", probe)
    assert [a.account for a in snap.allocations] == [
        "bbka-delta-cpu",
        "bbka-delta-gpu",
        "bbka-extra",
    ]
    extra = snap.allocations[2]
    assert (extra.used_units, extra.limit_units, extra.source) == (None, 5.0, "configured budget")
    assert any("no association for account bbka-extra" in w for w in snap.health.warnings)
    assert all(a.unit is None for a in snap.allocations)  # no site facts given


def test_an_old_probe_of_one_account_and_core_hours_still_reads() -> None:
    no_limit = TEXT.replace("cpu=600000,mem=9000", "")
    old = _probe(_entry(no_limit), account="bbka-delta", budget_core_hours=5000.0)
    (scope,) = build_site_snapshot("delta", old).allocations
    assert (scope.account, scope.limit_units, scope.remaining_units) == (
        "bbka-delta",
        5000.0,
        3000.0,
    )
    assert "configured budget" in scope.source


def test_a_snapshot_recorded_with_one_core_hour_allocation_still_loads() -> None:
    now = build_site_snapshot("delta", _probe(None)).model_dump(mode="json")
    now.pop("allocations")
    now["allocation"] = {
        "account": "bbka-delta",
        "used_core_hours": 10.0,
        "limit_core_hours": 30.0,
        "fairshare": None,
        "source": "sshare",
    }
    import json

    old = SiteSnapshot.model_validate_json(json.dumps(now))
    assert old.allocation == AllocationScope(
        account="bbka-delta", unit="core-hours", used_units=10.0, limit_units=30.0
    )
    assert old.allocation_for("cpu") == old.allocation  # no partitions known: the default


def test_snapshot_carries_the_allocation() -> None:
    snap = build_site_snapshot("delta", _probe(_entry(TEXT), accounts=["bbka-delta"]))
    assert snap.allocation is not None
    assert snap.allocation.used_units == 2000.0
    assert snap.allocation.limit_units == 10000.0  # the site's own limit wins


def test_failed_sshare_is_a_warning_not_a_failed_probe() -> None:
    probe = _probe(
        _entry("", rc=1, stderr="sshare: error: slurmdbd not responding"),
        accounts=["bbka-delta"],
        budgets={"bbka-delta": 800.0},
    )
    snap = build_site_snapshot("delta", probe)
    assert snap.health.reachable and snap.partitions
    assert any("slurmdbd not responding" in w for w in snap.health.warnings)
    assert snap.allocation is not None  # the budget is still known; usage is not
    assert (snap.allocation.used_units, snap.allocation.limit_units) == (None, 800.0)


def test_a_default_budget_is_the_first_accounts() -> None:
    probe = _probe(None, accounts=["bbka-delta-cpu", "bbka-delta-gpu"], budgets={"default": 8})
    (cpu,) = build_site_snapshot("delta", probe, spec=load_site("delta")).allocations
    assert (cpu.account, cpu.unit, cpu.limit_units) == ("bbka-delta-cpu", "core-hours", 8.0)


def test_garbled_sshare_is_a_warning_too() -> None:
    snap = build_site_snapshot("delta", _probe(_entry("a|b\n"), accounts=["bbka-delta"]))
    assert snap.health.reachable and snap.allocation is None
    assert any("sshare line 1" in w for w in snap.health.warnings)


def test_a_damaged_budget_echo_is_a_warning_not_a_failed_probe() -> None:
    snap = build_site_snapshot(
        "delta", _probe(_entry(TEXT), accounts=["bbka-delta"], budgets={"bbka-delta": "lots"})
    )
    assert snap.health.reachable and snap.allocations == ()
    assert any("budgets.bbka-delta" in w for w in snap.health.warnings)


def test_old_probe_without_sshare_has_no_allocation_and_no_warning() -> None:
    snap = build_site_snapshot("delta", _probe(None))
    assert snap.allocation is None and snap.allocations == ()
    assert not any("sshare" in w for w in snap.health.warnings)


def test_the_probe_asks_sshare_for_every_account() -> None:
    from functions.probes import probe_slurm

    raw = probe_slurm(timeout_s=2.0, accounts=["bbka-delta-cpu", "bbka-delta-gpu"])
    argv = raw["sshare"]["argv"]  # type: ignore[index]
    assert argv[argv.index("--accounts") + 1] == "bbka-delta-cpu,bbka-delta-gpu"
    assert raw["accounts"] == ["bbka-delta-cpu", "bbka-delta-gpu"]
    one = probe_slurm(timeout_s=2.0, account="bbka-delta", budgets={"bbka-delta": 5.0})
    assert (one["accounts"], one["budgets"]) == (["bbka-delta"], {"bbka-delta": 5.0})


def test_a_site_backend_probes_every_account_with_its_budgets() -> None:
    from types import SimpleNamespace

    from federation.sites.compute import ComputeSite

    client: Any = SimpleNamespace()
    spec = load_site("delta")
    site = ComputeSite(spec, uuid.uuid4(), client, budgets={"default": 9.0, "bbka-delta-gpu": 3.0})
    assert site.accounts == ("bbka-delta-cpu", "bbka-delta-gpu")
    assert site.budgets == {"bbka-delta-cpu": 9.0, "bbka-delta-gpu": 3.0}
    mine = ComputeSite(spec, uuid.uuid4(), client, account="bbka-delta", budgets={"default": 1.0})
    assert mine.accounts == ("bbka-delta", "bbka-delta-gpu")
    assert mine.budgets == {"bbka-delta": 1.0}


def test_charges_in_each_sites_unit() -> None:
    def charge(site: str, partition: str, **kw: Any) -> float:
        shape = Shape(site=site, partition=partition, **{"nodes": 1, "mem_gb": 1, **kw})
        return shape_charge(load_site(site).partition(partition), shape)

    assert charge("delta", "cpu", cpus=8, gpus=0, walltime_s=7200) == 16.0  # core-hours
    assert charge("delta", "gpuA100x4", cpus=16, gpus=3, walltime_s=4 * 3600) == 12.0  # GPU-h
    assert charge("vista", "gh", nodes=2, cpus=72, gpus=1, walltime_s=3600) == 2.0  # node-h
    assert charge("vista", "gh", cpus=1, gpus=1, walltime_s=60) == 0.25  # the minimum charge
    assert charge("vista", "gg", cpus=1, gpus=0, walltime_s=3600) == pytest.approx(0.33)


def test_each_candidate_carries_its_charge_in_the_sites_unit() -> None:
    from datetime import UTC, datetime

    from inprocess import idle_snapshot

    from federation.core.envelope import ResourceEnvelope
    from federation.core.spec import load_sites
    from federation.placement.candidates import enumerate_candidates

    specs = load_sites(["delta", "vista", "anvil"])
    env = ResourceEnvelope(cpus_min=16, gpus_min=2, walltime_s=3 * 3600)
    found, _ = enumerate_candidates(env, specs, idle_snapshot(specs), datetime.now(UTC))
    charges = {(c.site, c.partition): (c.charge, c.charge_unit) for c in found}
    assert charges[("delta", "gpuA100x4")] == (6.0, "gpu-hours")  # 2 GPUs x 3 h
    assert charges[("anvil", "ai")] == (6.0, "gpu-hours")
    assert ("vista", "gh") not in charges  # one GPU per node there
    delta = next(c for c in found if c.partition == "gpuA100x4")
    assert delta.why.endswith("costs 6.00 GPU-hours")
    vista = enumerate_candidates(
        ResourceEnvelope(cpus_min=8, gpus_min=1, nodes=2, walltime_s=1800),
        specs,
        idle_snapshot(specs),
        datetime.now(UTC),
    )[0]
    gh = next(c for c in vista if c.site == "vista" and c.partition == "gh")
    assert (gh.charge, gh.charge_unit) == (1.0, "node-hours")  # 2 whole nodes x 0.5 h


def test_inspect_shows_every_account_in_its_unit() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from federation.core.snapshot import FederationSnapshot
    from federation.interfaces.cli.main import credit_table

    snap = FederationSnapshot(taken_at=datetime.now(UTC), sites=(_delta_snapshot(),))
    console = Console(width=200, record=True)
    console.print(credit_table(snap))
    text = console.export_text()
    cpu = next(line for line in text.splitlines() if "bbka-delta-cpu" in line)
    gpu = next(line for line in text.splitlines() if "bbka-delta-gpu" in line)
    assert "core-hours" in cpu and "10,000.0" in cpu and "50,000.0" in cpu
    assert "GPU-hours" in gpu and "gpuA100x4,gpuA40x4" in gpu and "150.0" in gpu


# --- the real local Slurm (slurmdbd answers sshare) -------------------------------------


@pytest.mark.slurm
def test_probe_on_real_slurm_reports_the_sites_account(local_federation: Any) -> None:
    import os

    from federation.core.spec import load_site
    from functions.probes import probe_slurm

    spec = load_site("delta")
    env = local_federation.env("delta")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        raw = probe_slurm(accounts=list(spec.accounts), budgets={spec.default_account: 1234.0})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert raw["sshare"]["rc"] == 0, raw["sshare"]
    snap = build_site_snapshot("delta", raw, spec=spec)
    assert snap.allocation is not None
    assert snap.allocation.account == spec.default_account
    assert snap.allocation.unit == "core-hours"
    assert snap.allocation.used_units is not None  # slurmdbd knows the association
    assert snap.allocation.limit_units == 1234.0  # no GrpTRESMins locally: the budget


@pytest.mark.slurm
def test_inspect_federation_shows_allocation_for_every_site(local: Any) -> None:
    # its own coordinator: a probe engine's first block can take minutes on a loaded host
    coord = local.connect(telemetry=False, probe_timeout_s=300)
    try:
        snap = coord.inspect_federation()
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
    for spec in local.specs:
        site = snap.site(spec.name)
        assert site is not None and site.health.reachable, site
        assert site.allocation is not None, (spec.name, site.health.warnings)
        assert site.allocation.account.lower() == spec.default_account.lower()
        assert site.allocation.used_units is not None  # slurmdbd answered sshare
