"""One meaning of a path (issue 35, item 4): a result's output path, passed unchanged to
``move_data``, copies that file, from Python, the service client, the CLI and MCP alike.

An in-process federation (sites run Python tasks on threads, no Slurm), the real local copy
backend between the sites' storage roots. Each interface's caller runs a task that writes a
file in their workspace on ``local``, reads the result's ``outputs`` through that interface,
and moves the listed path to ``delta`` through the same interface, with no ``paths``
argument: the file lands in their workspace there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from inprocess import FixedCoordinator, ThreadSite
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.core.tasks import PythonTask
from federation.core.workspace import workspace_rel
from federation.interfaces.cli.tasks import EXIT_OK, register
from federation.interfaces.mcp_server import STDIO_CALLER, build_server
from federation.interfaces.service.app import create_app
from federation.interfaces.service.client import ServiceClient
from federation.interfaces.service.models import TransferRequest
from federation.interfaces.service.ops import LocalOps
from federation.interfaces.service.server import running
from federation.runtime.store import Store
from federation.security.policy import LOCAL_CALLER
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

ON_LOCAL = ResourceEnvelope(sites=("local",), walltime_s=60)


def _writes(name: str, text: str) -> int:
    import os

    path = os.path.join(os.environ["FEDERATION_WORKSPACE"], name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return len(text)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("paths-home")


@pytest.fixture(scope="module")
def coord(home: Path) -> Iterator[FixedCoordinator]:
    sites = [ThreadSite(s) for s in load_sites(["local", "delta"])]
    c = FixedCoordinator(
        sites,
        store=Store(home / "coordinator.db"),
        result_storage=lambda s: site_storage(s, home),
        transfer_backends=LocalCopyBackend(["local", "delta"], home),
    )
    for s in sites:
        s.coord = c
    yield c
    c.close()


def _task_with_output(coord: FixedCoordinator, caller: str, name: str) -> str:
    """A task of ``caller``'s that wrote ``name`` in their workspace on local; its id."""
    h = coord.submit_task(PythonTask(_writes, (name, f"{caller}\n")), ON_LOCAL, caller=caller)
    assert h.wait(30) and h.state == "completed", h.error
    return h.id


def _landed(home: Path, caller: str, path: str) -> str:
    return (site_storage("delta", home) / str(workspace_rel(caller)) / path).read_text()


def test_python_api(coord: FixedCoordinator, home: Path) -> None:
    tid = _task_with_output(coord, LOCAL_CALLER, "py/out.txt")
    (out,) = coord.get_result(tid).outputs
    assert out.path == "py/out.txt"
    h = coord.move_data("local", out.path, "delta", out.path)
    assert h.wait(30) and h.state == "succeeded", h.error
    assert _landed(home, LOCAL_CALLER, out.path) == f"{LOCAL_CALLER}\n"


@pytest.fixture(scope="module")
def service(coord: FixedCoordinator, home: Path) -> Iterator[tuple[str, str]]:
    tokens = TokenStore(home / "tokens.db")
    token = tokens.issue("paths-test").token
    with running(create_app(coord, tokens, refresh_s=3600)) as base:
        yield base, token


def test_service_client(coord: FixedCoordinator, home: Path, service: tuple[str, str]) -> None:
    base, token = service
    tid = _task_with_output(coord, "paths-test", "svc/out.txt")
    client = ServiceClient(base, token)
    result = client.status(tid).result
    assert result is not None
    (out,) = result.outputs
    t = client.move_data(
        TransferRequest(
            source_site="local", source_path=out.path, dest_site="delta", dest_path=out.path
        )
    )
    assert coord.get_transfer(t.transfer_id).wait(30)
    assert client.transfer(t.transfer_id).state == "succeeded"
    assert _landed(home, "paths-test", out.path) == "paths-test\n"


def test_cli(
    coord: FixedCoordinator,
    home: Path,
    service: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, token = service
    monkeypatch.setenv("FEDERATION_SERVICE", base)
    monkeypatch.setenv("FEDERATION_TOKEN", token)
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    tid = _task_with_output(coord, "paths-test", "cli/out.txt")
    shown = runner.invoke(app, ["result", tid, "--json"])
    assert shown.exit_code == EXIT_OK, shown.output
    (out,) = json.loads(shown.output)["result"]["outputs"]
    moved = runner.invoke(
        app, ["move", f"local:{out['path']}", f"delta:{out['path']}", "--wait", "--json"]
    )
    assert moved.exit_code == EXIT_OK, moved.output
    assert _landed(home, "paths-test", out["path"]) == "paths-test\n"


def test_mcp(coord: FixedCoordinator, home: Path) -> None:
    from mcp import Client

    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> LocalOps:
        return ops

    tid = _task_with_output(coord, STDIO_CALLER, "mcp/out.txt")

    async def main() -> tuple[Any, Any]:
        async with Client(build_server(get_ops)) as c:
            got = await c.call_tool("get_result", {"task_id": tid})
            assert not got.is_error, got.content
            (out,) = got.structured_content["result"]["outputs"]
            t = await c.call_tool(
                "move_data",
                {
                    "source_site": "local",
                    "source_path": out["path"],
                    "dest_site": "delta",
                    "dest_path": out["path"],
                },
            )
            assert not t.is_error, t.content
            tr = t.structured_content
            await c.call_tool(
                "await_event",
                {
                    "after": tr["cursor"],
                    "task_ids": [tr["transfer_id"]],
                    "kinds": ["transfer.completed", "transfer.failed"],
                    "timeout_s": 30,
                },
            )
            view = await c.call_tool("get_transfer", {"transfer_id": tr["transfer_id"]})
            return out, view.structured_content

    try:
        out, view = anyio.run(main)
    finally:
        ops.close()
    assert view["state"] == "succeeded", view
    assert _landed(home, STDIO_CALLER, out["path"]) == f"{STDIO_CALLER}\n"
