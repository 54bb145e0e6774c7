"""Groups, transfers and the SSE event stream of the service, and their MCP tools.

On the in-process federation (sites run tasks on threads, no Slurm): the HTTP routes through
FastAPI's TestClient, the event stream and the Python client through a real uvicorn server,
the MCP tools through a real MCP client session connected in-process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from httpx_sse import ServerSentEvent, connect_sse
from inprocess import FixedCoordinator, inprocess_coordinator
from mcp import Client

from federation.core.storage import site_storage
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.app import create_app
from federation.interfaces.service.client import EventStream, ServiceClient, decode_event
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import GroupRequest, TaskRequest
from federation.interfaces.service.ops import LocalOps, Operations
from federation.interfaces.service.server import running
from federation.runtime.events import Event
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

ENV = {"walltime_s": 300}


@pytest.fixture(scope="module")
def storage_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fed-home")


@pytest.fixture(scope="module")
def coord(storage_home: Path) -> Iterator[FixedCoordinator]:
    c = inprocess_coordinator(("local", "delta"))
    c.transfer_backends = LocalCopyBackend(["local", "delta"], storage_home)
    yield c
    c.close()


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> TokenStore:
    return TokenStore(tmp_path_factory.mktemp("svc-groups") / "tokens.db")


@pytest.fixture(scope="module")
def token(tokens: TokenStore) -> str:
    return tokens.issue("groups-test").token


@pytest.fixture(scope="module")
def app(coord: FixedCoordinator, tokens: TokenStore) -> Any:
    return create_app(coord, tokens, refresh_s=3600)


@pytest.fixture(scope="module")
def client(app: Any, token: str) -> Iterator[TestClient]:
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


@pytest.fixture(scope="module")
def base(app: Any) -> Iterator[str]:
    with running(app) as url:
        yield url


def _until(client: TestClient, cursor: int, ids: list[str], kind: str) -> list[dict[str, Any]]:
    """Long-poll on ``ids`` from ``cursor`` until an event of ``kind``; every event seen."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page = client.get(
            "/v1/events", params={"after": cursor, "task_id": ids, "timeout_s": 5}
        ).json()
        seen += page["events"]
        cursor = page["cursor"]
        if any(e["kind"] == kind for e in page["events"]):
            return seen
    raise AssertionError(f"no {kind} within 30 s; saw {[e['kind'] for e in seen]}")


def test_group_over_http_spreads_children_and_reports_them(client: TestClient) -> None:
    body = {
        "objective": "two-system comparison",
        "children": [
            # the first child is the slow one: every child is placed before any ends
            {"function": "report_allocation", "args": [1.0], "envelope": ENV, "name": "a"},
            {"function": "square", "kwargs": {"x": 4}, "envelope": ENV},
        ],
    }
    r = client.post("/v1/groups", json=body)
    assert r.status_code == 202, r.text
    g = r.json()
    assert [c["name"] for c in g["children"]] == ["a", "c2"]
    assert {c["site"] for c in g["children"]} == {"local", "delta"}  # distinct systems
    assert g["objective"] == "two-system comparison" and g["distinct_sites"] is True
    # the group id stands for the group and its children in the event filter
    seen = _until(client, g["cursor"], [g["group_id"]], "group.round_terminal")
    kinds = [e["kind"] for e in seen]
    assert kinds[0] == "task.queued" and "group.submitted" in kinds
    assert kinds.count("task.completed") == 2
    child_ids = {c["task_id"] for c in g["children"]}
    assert {e["task_id"] for e in seen} == child_ids | {g["group_id"]}
    view = client.get(f"/v1/groups/{g['group_id']}").json()
    assert view["done"] and {c["state"] for c in view["children"]} == {"completed"}
    a, c2 = (client.get(f"/v1/tasks/{c['task_id']}").json() for c in view["children"])
    assert a["result"]["value"]["work_iterations"] > 0 and c2["result"]["value"] == 16


@pytest.mark.parametrize(
    ("children", "status", "error", "needle"),
    [
        ([], 422, "bad_request", "at least 1"),
        (
            [
                {"command": "true", "envelope": ENV, "name": "x"},
                {"command": "true", "envelope": ENV, "name": "x"},
            ],
            422,
            "bad_request",
            "repeated: ['x']",
        ),
        (
            [
                {"function": "square", "args": [1], "envelope": ENV},
                {"function": "pickle.loads", "envelope": ENV},
            ],
            422,
            "bad_function",
            "the catalog has",
        ),
        (
            [
                {"command": "true", "envelope": ENV},
                {"command": "true", "envelope": {"sites": ["nowhere"]}},
            ],
            422,
            "unknown_site",
            "child 'c2'",
        ),
        (
            [
                {"command": "true", "envelope": ENV},
                {"command": "true", "envelope": {"gpus_min": 64}, "name": "huge"},
            ],
            409,
            "no_feasible_site",
            "huge",
        ),
    ],
)
def test_refused_groups_submit_nothing(
    client: TestClient,
    coord: FixedCoordinator,
    children: list[dict[str, Any]],
    status: int,
    error: str,
    needle: str,
) -> None:
    before, seq = len(coord.handles()), coord.events.last_seq
    r = client.post("/v1/groups", json={"children": children})
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and needle in r.text, r.text
    assert r.json()["hint"]
    assert len(coord.handles()) == before and coord.events.last_seq == seq


def test_unknown_group_and_transfer_ids(client: TestClient) -> None:
    r = client.get("/v1/groups/nope")
    assert r.status_code == 404 and r.json()["error"] == "unknown_group"
    r = client.get("/v1/events", params={"task_id": "nope", "timeout_s": 0})
    assert r.status_code == 404 and "submit_group" in r.json()["hint"]


def test_move_data_over_http(client: TestClient, storage_home: Path) -> None:
    """Paths are relative to the caller's workspace on each site (the default)."""
    ws = "workspaces/groups-test/default"
    src = site_storage("local", storage_home) / ws / "inputs" / "data.csv"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("a,b\n1,2\n" * 1000)
    body = {
        "source_site": "local",
        "source_path": "inputs/data.csv",
        "dest_site": "delta",
        "dest_path": "staged/data.csv",
        "label": "stage inputs",
    }
    r = client.post("/v1/transfers", json=body)
    assert r.status_code == 202, r.text
    t = r.json()
    assert t["transfer_id"] and t["state"] in ("queued", "active", "succeeded")
    seen = _until(client, t["cursor"], [t["transfer_id"]], "transfer.completed")
    assert seen[0]["kind"] == "transfer.submitted"
    view = client.get(f"/v1/transfers/{t['transfer_id']}").json()
    assert view["done"] and view["state"] == "succeeded", view
    assert view["detail"]["bytes_transferred"] == src.stat().st_size
    assert view["detail"]["label"] == "stage inputs"
    dst = site_storage("delta", storage_home) / ws / "staged" / "data.csv"
    assert dst.read_text() == src.read_text()
    assert view["detail"]["destination"]["path"] == f"{ws}/staged/data.csv"


def test_move_data_paths_from_the_storage_root_and_others_workspaces_refused(
    client: TestClient, coord: FixedCoordinator, storage_home: Path
) -> None:
    shared = site_storage("local", storage_home) / "datasets" / "shared.csv"
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_text("x\n" * 100)
    body = {"source_site": "local", "source_path": "datasets/shared.csv", "dest_site": "delta"}
    r = client.post("/v1/transfers", json=body | {"dest_path": "in.csv", "paths": "storage"})
    assert r.status_code == 202, r.text
    _until(client, r.json()["cursor"], [r.json()["transfer_id"]], "transfer.completed")
    assert (site_storage("delta", storage_home) / "in.csv").read_text() == shared.read_text()
    theirs = site_storage("local", storage_home) / "workspaces" / "bob" / "default" / "secret"
    theirs.parent.mkdir(parents=True, exist_ok=True)
    theirs.write_text("bob's\n")
    seq = coord.events.last_seq
    for change in (
        {"source_path": "workspaces/bob/default/secret", "dest_path": "mine", "paths": "storage"},
        {"source_path": "datasets/shared.csv", "dest_path": "workspaces/bob/x", "paths": "storage"},
        {"source_path": str(theirs), "dest_path": "mine", "paths": "storage"},
        {"source_path": "../../bob/default/secret", "dest_path": "mine"},
        {"source_path": "/etc/passwd", "dest_path": "mine"},
    ):
        r = client.post("/v1/transfers", json=body | change)
        assert r.status_code in (403, 422), (change, r.text)
        assert r.json()["error"] in ("not_your_workspace", "bad_path"), r.text
        if "workspaces/bob" in str(change) and not change["source_path"].startswith("/"):
            assert r.status_code == 403 and "another caller's workspace" in r.json()["message"]
    assert coord.events.last_seq == seq  # nothing started
    assert not (site_storage("delta", storage_home) / "workspaces" / "bob").exists()


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"source_path": "../../etc/passwd"}, 422, "bad_path"),
        ({"source_path": "no/such/file"}, 404, "data_not_found"),
        ({"dest_site": "nowhere"}, 422, "unknown_site"),
        ({"sync_level": "sometimes"}, 422, "bad_request"),
        ({"deadline_s": -1}, 422, "bad_request"),
    ],
)
def test_refused_transfers_move_nothing(
    client: TestClient, coord: FixedCoordinator, change: dict[str, Any], status: int, error: str
) -> None:
    body = {"source_site": "local", "source_path": "x", "dest_site": "delta", "dest_path": "y"}
    seq = coord.events.last_seq
    r = client.post("/v1/transfers", json=body | change)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error and r.json()["message"], r.text
    assert coord.events.last_seq == seq
    r = client.get("/v1/transfers/nope")
    assert r.status_code == 404 and r.json()["error"] == "unknown_transfer"


# --- the event stream (SSE) and the Python client ---------------------------------------------


def test_decode_event_reads_events_and_skips_keep_alives() -> None:
    ev = Event(seq=3, kind="task.queued", task_id="t", at="2026-01-01T00:00:00Z")  # type: ignore[arg-type]
    msg = ServerSentEvent(event="task.queued", data=ev.model_dump_json(), id="3")
    assert decode_event(msg) == ev
    assert decode_event(ServerSentEvent(id="3")) is None  # a keep-alive after an event
    err = '{"error": "too_many_waiters", "message": "busy", "hint": "retry"}'
    with pytest.raises(OpsError, match="too_many_waiters"):
        decode_event(ServerSentEvent(event="error", data=err))


def test_stream_wire_format(base: str, token: str) -> None:
    """The raw stream: an opening comment whose id is the cursor, then one message per event
    with ``id:`` its seq, ``event:`` its kind and ``data:`` the event as JSON."""
    sc = ServiceClient(base, token)
    try:
        sub = sc.submit(TaskRequest(function="square", args=[4], envelope=ENV))  # type: ignore[arg-type]
        headers = {"Authorization": f"Bearer {token}"}
        with (
            httpx.Client(base_url=base, headers=headers, timeout=30) as http,
            connect_sse(
                http,
                "GET",
                "/v1/events/stream",
                params={"task_id": sub.task_id},
                headers={"Last-Event-ID": str(sub.cursor)},
            ) as source,
        ):
            assert source.response.status_code == 200
            assert source.response.headers["content-type"].startswith("text/event-stream")
            assert source.response.headers["cache-control"] == "no-cache"
            messages = []
            for msg in source.iter_sse():
                messages.append(msg)
                if msg.event == "task.completed":
                    break
        opening, *events = messages
        assert opening.id == str(sub.cursor) and opening.data == ""
        assert [m.event for m in events] == ["task.queued", "task.started", "task.completed"]
        for m in events:
            assert m.id == str(m.json()["seq"]) and int(m.id) > sub.cursor
            assert m.json()["kind"] == m.event and m.json()["task_id"] == sub.task_id
    finally:
        sc.close()


def test_stream_sends_keep_alives(base: str, token: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing to say, the stream still sends ``: keep-alive`` comments."""
    from federation.interfaces.service import app as app_module

    monkeypatch.setattr(app_module, "STREAM_HEARTBEAT_S", 0.2)
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    sc = ServiceClient(base, token)
    last = sc.events_now(0, timeout_s=0).last_seq
    sc.close()
    lines: list[str] = []
    with httpx.stream(
        "GET",
        f"{base}/v1/events/stream",
        params={"after": last, "kinds": "task.failed"},
        headers=headers,
        timeout=10,
    ) as r:
        for line in r.iter_lines():
            lines.append(line)
            if line == ": keep-alive":
                break
    assert lines[0] == f": federation events after {last}" and lines[1] == f"id: {last}"
    assert lines[-1] == ": keep-alive"


def test_stream_delivers_events_live_and_resumes_from_a_cursor(base: str, token: str) -> None:
    sc = ServiceClient(base, token)
    try:
        sub = sc.submit(TaskRequest(function="square", args=[5], envelope=ENV))  # type: ignore[arg-type]
        got: list[Event] = []
        for ev in sc.stream_events(sub.cursor, [sub.task_id]):
            got.append(ev)
            if ev.kind == "task.completed":
                break
        assert [e.kind for e in got] == ["task.queued", "task.started", "task.completed"]
        assert all(e.task_id == sub.task_id for e in got)
        # resuming after the first event gives exactly the rest: nothing missed or repeated
        rest: list[Event] = []
        for ev in sc.stream_events(got[0].seq, [sub.task_id]):
            rest.append(ev)
            if ev.kind == "task.completed":
                break
        assert rest == got[1:]
        assert sc.status(sub.task_id).result.value == 25  # type: ignore[union-attr]
        with pytest.raises(OpsError) as ei:
            next(sc.stream_events(0, ["no-such-task"]))
        assert ei.value.status == 404
    finally:
        sc.close()
    r = httpx.get(f"{base}/v1/events/stream", timeout=5)
    assert r.status_code == 401


def test_event_stream_thread_dispatches_to_subscribers(base: str, token: str) -> None:
    sc = ServiceClient(base, token)
    first = sc.events_now(0, timeout_s=0).last_seq
    stream = EventStream(sc, after=first)
    try:
        sub = sc.submit(TaskRequest(command="true", envelope=ENV))  # type: ignore[arg-type]
        done = threading.Event()
        kinds: list[str] = []

        def on(ev: Event) -> None:
            kinds.append(ev.kind)
            if ev.kind in ("task.completed", "task.failed"):
                done.set()

        stream.subscribe(sub.task_id, on)  # after submit: early events are replayed
        assert done.wait(30), kinds
        assert kinds[0] == "task.queued" and kinds[-1] in ("task.completed", "task.failed")
    finally:
        stream.close()
        sc.close()


def test_client_group_round_trip(base: str, token: str) -> None:
    sc = ServiceClient(base, token)
    try:
        req = GroupRequest(
            children=[
                TaskRequest(function="report_allocation", args=[1.0], envelope=ENV),  # type: ignore[arg-type]
                TaskRequest(function="square", args=[7], envelope=ENV),  # type: ignore[arg-type]
            ]
        )
        g = sc.submit_group(req)
        assert len(g.children) == 2
        for ev in sc.stream_events(g.cursor, [g.group_id]):
            if ev.kind == "group.round_terminal":
                break
        view = sc.group(g.group_id)
        assert view.done and all(c.state == "completed" for c in view.children)
    finally:
        sc.close()


# --- MCP tools for groups and transfers (a real MCP client, in-process) -----------------------


def test_mcp_group_tools(coord: FixedCoordinator) -> None:
    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Operations:
        return ops

    server = build_server(get_ops)

    async def main() -> dict[str, Any]:
        async with Client(server) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert {"submit_group", "get_group", "move_data", "get_transfer"} <= set(tools)
            sg = tools["submit_group"]
            assert "returns AT ONCE" in (sg.description or "")
            assert sg.input_schema["required"] == ["children"]
            assert "TaskRequest" in str(sg.input_schema)
            assert sg.output_schema and "group_id" in str(sg.output_schema)
            mv = tools["move_data"].input_schema
            assert set(mv["required"]) == {"source_site", "source_path", "dest_site", "dest_path"}
            assert "checksum" in str(mv["properties"]["sync_level"])

            bad = await c.call_tool("submit_group", {"children": []})
            assert bad.is_error
            bad = await c.call_tool(
                "submit_group",
                {"children": [{"command": "true", "envelope": {"gpus_min": 64}}]},
            )
            assert bad.is_error and "no_feasible_site" in bad.content[0].text  # type: ignore[union-attr]

            res = await c.call_tool(
                "submit_group",
                {
                    "children": [
                        {"function": "report_allocation", "args": [1.0], "envelope": ENV},
                        {"function": "square", "args": [3], "envelope": ENV},
                    ],
                    "objective": "mcp group",
                },
            )
            assert not res.is_error, res.content
            g = res.structured_content
            assert g is not None
            cursor, kinds = g["cursor"], list[str]()
            while "group.round_terminal" not in kinds:
                page = await c.call_tool(
                    "await_event",
                    {"after": cursor, "task_ids": [g["group_id"]], "timeout_s": 10},
                )
                assert not page.is_error, page.content
                doc = page.structured_content
                assert doc is not None and not doc["timed_out"], kinds
                cursor = doc["cursor"]
                kinds += [e["kind"] for e in doc["events"]]
            view = await c.call_tool("get_group", {"group_id": g["group_id"]})
            final: dict[str, Any] | None = view.structured_content
            assert final is not None
            missing = await c.call_tool("get_group", {"group_id": "nope"})
            assert missing.is_error and "unknown_group" in missing.content[0].text  # type: ignore[union-attr]
            return final

    view = anyio.run(main)
    ops.cache.close()
    assert view["done"] and {c["state"] for c in view["children"]} == {"completed"}


def test_mcp_move_data_tools(coord: FixedCoordinator, storage_home: Path) -> None:
    src = site_storage("delta", storage_home) / "results"
    src.mkdir(parents=True, exist_ok=True)
    for i in range(3):
        (src / f"part-{i}.txt").write_text(f"part {i}\n")
    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Operations:
        return ops

    async def main() -> tuple[dict[str, Any], list[str]]:
        async with Client(build_server(get_ops)) as c:
            bad = await c.call_tool(
                "move_data",
                {
                    "source_site": "delta",
                    "source_path": "../../../etc",
                    "dest_site": "local",
                    "dest_path": "x",
                },
            )
            assert bad.is_error and "bad_path" in bad.content[0].text  # type: ignore[union-attr]
            res = await c.call_tool(
                "move_data",
                {
                    "source_site": "delta",
                    "source_path": "results",
                    "dest_site": "local",
                    "dest_path": "back/results",
                    "sync_level": "size",
                    "paths": "storage",  # shared data under the storage root
                },
            )
            assert not res.is_error, res.content
            t = res.structured_content
            assert t is not None
            cursor, kinds = t["cursor"], list[str]()
            while not {"transfer.completed", "transfer.failed"} & set(kinds):
                page = await c.call_tool(
                    "await_event",
                    {"after": cursor, "task_ids": [t["transfer_id"]], "timeout_s": 10},
                )
                doc = page.structured_content
                assert doc is not None and not doc["timed_out"], kinds
                cursor = doc["cursor"]
                kinds += [e["kind"] for e in doc["events"]]
            view = await c.call_tool("get_transfer", {"transfer_id": t["transfer_id"]})
            assert view.structured_content is not None
            return view.structured_content, kinds

    view, kinds = anyio.run(main)
    ops.cache.close()
    assert kinds[0] == "transfer.submitted" and kinds[-1] == "transfer.completed", kinds
    assert view["state"] == "succeeded" and view["detail"]["files"] == 3
    back = site_storage("local", storage_home) / "back" / "results"
    assert sorted(p.name for p in back.iterdir()) == ["part-0.txt", "part-1.txt", "part-2.txt"]


def test_service_client_is_an_operations(tmp_path: Path) -> None:
    """The MCP server sits on either: both have every operation the tools call."""
    needed = {
        "inspect",
        "functions",
        "draft",
        "submit",
        "status",
        "cancel",
        "submit_group",
        "group",
        "move_data",
        "transfer",
        "events",
        "close",
    }
    for cls in (LocalOps, ServiceClient):
        assert needed <= set(dir(cls)), cls


def test_mcp_group_over_streamable_http(coord: FixedCoordinator, tokens: TokenStore) -> None:
    """The group tools through a real MCP client over streamable HTTP, behind the tokens."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from federation.interfaces.service.app import Guard

    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Operations:
        return ops

    token = tokens.issue("mcp-http").token
    app = Guard(build_server(get_ops).streamable_http_app(), tokens, max_body_bytes=1_000_000)

    async def main(url: str) -> tuple[dict[str, Any], list[str]]:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=30)) as http,
            streamable_http_client(url, http_client=http) as (r, w),
            ClientSession(r, w) as s,
        ):
            await s.initialize()
            res = await s.call_tool(
                "submit_group",
                {
                    "children": [
                        {"function": "report_allocation", "args": [1.0], "envelope": ENV},
                        {"function": "square", "args": [8], "envelope": ENV},
                    ]
                },
            )
            assert not res.is_error, res.content
            g = res.structured_content
            assert g is not None
            cursor, kinds = g["cursor"], list[str]()
            while "group.round_terminal" not in kinds:
                page = await s.call_tool(
                    "await_event", {"after": cursor, "task_ids": [g["group_id"]], "timeout_s": 10}
                )
                doc = page.structured_content
                assert doc is not None and not doc["timed_out"], kinds
                cursor = doc["cursor"]
                kinds += [e["kind"] for e in doc["events"]]
            view = await s.call_tool("get_group", {"group_id": g["group_id"]})
            final: dict[str, Any] | None = view.structured_content
            assert final is not None
            return final, kinds

    with running(app) as base:
        assert httpx.post(f"{base}/mcp", json={}, timeout=5).status_code == 401
        view, kinds = anyio.run(main, f"{base}/mcp")
    ops.cache.close()
    assert view["done"] and kinds.count("task.completed") == 2
