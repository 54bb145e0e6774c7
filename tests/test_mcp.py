"""A real MCP client drives the agent loop against ``python -m federation.interfaces.mcp_cli``.

Over stdio and over streamable HTTP, on the local Slurm federation (tests marked ``slurm``):
list the tools (with their schemas), inspect, draft, submit, await events on the cursor
until the task is done, get the result. Malformed arguments give an MCP tool error and
submit nothing.

Without Slurm (the in-process federation, an in-memory MCP client session, as an agent
would see the server): tool titles and annotations, the resources, progress notifications
during a wait, the first inspect_federation answering at once, the typer command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from federation.deploy.local import LocalSites
from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import free_port, running
from federation.security.audit import AuditLog
from federation.security.policy import CallerPolicy
from federation.security.tokens import TokenStore

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {
    "inspect_federation",
    "list_functions",
    "draft_envelope",
    "submit_task",
    "get_result",
    "await_event",
    "cancel",
}
LATENCIES: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def home(local_federation: Any) -> Path:
    LocalSites(home=local_federation.home).up()
    return Path(local_federation.home)


def _server_env(home: Path) -> dict[str, str]:
    return {"FEDERATION_HOME": str(home), "PYTHONPATH": str(ROOT)}


async def _call(s: ClientSession, name: str, args: dict[str, Any], transport: str) -> Any:
    t0 = time.monotonic()
    res = await s.call_tool(name, args)
    LATENCIES.setdefault(f"{transport}:{name}", []).append(time.monotonic() - t0)
    assert not res.is_error, (name, res.content)
    return res.structured_content


async def _queued_count(s: ClientSession) -> int:
    res = await s.call_tool("await_event", {"after": 0, "kinds": ["task.queued"], "timeout_s": 0})
    assert not res.is_error, res.content
    return len(res.structured_content["events"])


async def _agent_loop(s: ClientSession, transport: str, task: dict[str, Any]) -> dict[str, Any]:
    """inspect -> draft -> submit -> await_event on the cursor until done -> get_result."""
    await s.initialize()
    listed = await s.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert set(by_name) >= TOOLS, sorted(by_name)
    for t in by_name.values():
        assert t.description and len(t.description) > 40, t.name
        assert t.input_schema["type"] == "object", t.name
        assert t.output_schema, f"{t.name} has no output schema"
    sub_schema = by_name["submit_task"].input_schema
    assert sub_schema["required"] == ["envelope"]
    assert "ResourceEnvelope" in str(sub_schema["properties"]["envelope"])
    assert "returns AT ONCE" in (by_name["submit_task"].description or "")
    assert "cursor" in (by_name["await_event"].description or "")
    assert by_name["await_event"].input_schema["properties"]["timeout_s"]["maximum"] == 50

    first = await _call(s, "inspect_federation", {}, transport + "-first")  # does not wait
    assert first["status"] in ("ready", "probing"), first
    snap = first
    deadline = time.monotonic() + 120
    while snap["status"] != "ready" and time.monotonic() < deadline:
        await anyio.sleep(0.5)
        snap = await _call(s, "inspect_federation", {}, transport)
    assert snap["status"] == "ready" and snap["age_s"] is not None, snap
    assert {x["site"] for x in snap["sites"]} >= {"local"}
    assert all(x["reachable"] for x in snap["sites"]), snap
    funcs = await _call(s, "list_functions", {}, transport)
    assert "square" in {f["name"] for f in funcs["result"]}
    draft = await _call(
        s,
        "draft_envelope",
        {"description": "clean a small csv file", "hints": {"known_runtime_s": 5}},
        transport,
    )
    assert draft["workload_class"] == "cpu-prep" and draft["validation"]["feasible"]

    # malformed arguments: an MCP tool error, and nothing submitted
    before = await _queued_count(s)
    for bad in (
        {"envelope": {"cpus_min": "lots"}, "command": "true"},
        {"envelope": {"sites": ["local"]}, "command": "true", "function": "square"},
        {"envelope": {"sites": ["local"]}, "function": "no_such_fn"},
        {"envelope": {"sites": ["local"]}, "function": "square", "args": ["NaN"]},
        {"command": "true"},
        {"envelope": {"gpus_min": 64}, "command": "true"},
    ):
        res = await s.call_tool("submit_task", bad)
        assert res.is_error, bad
        text = res.content[0].text  # type: ignore[union-attr]
        assert text, bad
    res = await s.call_tool("submit_task", {"envelope": {"gpus_min": 64}, "command": "true"})
    assert "no_feasible_site" in res.content[0].text  # type: ignore[union-attr]
    assert "What to do" in res.content[0].text  # type: ignore[union-attr]
    res = await s.call_tool("await_event", {"timeout_s": 500})
    assert res.is_error  # above the 50 s bound
    res = await s.call_tool("get_result", {"task_id": "nope"})
    assert res.is_error and "unknown_task" in res.content[0].text  # type: ignore[union-attr]
    assert await _queued_count(s) == before

    env = dict(draft["envelope"], sites=["local"], walltime_s=300)
    sub = await _call(s, "submit_task", {"envelope": env, **task}, transport)
    assert sub["site"] == "local" and sub["decision"]["chosen"]["site"] == "local"
    assert "chose local/" in sub["explain"]
    tid, cursor = sub["task_id"], sub["cursor"]
    kinds: list[str] = []
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        page = await _call(
            s, "await_event", {"after": cursor, "task_ids": [tid], "timeout_s": 20}, transport
        )
        assert time.monotonic() - t0 < 25
        assert page["cursor"] >= cursor
        cursor = page["cursor"]
        kinds += [e["kind"] for e in page["events"]]
        if {"task.completed", "task.failed"} & set(kinds):
            break
    assert kinds == ["task.queued", "task.started", "task.completed"], kinds
    status = await _call(s, "get_result", {"task_id": tid}, transport)
    assert status["done"] and status["state"] == "completed", status
    c = await _call(s, "cancel", {"task_id": tid}, transport)
    assert c["cancelled"] is False and "already completed" in c["message"]
    result: dict[str, Any] = status["result"]
    return result


def _assert_tools_called(transport: str) -> None:
    """Every tool but await_event was called and answered (latencies are *reported*, in the
    module summary, not asserted: speed is shown by measurement, a loaded CI machine would
    make a wall-clock bound flaky)."""
    called = {
        k.split(":")[1] for k in LATENCIES if k.split(":")[0] in (transport, transport + "-first")
    }
    assert called >= {"inspect_federation", "draft_envelope", "submit_task", "get_result"}


@pytest.mark.slurm
def test_stdio_agent_loop(home: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "federation.interfaces.mcp_cli", "--no-up"],
        env=_server_env(home),
        cwd=str(ROOT),
    )

    async def main() -> dict[str, Any]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            return await _agent_loop(s, "stdio", {"function": "square", "args": [9]})

    result = anyio.run(main)
    assert result["value"] == 81 and result["value_is_json"]
    _assert_tools_called("stdio")


@pytest.fixture(scope="module")
def http_mcp(
    home: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    db = tmp_path_factory.mktemp("mcp") / "tokens.db"
    token = TokenStore(db).issue("mcp-test").token
    # a second caller, allowed Delta only (its policy kept with its token)
    narrow = TokenStore(db).issue("mcp-delta-only", CallerPolicy(allowed_sites=("delta",))).token
    port = free_port()
    log = (tmp_path_factory.mktemp("mcp-log") / "server.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "federation.interfaces.mcp_cli",
            "--transport",
            "http",
            "--port",
            str(port),
            "--no-up",
            "--tokens",
            str(db),
            # this module's stdio servers keep the home's store while this one lives on
            # (module-scoped): only one coordinator may hold it (hold_store)
            "--in-memory",
        ],
        env={**os.environ, **_server_env(home)},
        cwd=str(ROOT),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError as e:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"MCP HTTP server did not start (rc={proc.poll()})") from e
                time.sleep(0.2)
        yield url, token, narrow
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slurm
def test_streamable_http_agent_loop(home: Path, http_mcp: tuple[str, str, str]) -> None:
    url, token, _ = http_mcp
    started = datetime.now(UTC)  # the home's audit log outlives test runs
    assert httpx.post(url, json={}, timeout=5).status_code == 401  # no token, no tools
    headers = {"Authorization": f"Bearer {token}"}

    async def main() -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=60)) as http,
            streamable_http_client(url, http_client=http) as (r, w),
            ClientSession(r, w) as s,
        ):
            return await _agent_loop(s, "http", {"command": "echo agent on $SLURM_CLUSTER_NAME"})

    result = anyio.run(main)
    assert result["stdout"].strip() == "agent on local" and result["returncode"] == 0
    _assert_tools_called("http")
    # the task ran as the token's caller: the audit log says who ran what where
    audit = AuditLog(home / "audit.db").records(caller="mcp-test", since=started)
    shipped = [r for r in audit if r.decision == "allowed"]
    assert [(r.site, r.what) for r in shipped] == [("local", "echo agent on $SLURM_CLUSTER_NAME")]


@pytest.mark.slurm
def test_streamable_http_applies_the_token_callers_policy(
    home: Path, http_mcp: tuple[str, str, str]
) -> None:
    """A caller allowed Delta only is refused the local site, and nothing is submitted."""
    url, _, narrow = http_mcp
    started = datetime.now(UTC)

    async def main() -> tuple[bool, str, int, int]:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {narrow}"}, timeout=httpx2.Timeout(60)
            ) as http,
            streamable_http_client(url, http_client=http) as (r, w),
            ClientSession(r, w) as s,
        ):
            await s.initialize()
            before = await _queued_count(s)
            res = await s.call_tool(
                "submit_task",
                {"envelope": {"sites": ["local"], "walltime_s": 60}, "command": "true"},
            )
            text = res.content[0].text  # type: ignore[union-attr]
            return res.is_error, text, before, await _queued_count(s)

    is_error, text, before, after = anyio.run(main)
    assert is_error and "policy" in text and "local" in text, text
    assert after == before
    denied = AuditLog(home / "audit.db").records(caller="mcp-delta-only", since=started)
    assert [r.decision for r in denied] == ["denied"], denied


@pytest.mark.slurm
def test_mcp_over_the_http_service(home: Path, tmp_path: Path) -> None:
    """``--service URL --token``: the MCP tools backed by a running HTTP service."""
    local = LocalSites(home=home)
    coord = local.connect(telemetry=False)
    tokens = TokenStore(tmp_path / "tokens.db")
    token = tokens.issue("mcp-via-service").token
    app = create_app(coord, tokens, refresh_s=3600)
    try:
        with running(app) as base:
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "federation.interfaces.mcp_cli", "--service", base],
                env={**_server_env(home), "FEDERATION_TOKEN": token},
                cwd=str(ROOT),
            )

            async def main() -> dict[str, Any]:
                async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
                    return await _agent_loop(
                        s, "service", {"function": "report_allocation", "kwargs": {"work_s": 0.1}}
                    )

            result = anyio.run(main)
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
    assert result["value"]["cluster"] == "local" and result["value"]["slurm_job_id"]
    _assert_tools_called("service")


@pytest.mark.slurm
def test_zz_report_latencies() -> None:
    """Prints what each tool took (run with -s to see it)."""
    for key in sorted(LATENCIES):
        times = LATENCIES[key]
        print(
            f"{key:32s} n={len(times):2d} max={max(times) * 1000:7.1f} ms "
            f"median={sorted(times)[len(times) // 2] * 1000:7.1f} ms"
        )


@pytest.mark.slurm
def test_stdio_group_and_move_data(home: Path) -> None:
    """submit_group and move_data through a real MCP client session over stdio."""
    from federation.core.storage import site_storage

    ws = "workspaces/mcp/default"  # the stdio caller's workspace: move_data's paths
    src = site_storage("local", home) / ws / "mcp-test" / "input.txt"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("staged by an agent\n" * 100)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "federation.interfaces.mcp_cli", "--no-up"],
        env=_server_env(home),
        cwd=str(ROOT),
    )
    env = {"sites": ["local", "vista"], "walltime_s": 300}

    async def until(s: ClientSession, cursor: int, oid: str, kinds: set[str]) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + 150
        while not kinds & set(seen) and time.monotonic() < deadline:
            page = await _call(
                s, "await_event", {"after": cursor, "task_ids": [oid], "timeout_s": 20}, "grp"
            )
            cursor = page["cursor"]
            seen += [e["kind"] for e in page["events"]]
        return seen

    async def main() -> tuple[dict[str, Any], list[str], dict[str, Any]]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"submit_group", "get_group", "move_data", "get_transfer"} <= names
            g = await _call(
                s,
                "submit_group",
                {
                    "children": [
                        {"function": "report_allocation", "kwargs": {"work_s": 1}, "envelope": env},
                        {"function": "report_allocation", "kwargs": {"work_s": 1}, "envelope": env},
                    ],
                    "objective": "agent group",
                },
                "grp",
            )
            assert sorted(c["site"] for c in g["children"]) == ["local", "vista"]
            kinds = await until(s, g["cursor"], g["group_id"], {"group.round_terminal"})
            view = await _call(s, "get_group", {"group_id": g["group_id"]}, "grp")
            t = await _call(
                s,
                "move_data",
                {
                    "source_site": "local",
                    "source_path": "mcp-test/input.txt",
                    "dest_site": "delta",
                    "dest_path": "mcp-test/input.txt",
                },
                "grp",
            )
            tkinds = await until(
                s, t["cursor"], t["transfer_id"], {"transfer.completed", "transfer.failed"}
            )
            assert tkinds[-1] == "transfer.completed", tkinds
            tv = await _call(s, "get_transfer", {"transfer_id": t["transfer_id"]}, "grp")
            return view, kinds, tv

    view, kinds, tv = anyio.run(main)
    assert kinds[-1] == "group.round_terminal" and kinds.count("task.completed") == 2, kinds
    assert view["done"] and {c["state"] for c in view["children"]} == {"completed"}
    assert tv["state"] == "succeeded"
    dst = site_storage("delta", home) / ws / "mcp-test" / "input.txt"
    assert dst.read_text() == src.read_text()


# --- without Slurm: the in-process federation, an in-memory MCP client session ---------------

ENV = {"walltime_s": 300}


@pytest.fixture(scope="module")
def inproc_ops() -> Iterator[Any]:
    from inprocess import inprocess_coordinator

    from federation.interfaces.service.ops import LocalOps

    coord = inprocess_coordinator(("local", "delta"))
    ops = LocalOps(coord, refresh_s=3600)
    yield ops
    ops.close()
    coord.close()


def _server(ops: Any, **kw: Any) -> Any:
    from federation.interfaces.mcp_server import build_server

    async def get_ops() -> Any:
        return ops

    return build_server(get_ops, **kw)


def test_every_tool_has_a_title_and_honest_annotations(inproc_ops: Any) -> None:
    from mcp import Client

    async def main() -> dict[str, Any]:
        async with Client(_server(inproc_ops)) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    tools = anyio.run(main)
    assert set(tools) >= TOOLS | {"submit_group", "get_group", "move_data", "get_transfer"}
    for t in tools.values():
        a = t.annotations
        assert t.title and a is not None and a.title == t.title, t.name
        assert a.read_only_hint is not None and a.open_world_hint is not None, t.name
        assert a.idempotent_hint is not None, t.name
        if not a.read_only_hint:
            assert a.destructive_hint is not None, t.name
    read_only = {n for n, t in tools.items() if t.annotations and t.annotations.read_only_hint}
    assert read_only == {
        "inspect_federation",
        "list_functions",
        "draft_envelope",
        "get_result",
        "get_group",
        "get_transfer",
        "await_event",
    }
    for name in ("submit_task", "submit_group", "move_data"):
        assert tools[name].annotations.idempotent_hint is False, name  # type: ignore[union-attr]
    assert tools["submit_task"].annotations.destructive_hint is False  # type: ignore[union-attr]
    assert tools["cancel"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert tools["cancel"].annotations.idempotent_hint is True  # type: ignore[union-attr]
    assert tools["move_data"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert tools["submit_task"].annotations.open_world_hint is True  # type: ignore[union-attr]
    assert tools["list_functions"].annotations.open_world_hint is False  # type: ignore[union-attr]


def test_resources_snapshot_and_task_manifests(inproc_ops: Any) -> None:
    import json

    from mcp import Client

    async def main() -> tuple[Any, ...]:
        async with Client(_server(inproc_ops)) as c:
            listed = {str(r.uri): r for r in (await c.list_resources()).resources}
            templates = {
                t.uri_template: t for t in (await c.list_resource_templates()).resource_templates
            }
            snap = await c.read_resource("federation://snapshot")
            sub = await c.call_tool(
                "submit_task", {"function": "square", "args": [6], "envelope": ENV}
            )
            assert not sub.is_error, sub.content
            tid, cursor = sub.structured_content["task_id"], sub.structured_content["cursor"]
            for _ in range(20):
                page = await c.call_tool(
                    "await_event", {"after": cursor, "task_ids": [tid], "timeout_s": 5}
                )
                cursor = page.structured_content["cursor"]
                kinds = [e["kind"] for e in page.structured_content["events"]]
                if "task.completed" in kinds or "task.failed" in kinds:
                    break
            task = await c.read_resource(f"federation://tasks/{tid}")
            try:
                await c.read_resource("federation://tasks/no-such-task")
                unknown: str | None = None
            except Exception as e:
                unknown = str(e)
            return listed, templates, snap, tid, task, unknown

    listed, templates, snap, tid, task, unknown = anyio.run(main)
    assert "federation://snapshot" in listed
    assert listed["federation://snapshot"].mime_type == "application/json"
    assert "federation://tasks/{task_id}" in templates
    doc = json.loads(snap.contents[0].text)
    assert {s["site"] for s in doc["sites"]} == {"local", "delta"} and doc["taken_at"]
    manifest = json.loads(task.contents[0].text)
    assert manifest["task_id"] == tid and manifest["state"] == "completed"
    assert manifest["result"]["value"] == 36
    assert unknown is not None and "unknown_task" in unknown


def test_await_event_reports_progress_while_it_waits(
    inproc_ops: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp import Client

    from federation.interfaces import mcp_server

    monkeypatch.setattr(mcp_server, "PROGRESS_EVERY_S", 0.2)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def main() -> tuple[Any, Any]:
        async with Client(_server(inproc_ops)) as c:
            last = (await c.call_tool("await_event", {"timeout_s": 0})).structured_content
            cursor = last["last_seq"]
            args = {"after": cursor, "kinds": ["task.failed"], "timeout_s": 1.5}
            waited = await c.call_tool("await_event", args, progress_callback=on_progress)
            n = len(progress)
            quiet = await c.call_tool("await_event", args)  # no progressToken: no progress
            assert len(progress) == n
            return waited, quiet

    waited, quiet = anyio.run(main)
    assert not waited.is_error and waited.structured_content["timed_out"], waited.content
    assert not quiet.is_error and quiet.structured_content["timed_out"]
    assert len(progress) >= 2, progress
    values = [p[0] for p in progress]
    assert values == sorted(values) and all(0 < v <= 1.5 for v in values)
    assert all(p[1] == 1.5 for p in progress)
    assert all(p[2] and "waiting for events" in p[2] for p in progress)


class _SlowOps:
    """Operations whose probe blocks until ``gate`` is set (a federation slow to answer)."""

    def __init__(self, snap: Any) -> None:
        import threading

        self.gate = threading.Event()
        self.snap = snap
        self.probes = 0

    def inspect(self, refresh: bool = False) -> Any:
        self.probes += 1
        if not self.gate.wait(30):
            raise TimeoutError("gate never opened")
        return self.snap

    def close(self) -> None:
        self.gate.set()


def test_first_inspect_answers_at_once_while_the_probe_runs() -> None:
    from inprocess import idle_snapshot
    from mcp import Client

    from federation.core.spec import load_sites

    slow = _SlowOps(idle_snapshot([s for s in load_sites() if s.name in ("local", "delta")]))

    async def main() -> tuple[dict[str, Any], float, dict[str, Any]]:
        async with Client(_server(slow)) as c:
            t0 = time.monotonic()
            first = await c.call_tool("inspect_federation", {})
            took = time.monotonic() - t0
            slow.gate.set()  # the probe comes back
            later: dict[str, Any] = {}
            for _ in range(100):
                later = (await c.call_tool("inspect_federation", {})).structured_content
                if later["status"] == "ready":
                    break
                await anyio.sleep(0.05)
            return first.structured_content, took, later

    try:
        first, took, later = anyio.run(main)
    finally:
        slow.close()
    assert first["status"] == "probing" and first["sites"] == [] and first["refreshing"]
    assert "in progress" in first["message"]
    assert took < 10  # generous: the probe itself was blocked for as long as it took
    assert later["status"] == "ready" and later["age_s"] is not None and later["age_s"] >= 0
    assert {s["site"] for s in later["sites"]} == {"local", "delta"}
    assert slow.probes == 1  # asking again while the probe ran did not start another


def test_stale_snapshot_is_answered_at_once_and_refreshed_in_the_background() -> None:
    import threading
    from datetime import UTC, datetime, timedelta

    from inprocess import idle_snapshot

    from federation.core.spec import load_sites
    from federation.interfaces.snapshot_cache import SnapshotKeeper

    specs = [s for s in load_sites() if s.name == "local"]
    old = idle_snapshot(specs, taken_at=datetime.now(UTC) - timedelta(seconds=120))
    fresh = idle_snapshot(specs)
    calls: list[bool] = []
    release = threading.Event()

    def probe(refresh: bool) -> Any:
        calls.append(refresh)
        if refresh:
            release.wait(10)
            return fresh
        return old

    keeper = SnapshotKeeper(probe, max_age_s=15, first_wait_s=5)
    try:
        view = keeper.view()
        assert view.status == "ready" and view.age_s is not None and view.age_s >= 119
        assert view.refreshing and "fresh probe is running" in view.message
        release.set()
        deadline = time.monotonic() + 10
        while keeper.refreshing and time.monotonic() < deadline:
            time.sleep(0.02)
        view = keeper.view()
        assert view.status == "ready" and view.age_s is not None and view.age_s < 60
        assert calls[:2] == [False, True]  # the operations' cache first, then a real probe
    finally:
        keeper.close()


def test_failed_first_probe_says_so() -> None:
    from federation.interfaces.snapshot_cache import SnapshotKeeper

    def probe(refresh: bool) -> Any:
        raise ConnectionError("no route to the sites")

    keeper = SnapshotKeeper(probe, first_wait_s=5)
    try:
        view = keeper.view()
        assert view.status == "unavailable" and "no route to the sites" in view.message
    finally:
        keeper.close()


def test_mcp_command_is_typer_and_keeps_the_console_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from federation.interfaces import mcp_cli, mcp_run
    from federation.interfaces.cli.main import app

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(mcp_run, "run", lambda **kw: seen.append(kw))
    args = [
        "--transport",
        "http",
        "--port",
        "9999",
        "--no-up",
        "--site",
        "local",
        "--site",
        "delta",
        "--tokens",
        "t.db",
    ]
    r = CliRunner().invoke(app, ["mcp", *args], env={"FEDERATION_TOKEN": "tok"})
    assert r.exit_code == 0, r.output
    with pytest.raises(SystemExit) as ei:
        mcp_cli.standalone([*args, "--service", "http://127.0.0.1:1"])
    assert ei.value.code == 0
    first, second = seen
    assert first["transport"] == "http" and first["port"] == 9999
    assert first["bring_up"] is False and first["sites"] == ["local", "delta"]
    assert first["tokens_db"] == Path("t.db") and first["token"] == "tok"
    assert second["service"] == "http://127.0.0.1:1"
    help_text = CliRunner().invoke(app, ["mcp", "--help"]).output
    assert "--tokens" in help_text and "--transport" in help_text
    r = CliRunner().invoke(app, ["mcp", "--transport", "carrier-pigeon"])
    assert r.exit_code != 0


def test_progress_notifications_over_streamable_http(
    inproc_ops: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over a real transport the client's progressToken rides in the request and each
    notification comes back for it; a wait on an unknown id is still a tool error."""
    from mcp import ClientSession

    from federation.interfaces import mcp_server
    from federation.interfaces.service.app import Guard

    monkeypatch.setattr(mcp_server, "PROGRESS_EVERY_S", 0.2)
    tokens = TokenStore(tmp_path / "tokens.db")
    token = tokens.issue("progress-test").token
    app = Guard(_server(inproc_ops).streamable_http_app(), tokens, max_body_bytes=1_000_000)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def main(url: str) -> tuple[Any, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
            streamable_http_client(url, http_client=http) as (r, w),
            ClientSession(r, w) as s,
        ):
            await s.initialize()
            page = await s.call_tool(
                "await_event",
                {"after": 0, "timeout_s": 1.2},  # this caller has no events: it waits
                progress_callback=on_progress,
            )
            bad = await s.call_tool("await_event", {"task_ids": ["no-such-task"], "timeout_s": 1})
            return page, bad

    with running(app) as base:
        page, bad = anyio.run(main, f"{base}/mcp")
    assert not page.is_error and page.structured_content["timed_out"], page.content
    assert len(progress) >= 2, progress
    assert all(p[1] == 1.2 and p[2] and "waiting for events" in p[2] for p in progress)
    assert bad.is_error and "unknown_task" in bad.content[0].text  # type: ignore[union-attr]
