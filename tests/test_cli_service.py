"""``submit``, ``group``, ``move``, ``result`` and ``watch`` against a running service.

The service runs in this process (uvicorn on a free port) over the in-process federation
(sites run Python tasks on threads, so catalog functions run; no Slurm needed). The CLI is
driven through typer's CliRunner with ``--service URL`` and the token in
``$FEDERATION_TOKEN``, as a user would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from inprocess import FixedCoordinator, inprocess_coordinator
from typer.testing import CliRunner

from federation.core.storage import site_storage
from federation.interfaces.cli.tasks import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, register
from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import running
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

runner = CliRunner()
APP = typer.Typer()
register(APP)
ENV = {"walltime_s": 300}


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-svc-home")


@pytest.fixture(scope="module")
def coord(home: Path) -> Iterator[FixedCoordinator]:
    c = inprocess_coordinator(("local", "delta"))
    c.transfer_backends = LocalCopyBackend(["local", "delta"], home)
    yield c
    c.close()


@pytest.fixture(scope="module")
def service(coord: FixedCoordinator, home: Path) -> Iterator[tuple[str, str]]:
    tokens = TokenStore(home / "tokens.db")
    token = tokens.issue("cli-test").token
    with running(create_app(coord, tokens, refresh_s=3600)) as base:
        yield base, token


@pytest.fixture
def env(service: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    base, token = service
    monkeypatch.setenv("FEDERATION_TOKEN", token)
    monkeypatch.setenv("FEDERATION_SERVICE", base)
    return base


def _group_file(tmp_path: Path, children: list[dict[str, Any]]) -> Path:
    path = tmp_path / "group.json"
    path.write_text(json.dumps({"children": children, "objective": "cli test"}))
    return path


def test_group_wait_then_result_and_watch(env: str, tmp_path: Path) -> None:
    spec = _group_file(
        tmp_path,
        [
            # the first child is the slow one: every child is placed before any ends
            {"function": "report_allocation", "args": [1.0], "envelope": ENV, "name": "four"},
            {"function": "square", "args": [5], "envelope": ENV, "name": "five"},
        ],
    )
    r = runner.invoke(APP, ["group", "--file", str(spec), "--wait"])
    assert r.exit_code == EXIT_OK, r.output
    out = _flat(r.output)
    assert "four" in out and "five" in out and "round_terminal" in out
    assert "(done)" in out
    # the same group, as JSON, without waiting
    r = runner.invoke(APP, ["group", "--file", str(spec), "--json"])
    assert r.exit_code == EXIT_OK, r.output
    g = json.loads(r.stdout)
    assert {c["site"] for c in g["children"]} == {"local", "delta"}
    gid = g["group_id"]
    # watch replays the history and follows live until the round ends; JSON Lines
    r = runner.invoke(APP, ["watch", gid, "--json"])
    assert r.exit_code == EXIT_OK, r.output
    events = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "group.round_terminal" and kinds.count("task.completed") == 2
    assert {e["task_id"] for e in events} == {gid} | {c["task_id"] for c in g["children"]}
    # result: a group id, a child's task id
    r = runner.invoke(APP, ["result", gid, "--json"])
    assert r.exit_code == EXIT_OK, r.output
    assert json.loads(r.stdout)["kind"] == "group" and json.loads(r.stdout)["done"]
    child = g["children"][1]["task_id"]
    r = runner.invoke(APP, ["result", child, "--json"])
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "task" and doc["result"]["value"] == 25
    r = runner.invoke(APP, ["result", child])
    assert r.exit_code == EXIT_OK and "completed" in r.output and "25" in r.output


def test_failed_child_exits_1_and_result_shows_the_traceback(env: str, tmp_path: Path) -> None:
    spec = _group_file(
        tmp_path,
        [
            {"function": "report_allocation", "args": [1.0], "envelope": ENV},
            {"function": "fail_with", "args": ["boom from the CLI test"], "envelope": ENV},
        ],
    )
    r = runner.invoke(APP, ["group", "--file", str(spec), "--wait", "--json"])
    assert r.exit_code == EXIT_TASK_FAILED, r.output
    view = json.loads(r.stdout)
    assert sorted(c["state"] for c in view["children"]) == ["completed", "failed"]
    bad = next(c for c in view["children"] if c["state"] == "failed")
    r = runner.invoke(APP, ["result", bad["task_id"]])
    assert r.exit_code == EXIT_TASK_FAILED
    assert "boom from the CLI test" in r.output


def test_move_wait_shows_progress_and_copies(env: str, home: Path) -> None:
    src = site_storage("local", home) / "in" / "table.csv"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("x,y\n" * 5000)
    r = runner.invoke(
        APP, ["move", "local:in/table.csv", "delta:staged/table.csv", "--wait", "--paths=storage"]
    )
    assert r.exit_code == EXIT_OK, r.output
    out = _flat(r.output)
    assert "transfer.submitted" in out and "transfer.completed" in out
    assert "succeeded" in out and "local:in/table.csv -> delta:staged/table.csv" in out
    assert (site_storage("delta", home) / "staged" / "table.csv").read_text() == src.read_text()
    ws = site_storage("local", home) / "workspaces" / "cli-test" / "default" / "in"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "table.csv").write_text(src.read_text())  # the default: paths in your workspace
    r = runner.invoke(APP, ["move", "local:in/table.csv", "delta:staged/t2.csv", "--json"])
    assert r.exit_code == EXIT_OK, r.output
    tid = json.loads(r.stdout)["transfer_id"]
    r = runner.invoke(APP, ["watch", tid])
    assert r.exit_code == EXIT_OK, r.output
    r = runner.invoke(APP, ["result", tid, "--json"])
    assert json.loads(r.stdout)["state"] == "succeeded"
    moved = (
        site_storage("delta", home) / "workspaces" / "cli-test" / "default" / "staged" / "t2.csv"
    )
    assert moved.read_text() == src.read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["move", "local:../../etc/passwd", "delta:x"], "bad_path"),
        (["move", "local:no/such", "delta:x"], "data_not_found"),
        (["move", "nocolon", "delta:x"], "not SITE:PATH"),
        (["move", "--paths=storage", "local:workspaces/bob/default/x", "delta:x"], "not_your"),
        (["move", "--paths=sideways", "local:x", "delta:x"], "paths"),
        (["result", "no-such-id"], "unknown_id"),
        (["watch", "no-such-id"], "unknown_task"),
        (["group", "--cmd", "true", "--gpus", "64"], "no_feasible_site"),
        (["group"], "a group needs children"),
    ],
)
def test_errors_exit_2_with_a_message(env: str, args: list[str], needle: str) -> None:
    r = runner.invoke(APP, args)
    assert r.exit_code == EXIT_ERROR, r.output
    assert needle in _flat(r.output)


def test_missing_or_bad_token(service: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    base, _ = service
    monkeypatch.delenv("FEDERATION_TOKEN", raising=False)
    r = runner.invoke(APP, ["result", "x", "--service", base])
    assert r.exit_code == EXIT_ERROR and "needs a bearer token" in _flat(r.output)
    r = runner.invoke(APP, ["result", "x", "--service", base, "--token", "fedtok_nope", "--json"])
    assert r.exit_code == EXIT_ERROR and json.loads(r.stdout)["error"] == "unauthorized"
