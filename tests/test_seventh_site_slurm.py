"""A site the package has never heard of (issue 34): a copy of the Perlmutter folder under
another name, in a temporary folder a federation.yaml names, passes config check, comes up
as a seventh local Slurm cluster with its own endpoint, and runs a task, with no code
change. Its ports come from a hash of its name (``localslurm.layout.site_index``), so the
six running sites keep theirs; it is taken down afterwards, the others left running.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from perlmutter_scene import renamed_copy
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import ShellTask
from federation.deploy.config import load_config
from federation.deploy.local import LocalSites
from federation.interfaces.cli.main import app as cli_app
from federation.localslurm.layout import EXAMPLE_SITES, site_index

pytestmark = pytest.mark.slurm

NAME = "campus7"


def test_a_seventh_site_from_its_folder_runs_a_task(local_federation: Any, tmp_path: Path) -> None:
    _, config = renamed_copy(tmp_path, NAME, account="c777")
    checked = CliRunner().invoke(cli_app, ["config", "check", "--config", str(config)])
    assert checked.exit_code == 0, checked.output
    spec = load_config(config).specs[NAME]
    assert spec.config_dir.is_relative_to(tmp_path)  # its own folder, not the package's
    assert site_index(NAME) >= len(EXAMPLE_SITES)  # no running site's ports
    local = LocalSites(home=local_federation.home, specs=[spec])
    try:
        local.up()
        coord = local.connect(telemetry=False, probe_timeout_s=120)
        try:
            env = ResourceEnvelope(sites=(NAME,), cpus_min=1, mem_gb_min=1, walltime_s=300)
            h = coord.submit_task(ShellTask(command="echo $SLURM_CLUSTER_NAME"), env)
            r = coord.get_result(h, timeout_s=240)
            assert r.status == "completed", (r.error, h.notes)
            assert h.manifest().stdout.strip() == NAME  # ran in the seventh cluster's job
            job = h.slurm_job_ids[-1]
            argv = ["sacct", "-X", "-n", "-P", "-j", job, "-o", "Account,QOS"]
            deadline = time.monotonic() + 60  # slurmdbd gets a job's record in parts
            while True:
                out = local.slurm.run(NAME, argv)
                row = (out.stdout.split() or ["|"])[0].split("|")
                if (all(row) and "Unknown" not in row) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            account, qos = row  # its class's account and QOS
            klass = spec.partition(h.decision.chosen.partition)
            assert (account, qos) == (spec.account_for(klass.name), klass.qos), out.stdout
        finally:
            coord.close()
            if local.service is not None:
                local.service.close()
    finally:
        local.down()  # its cluster and endpoint; the shared daemons serve the others
