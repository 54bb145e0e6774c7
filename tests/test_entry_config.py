"""Every entry point acts on the sites a ``federation.yaml`` names, as ``serve`` does.

A config naming two of the local sites (``--config``, ``config=`` or ``$FEDERATION_CONFIG``):
``federation inspect`` probes those two and no other, ``federation submit`` runs on them,
the Jupyter executor's own coordinator and the MCP server's embedded one have exactly those
sites. Without a config, each acts on the whole embedded local federation.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from mcp import Client
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.deploy.connect import configured, connect
from federation.interfaces.cli.main import app as cli_app
from federation.interfaces.jupyter.executor import FederatedExecutor
from federation.interfaces.mcp_run import embedded_ops
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.ops import Operations
from functions.workloads import square

pytestmark = pytest.mark.slurm

TWO = ["local", "vista"]


@pytest.fixture(scope="module")
def config(local: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "federation.yaml"
    sites = "".join(f"  {s}:\n    backend: local\n" for s in TWO)
    path.write_text(f"home: {local.home}\nplacement: best-feasible\nsites:\n{sites}")
    return path


def test_the_config_is_found_by_argument_then_environment(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDERATION_CONFIG", raising=False)
    assert configured() is None
    assert configured(config) == config
    monkeypatch.setenv("FEDERATION_CONFIG", str(config))
    assert configured() == config
    with connect() as conn:
        assert sorted(conn.coord.backends) == TWO and conn.config == config
        assert conn.coord.policy == "best-feasible"


def test_cli_inspect_and_submit_act_on_the_configured_sites(config: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli_app, ["inspect", "--config", str(config), "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(s["site"] for s in json.loads(r.output)["sites"]) == TWO
    sub = runner.invoke(
        cli_app,
        ["submit", "--config", str(config), "-c", "hostname", "--walltime-s", "120", "--wait"],
    )
    assert sub.exit_code == 0, sub.output
    assert any(f"{s}/" in sub.output for s in TWO), sub.output


def test_jupyter_executor_and_mcp_server_act_on_the_configured_sites(config: Path) -> None:
    with FederatedExecutor(config=config) as ex:
        assert sorted(ex.coordinator.backends) == TWO
        env = ResourceEnvelope(walltime_s=120)
        assert ex.submit(square, 5, envelope=env).result(timeout=120) == 25
    ops = embedded_ops(config=config)
    try:

        async def get_ops() -> Operations:
            return ops

        async def main() -> list[str]:
            # refresh: wait for a probe of the configured sites (without it, a first probe
            # slower than the tool's first wait, as on a loaded machine, answers "probing"
            # with no sites yet, and says to ask again)
            async with Client(build_server(get_ops)) as c:
                res = await c.call_tool("inspect_federation", {"refresh": True})
                view = res.structured_content
                assert view["status"] == "ready", view
                return sorted(s["site"] for s in view["sites"])

        assert anyio.run(main) == TWO
    finally:
        ops.close()


def test_site_filter_and_config_do_not_mix(config: Path) -> None:
    with pytest.raises(ValueError, match="the sites are the ones"):
        connect(config, sites=["local"])
    assert isinstance(cli_app, typer.Typer)


def test_result_reads_what_submit_left_in_the_deployment(config: Path) -> None:
    """`submit --config` without --wait keeps its task in the deployment's coordinator.db;
    a later `result --config` (another coordinator, as from another shell) re-attaches to it
    and shows its end."""
    runner = CliRunner()
    command = "echo ran-on-$SLURM_CLUSTER_NAME"
    args = ["submit", "--config", str(config), "-c", command, "--walltime-s", "120", "--json"]
    sub = runner.invoke(cli_app, args)
    assert sub.exit_code == 0, sub.output
    doc = json.loads(sub.output)
    assert doc["waited"] is False and "result --config" in doc["note"]
    tid = doc["task_id"]
    deadline = time.monotonic() + 180
    while True:
        r = runner.invoke(cli_app, ["result", "--config", str(config), tid, "--json"])
        if r.exit_code != 3 or time.monotonic() > deadline:  # 3: still queued or running
            break
        time.sleep(2)
    assert r.exit_code == 0, r.output
    view = json.loads(r.output)
    assert view["kind"] == "task" and view["task_id"] == tid and view["state"] == "completed"
    assert view["result"]["stdout"].strip() in {f"ran-on-{s}" for s in TWO}, view
    unknown = runner.invoke(cli_app, ["result", "--config", str(config), "no-such-id"])
    assert unknown.exit_code == 2 and "no-such-id" in unknown.output
