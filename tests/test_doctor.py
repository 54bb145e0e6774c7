"""``federation doctor`` on the embedded federation, whose workers are as strict as a site's.

Every check passes on a local site, on each path: the probe, the workers' Python (with
nothing of this repository importable there), a tiny task in a Slurm job, a cancelled
queued task and a checksummed copy. A site whose probe fails is reported with the
reason, and the checks that need it are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from inprocess import inprocess_coordinator
from typer.testing import CliRunner

from federation.core.snapshot import SiteHealth
from federation.interfaces.cli.main import app as cli_app
from federation.interfaces.doctor import Doctor


@pytest.mark.slurm
@pytest.mark.parametrize(("local_path", "site"), [("embedded", "local"), ("cloud", "vista")])
def test_doctor_passes_on_the_strict_local_sites(
    local: Any, tmp_path_factory: pytest.TempPathFactory, local_path: str, site: str
) -> None:
    """On both paths; the cloud one is what a real deployment has (the strict stand-in of
    the Globus service: withdrawal by claiming a task's tag first, starts from its claim).
    One site per path, a different one on each: the doctor checks each site on its own
    (no check looks at another site), so a second site on the same path would only repeat
    the same checks through the same path; the local sites differ in their Slurm
    configuration, which ``tests/test_localslurm.py`` checks site by site."""
    path = tmp_path_factory.mktemp("doctor") / "federation.yaml"
    path.write_text(
        f"home: {local.home}\nlocal_path: {local_path}\nsites:\n  {site}:\n    backend: local\n"
    )
    r = CliRunner().invoke(cli_app, ["doctor", "--config", str(path), "--json"])
    assert r.exit_code == 0, r.output
    reports = json.loads(r.stdout)
    assert [x["site"] for x in reports] == [site] and all(x["ok"] for x in reports)
    for report in reports:
        status = {c["check"]: (c["status"], c["detail"]) for c in report["checks"]}
        # an idle local queue may start the cancel probe before it can be withdrawn: then
        # the doctor says so (a warning), which is right too
        cancel = status.pop("cancel")
        assert cancel[0] == "ok" or "started before it could be withdrawn" in cancel[1], cancel
        assert {k: v[0] for k, v in status.items()} == {
            "endpoint": "ok",
            "worker": "ok",
            "task": "ok",
            "transfer": "ok",
        }, status
        assert "nothing of this repository needed" in status["worker"][1]
        assert "Slurm job" in status["task"][1]


def test_an_unreachable_site_fails_and_skips_what_needs_it(tmp_path: Path) -> None:
    coord = inprocess_coordinator(("local", "delta"))
    try:
        snap = coord.inspect_federation()
        down = snap.model_copy(
            update={
                "sites": tuple(
                    s.model_copy(
                        update={
                            "health": SiteHealth(
                                reachable=False, probe_age_s=0, error="endpoint is offline"
                            )
                        }
                    )
                    if s.site == "delta"
                    else s
                    for s in snap.sites
                )
            }
        )
        report = Doctor(coord).site("delta", down)
    finally:
        coord.close()
    assert not report.ok
    first, *rest = report.checks
    assert (first.check, first.status) == ("endpoint", "fail")
    assert "endpoint is offline" in first.detail
    assert [c.status for c in rest] == ["skipped"] * 4
