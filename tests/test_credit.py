"""Credit scope: sshare (text and JSON) -> AllocationScope on SiteSnapshot.allocation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from federation.core.errors import ParseError
from federation.parsing.snapshot_builder import build_site_snapshot
from federation.parsing.sshare import (
    SSHARE_FIELDS,
    allocation_from_shares,
    parse_sshare_json,
    parse_sshare_text,
)

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "slurm-samples"
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
    alice = next(r for r in rows if r.name == "alice")
    assert (alice.kind, alice.parent, alice.fairshare_factor) == ("user", "bbka-delta", 0.625)


def test_allocation_converts_units() -> None:
    scope = allocation_from_shares(parse_sshare_text(TEXT), "BBKA-Delta")  # case-insensitive
    assert scope is not None
    assert scope.used_core_hours == 2000.0  # 7,200,000 CPU-s / 3600
    assert scope.limit_core_hours == 10000.0  # 600,000 CPU-min / 60
    assert scope.remaining_core_hours == 8000.0
    assert scope.fairshare == 0.625  # the first user's factor in that account
    assert scope.source == "sshare"


def test_allocation_defaults_to_the_users_account_and_none_when_absent() -> None:
    rows = parse_sshare_text(TEXT)
    first = allocation_from_shares(rows)
    assert first is not None and first.account == "root"  # the first user row's account
    assert allocation_from_shares(rows, "nosuch") is None


def test_bad_text_names_the_line() -> None:
    with pytest.raises(ParseError, match="sshare line 2: 3 fields"):
        parse_sshare_text("root||||0||0||0|\na|b|c\n")
    with pytest.raises(ParseError, match="RawUsage: expected a number"):
        parse_sshare_text(" acct|u|1||lots|||||\n")


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared slurm-samples not present")
def test_json_sample_2411_user_rows_give_usage() -> None:
    rows = parse_sshare_json((SAMPLES / "ivolabbe__farnarkle-sshare-json-24.11.6.json").read_text())
    scope = allocation_from_shares(rows, "oz030")  # only the user row is in the sample
    assert scope is not None
    assert scope.source == "sshare (user rows)"
    assert scope.used_core_hours == pytest.approx(17196426 / 3600, abs=1e-3)
    assert scope.limit_core_hours is None  # group_minutes cpu is {"set": false}
    assert scope.fairshare == pytest.approx(0.5206949412365867)


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


def test_snapshot_carries_the_allocation() -> None:
    snap = build_site_snapshot("delta", _probe(_entry(TEXT), account="bbka-delta"))
    assert snap.allocation is not None
    assert snap.allocation.used_core_hours == 2000.0
    assert snap.allocation.limit_core_hours == 10000.0  # the site's own limit wins


def test_configured_budget_fills_a_missing_limit() -> None:
    no_limit = TEXT.replace("cpu=600000,mem=9000", "")
    snap = build_site_snapshot(
        "delta", _probe(_entry(no_limit), account="bbka-delta", budget_core_hours=5000.0)
    )
    assert snap.allocation is not None
    assert snap.allocation.limit_core_hours == 5000.0
    assert snap.allocation.remaining_core_hours == 3000.0
    assert "configured budget" in snap.allocation.source


def test_failed_sshare_is_a_warning_not_a_failed_probe() -> None:
    probe = _probe(
        _entry("", rc=1, stderr="sshare: error: slurmdbd not responding"),
        account="bbka-delta",
        budget_core_hours=800.0,
    )
    snap = build_site_snapshot("delta", probe)
    assert snap.health.reachable and snap.partitions
    assert any("slurmdbd not responding" in w for w in snap.health.warnings)
    assert snap.allocation is not None  # the budget is still known; usage is not
    assert (snap.allocation.used_core_hours, snap.allocation.limit_core_hours) == (None, 800.0)


def test_garbled_sshare_is_a_warning_too() -> None:
    snap = build_site_snapshot("delta", _probe(_entry("a|b\n"), account="bbka-delta"))
    assert snap.health.reachable and snap.allocation is None
    assert any("sshare line 1" in w for w in snap.health.warnings)


def test_old_probe_without_sshare_has_no_allocation_and_no_warning() -> None:
    snap = build_site_snapshot("delta", _probe(None))
    assert snap.allocation is None
    assert not any("sshare" in w for w in snap.health.warnings)


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
        raw = probe_slurm(account=spec.default_account, budget_core_hours=1234.0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert raw["sshare"]["rc"] == 0, raw["sshare"]
    snap = build_site_snapshot("delta", raw)
    assert snap.allocation is not None
    assert snap.allocation.account == spec.default_account
    assert snap.allocation.used_core_hours is not None  # slurmdbd knows the association
    assert snap.allocation.limit_core_hours == 1234.0  # no GrpTRESMins locally: the budget


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
        assert site.allocation.used_core_hours is not None  # slurmdbd answered sshare
