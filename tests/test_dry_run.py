"""The dry run: the placement, the node class and the exact sbatch options a task's job
would carry, with nothing submitted, through the Python API, the CLI (local and with
``--service``), the HTTP service and the MCP submit tool.

No Slurm: Perlmutter's folder and a hand-built live snapshot of it
(:mod:`perlmutter_scene`), sites that would run tasks on threads. The options are read off
the site's rendered endpoint template and the provider the endpoint builds from it
(:mod:`federation.sites.sbatch_preview`); that Slurm accepts them is for the real-Slurm
suite (``test_cli_submit_dry_run_on_the_local_federation``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from perlmutter_scene import (
    FIXTURE,
    SceneCoordinator,
    perlmutter,
    renamed_copy,
    scene_coordinator,
)
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import ShellTask
from federation.deploy.config import load_config
from federation.interfaces.cli.main import app as cli_app
from federation.interfaces.service.app import create_app
from federation.interfaces.service.client import ServiceClient
from federation.interfaces.service.models import TaskRequest
from federation.interfaces.service.ops import LocalOps
from federation.security.tokens import TokenStore

PARTIAL = {"gpus_min": 1, "gpus_max": 1, "cpus_min": 16, "mem_gb_min": 32, "walltime_s": 1200}
"""A quarter of a GPU node for 20 minutes: Perlmutter's shared GPU class."""
PARTIAL_ARGS = ["--gpus", "1", "--cpus", "16", "--mem-gb", "32", "--walltime-s", "1200"]


@pytest.fixture
def coord() -> Iterator[SceneCoordinator]:
    c = scene_coordinator()
    yield c
    c.close()


def _nothing_submitted(coord: SceneCoordinator) -> None:
    assert coord.handles() == [] and coord.history() == []
    assert all(not b._futures for b in coord.backends.values())  # type: ignore[attr-defined]


def test_the_python_api_shows_the_class_and_the_exact_options(coord: SceneCoordinator) -> None:
    dry = coord.dry_run(ShellTask(command="nvidia-smi"), ResourceEnvelope(**PARTIAL))
    assert dry.submitted is False
    job = dry.job
    assert (job.site, job.node_class) == ("perlmutter", "gpu_shared")
    assert job.class_description == "class gpu_shared (no partition, constraint gpu, qos shared)"
    assert (job.partition, job.account, job.qos, job.constraint) == (
        None,
        "m1234_g",
        "shared",
        "gpu",
    )
    opts = job.sbatch_options
    assert opts is not None
    for opt in ("--gpus-per-node=1", "--cpus-per-task=16", "--mem=32g", "--time=20"):
        assert opt in opts, opts
    assert f"--job-name=fed.{job.user_endpoint_config['job_tag']}" in opts  # the shape's
    assert not any(o.startswith("--partition") for o in opts)
    assert dry.policy.verdict == "allowed" and dry.decision.chosen.partition == "gpu_shared"
    text = dry.text()
    assert "dry run (nothing submitted)" in text and "  #SBATCH --constraint=gpu" in text
    assert "decision trace:" in text and "policy: allowed" in text
    big = coord.dry_run(
        ShellTask(command="python train.py"),
        ResourceEnvelope(gpus_min=4, gpu_mem_gb_min=80, walltime_s=3600),
    )
    assert big.job.node_class == "gpu_hbm80g" and big.job.constraint == "gpu&hbm80g"
    _nothing_submitted(coord)


def test_a_renamed_copy_dry_runs_without_code_changes(tmp_path: Path) -> None:
    """Issue 34: a copy of the perlmutter folder under another name, named by a
    federation.yaml, passes config check and the dry run; its options come from the copy."""
    _, config = renamed_copy(tmp_path, "saul", account="m9999")
    r = CliRunner().invoke(cli_app, ["config", "check", "--config", str(config)])
    assert r.exit_code == 0, r.output
    coord = scene_coordinator(load_config(config).specs["saul"])
    try:
        dry = coord.dry_run(ShellTask(command="nvidia-smi"), ResourceEnvelope(**PARTIAL))
    finally:
        coord.close()
    assert (dry.job.site, dry.job.node_class, dry.job.account) == ("saul", "gpu_shared", "m9999_g")


def test_a_folder_without_endpoint_files_says_why_there_are_no_options(tmp_path: Path) -> None:
    (tmp_path / "perlmutter").mkdir()
    shutil.copy(FIXTURE / "site.yaml", tmp_path / "perlmutter" / "site.yaml")
    coord = scene_coordinator(perlmutter(tmp_path / "perlmutter"))
    try:
        dry = coord.dry_run(ShellTask(command="true"), ResourceEnvelope(**PARTIAL))
    finally:
        coord.close()
    assert dry.job.sbatch_options is None and dry.job.node_class == "gpu_shared"
    assert dry.job.note and "endpoint template did not render" in dry.job.note


@pytest.fixture
def cli_on(coord: SceneCoordinator, monkeypatch: pytest.MonkeyPatch) -> SceneCoordinator:
    """``federation submit`` acting on ``coord`` (as it would on its local federation)."""
    monkeypatch.delenv("FEDERATION_SERVICE", raising=False)
    monkeypatch.delenv("FEDERATION_CONFIG", raising=False)

    @contextmanager
    def local_federation(*_: Any, **__: Any) -> Iterator[SceneCoordinator]:
        yield coord

    monkeypatch.setattr("federation.interfaces.cli.submit.local_federation", local_federation)
    return coord


def test_cli_submit_dry_run(cli_on: SceneCoordinator) -> None:
    runner = CliRunner()
    r = runner.invoke(cli_app, ["submit", "--cmd", "nvidia-smi", *PARTIAL_ARGS, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "dry run (nothing submitted)" in r.stdout
    assert "class gpu_shared (no partition, constraint gpu, qos shared)" in r.stdout
    for line in ("#SBATCH --constraint=gpu", "#SBATCH --qos=shared", "#SBATCH --account=m1234_g"):
        assert line in r.stdout
    assert "--partition" not in r.stdout
    args = ["submit", "--cmd", "true", *PARTIAL_ARGS, "--node-class", "gpu", "--dry-run"]
    r = runner.invoke(cli_app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["submitted"] is False and doc["job"]["node_class"] == "gpu"
    assert "--qos=regular" in doc["job"]["sbatch_options"]
    r = runner.invoke(cli_app, ["submit", "--cmd", "true", "--qos", "debug", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "class cpu_debug" in r.stdout  # a CPU task, only under the debug QOS
    _nothing_submitted(cli_on)


def test_the_service_client_and_mcp_tool_dry_run(
    coord: SceneCoordinator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = TokenStore(tmp_path / "tokens.db")
    token = tokens.issue("dry").token
    app = create_app(coord, tokens, refresh_s=3600)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as http:
        body = {"command": "nvidia-smi", "envelope": PARTIAL}
        r = http.post("/v1/tasks", params={"dry_run": "true"}, json=body)
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["task_id"] == "" and doc["state"] == "not_submitted"
        assert doc["job"]["node_class"] == "gpu_shared" and doc["job"]["qos"] == "shared"
        assert doc["explain"].startswith("dry run (nothing submitted)")
        client = ServiceClient("http://testserver", token)
        client._client.close()
        client._client = http  # the same requests, to the app in this process
        req = TaskRequest(command="true", envelope=ResourceEnvelope(**PARTIAL))
        sub = client.submit(req, dry_run=True)
        assert sub.job is not None and "--constraint=gpu" in (sub.job.sbatch_options or ())
        monkeypatch.setattr("federation.interfaces.cli.submit.service_client", lambda *_: client)
        args = ["submit", "--cmd", "true", *PARTIAL_ARGS, "--dry-run", "--service", "x"]
        r2 = CliRunner().invoke(cli_app, [*args, "--token", "t"])
        assert r2.exit_code == 0, r2.output
        assert "#SBATCH --qos=shared" in r2.stdout  # (the command closed `client`)
    ops = LocalOps(coord, refresh_s=3600)
    try:
        mcp = _mcp_dry_run(ops)
    finally:
        ops.close()
    sub_doc, queued = mcp
    assert sub_doc["task_id"] == "" and sub_doc["state"] == "not_submitted"
    assert "--constraint=gpu" in sub_doc["job"]["sbatch_options"]
    assert sub_doc["job"]["account"] == "m1234_g" and sub_doc["job"]["partition"] is None
    assert queued == []
    _nothing_submitted(coord)


def _mcp_dry_run(ops: LocalOps) -> tuple[dict[str, Any], list[Any]]:
    from mcp import Client

    from federation.interfaces.mcp_server import build_server

    async def get_ops() -> LocalOps:
        return ops

    async def main() -> tuple[dict[str, Any], list[Any]]:
        async with Client(build_server(get_ops)) as c:
            args = {"command": "nvidia-smi", "envelope": PARTIAL, "dry_run": True}
            res = await c.call_tool("submit_task", args)
            assert not res.is_error, res.content
            page = await c.call_tool(
                "await_event", {"after": 0, "kinds": ["task.queued"], "timeout_s": 0}
            )
            return dict(res.structured_content or {}), page.structured_content["events"]

    return anyio.run(main)


@pytest.mark.slurm
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_cli_submit_dry_run_on_the_local_federation(local_federation: Any) -> None:
    """The CLI's own coordinator over the embedded local federation (its Slurm clusters
    probed, as ``test_cli_tasks`` does): a dry run names the partition the local site's
    class is, and submits nothing (no job of the shape in squeue)."""
    from federation.deploy.local import LocalSites

    LocalSites(home=local_federation.home).up()
    args = ["submit", "--cmd", "true", "--site", "local", "--dry-run", "--json"]
    r = CliRunner().invoke(cli_app, [*args, "--home", str(local_federation.home)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["submitted"] is False and doc["job"]["site"] == "local"
    assert doc["job"]["partition"] == doc["job"]["node_class"]
    assert f"--partition={doc['job']['partition']}" in doc["job"]["sbatch_options"]
