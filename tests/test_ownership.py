"""One caller's work is invisible to, and unchangeable by, another caller.

Three token holders share one coordinator service: ``alice`` and ``bob`` (plain callers)
and ``ops`` (``operator: true``); ``carol`` must have every task approved. Through every
interface (the HTTP service, the MCP server over HTTP per token and over stdio, the CLI
against ``--service``, the Jupyter executor against the service), bob's reads, waits and
cancels of alice's tasks, groups, transfers and results, and his guesses of ids (random
and sequential), answer exactly as ids that do not exist; the event log and stream show
each caller only their own events, on a gap-free cursor of their own. Operators see and
cancel everything, and each such access is in the audit log.

``ROUTE_CHECKS`` and ``TOOL_CHECKS`` say how each route and MCP tool is kept apart; the
coverage tests fail when the app or the MCP server gains one that is not in them, so a
new route cannot be forgotten. No Slurm: the sites run tasks on threads (tests/inprocess.py).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import typer
from fastapi.routing import APIRoute
from inprocess import FixedCoordinator, ThreadSite
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.interfaces.cli.tasks import EXIT_ERROR, EXIT_OK, register
from federation.interfaces.jupyter.executor import FederatedExecutor
from federation.interfaces.jupyter.remote import RemoteTaskFuture
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.app import Guard, create_app
from federation.interfaces.service.client import ServiceClient
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import SubmitResponse
from federation.interfaces.service.ops import LocalOps, Operations
from federation.interfaces.service.server import running
from federation.runtime.events import Event
from federation.runtime.store import Store
from federation.security.audit import AuditLog
from federation.security.policy import CallerPolicy, PolicyGate, PolicySet
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

DONE = {"walltime_s": 300, "sites": ["local"]}
"""Tasks here run at once."""
QUEUED = {"walltime_s": 300, "sites": ["delta"]}
"""Tasks here stay queued (the site waits for a gate the tests never open)."""
NOT_FOUND = {"unknown_task", "unknown_group", "unknown_transfer"}

# How each route keeps callers apart, and the test that tries to break it:
#   record: another caller's id answers 404 like an unknown one (test_record_route_*)
#   creates: what it creates belongs to the caller (test_created_work_belongs_to_its_caller)
#   lists / events: only the caller's own (test_task_list_*, test_event_*)
#   shared: the sites and the catalog, the same for everyone (test_shared_routes_*)
#   operator: operators only, 403 for others (test_operator_routes_refuse_callers)
#   self: the caller's own login only: no id, nobody else's tokens (test_globus_identity.py)
#   public: no token, no caller data (/v1/health, the API's own docs)
ROUTE_CHECKS: dict[tuple[str, str], str] = {
    ("GET", "/v1/health"): "public",
    ("GET", "/openapi.json"): "public",
    ("GET", "/docs"): "public",
    ("GET", "/docs/oauth2-redirect"): "public",
    ("GET", "/redoc"): "public",
    ("GET", "/v1/federation"): "shared",
    ("GET", "/v1/functions"): "shared",
    ("POST", "/v1/envelopes/draft"): "shared",
    ("POST", "/v1/tasks"): "creates",
    ("POST", "/v1/groups"): "creates",
    ("POST", "/v1/transfers"): "creates",
    ("GET", "/v1/tasks"): "lists",
    ("GET", "/v1/tasks/{task_id}"): "record",
    ("POST", "/v1/tasks/{task_id}/cancel"): "record",
    ("GET", "/v1/groups/{group_id}"): "record",
    ("GET", "/v1/transfers/{transfer_id}"): "record",
    ("GET", "/v1/events"): "events",
    ("GET", "/v1/events/stream"): "events",
    ("GET", "/v1/policy/pending"): "operator",
    ("POST", "/v1/policy/{task_id}/approve"): "operator",
    ("POST", "/v1/policy/{task_id}/reject"): "operator",
    ("POST", "/v1/logout"): "self",
}
RECORD_ROUTES = [k for k, v in ROUTE_CHECKS.items() if v == "record"]

# The same for the MCP tools (record:<kind> names what the tool's id argument is).
TOOL_CHECKS: dict[str, str] = {
    "inspect_federation": "shared",
    "list_functions": "shared",
    "draft_envelope": "shared",
    "submit_task": "creates",
    "submit_group": "creates",
    "move_data": "creates",
    "get_result": "record:task",
    "cancel": "record:queued",
    "get_group": "record:group",
    "get_transfer": "record:transfer",
    "await_event": "events",
}
RECORD_TOOLS = {k: v.split(":")[1] for k, v in TOOL_CHECKS.items() if v.startswith("record:")}
ID_ARG = {"task": "task_id", "queued": "task_id", "group": "group_id", "transfer": "transfer_id"}


@dataclass
class World:
    base: str
    mcp_url: str
    tokens: dict[str, str]
    coord: FixedCoordinator
    ops: LocalOps
    audit: AuditLog
    home: Path
    alice: dict[str, str] = field(default_factory=dict)
    """Alice's records by kind: task (done), queued (a task still queued), group, transfer."""

    def token(self, who: str) -> str:
        return self.tokens[who]

    def http(self, who: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {self.tokens[who]}"}, timeout=30
        )

    def client(self, who: str) -> ServiceClient:
        return ServiceClient(self.base, self.tokens[who])

    def operator_rows(self, owner: str, record_id: str | None = None) -> list[Any]:
        rows = self.audit.records(caller=owner, task_id=record_id)
        return [r for r in rows if r.decision == "operator_access"]


def seed_records(w: Any) -> None:
    """Alice's records of every kind (``w.alice``: a finished task, a queued one, a group,
    a transfer) and one finished task of Bob's, all through the service."""
    with w.http("alice") as a:
        done = _submit(a, DONE, 4)
        queued = _submit(a, QUEUED, 5)
        g = a.post(
            "/v1/groups",
            json={"children": [{"function": "square", "args": [1], "envelope": DONE}]},
        )
        assert g.status_code == 202, g.text
        t = a.post(
            "/v1/transfers",
            json={
                "source_site": "local",
                "source_path": "alice.txt",
                "dest_site": "delta",
                "dest_path": "from-alice.txt",
            },
        )
        assert t.status_code == 202, t.text
        w.alice = {
            "task": done["task_id"],
            "queued": queued["task_id"],
            "group": g.json()["group_id"],
            "transfer": t.json()["transfer_id"],
        }
        ids = {done["task_id"], g.json()["group_id"], t.json()["transfer_id"]}
        _wait(a, 0, ids, {"task.completed", "group.round_terminal", "transfer.completed"})
    with w.http("bob") as b:
        mine = _submit(b, DONE, 6)
        _wait(b, mine["cursor"], {mine["task_id"]}, {"task.completed"})


def _submit(c: httpx.Client, envelope: dict[str, Any], x: int = 3) -> dict[str, Any]:
    r = c.post("/v1/tasks", json={"function": "square", "args": [x], "envelope": envelope})
    assert r.status_code == 202, r.text
    return dict(r.json())


def _wait(c: httpx.Client, cursor: int, ids: set[str], kinds: set[str]) -> list[dict[str, Any]]:
    """Long-poll ``c``'s own events from ``cursor`` until each id has an event of ``kinds``."""
    seen: list[dict[str, Any]] = []
    left = set(ids)
    for _ in range(30):
        page = c.get("/v1/events", params={"after": cursor, "timeout_s": 5}).json()
        seen += page["events"]
        cursor = page["cursor"]
        left -= {e["task_id"] for e in page["events"] if e["kind"] in kinds}
        if not left:
            return seen
    raise AssertionError(f"no {kinds} for {left}; saw {[e['kind'] for e in seen]}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    home = tmp_path_factory.mktemp("ownership")
    tokens = TokenStore(home / "tokens.db")
    issued = {
        "alice": tokens.issue("alice").token,
        "bob": tokens.issue("bob").token,
        "ops": tokens.issue("ops", CallerPolicy(operator=True)).token,
        "carol": tokens.issue("carol", CallerPolicy(require_approval=True)).token,
    }
    audit = AuditLog(home / "audit.db")
    specs = {s.name: s for s in load_sites(["local", "delta"])}
    never = threading.Event()
    sites = [ThreadSite(specs["local"]), ThreadSite(specs["delta"], gate=never)]
    store = Store(home / "coordinator.db")
    coord = FixedCoordinator(
        sites,
        policy="earliest-start",  # one copy per task: bob's tasks stay where they are
        store=store,
        gate=PolicyGate(PolicySet(), audit, tokens=tokens),
        transfer_backends=LocalCopyBackend(["local", "delta"], home),
    )
    for s in sites:
        s.coord = coord
    for who in ("alice", "bob"):  # in each one's own workspace (move_data's paths)
        ws = site_storage("local", home) / "workspaces" / who / "default"
        ws.mkdir(parents=True, exist_ok=True)
        (ws / f"{who}.txt").write_text(f"{who}'s data\n")
    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Operations:
        return ops

    mcp_app = Guard(
        build_server(get_ops).streamable_http_app(host="127.0.0.1"), tokens, max_body_bytes=10**6
    )
    with running(create_app(coord, tokens, ops=ops)) as base, running(mcp_app) as mcp_base:
        w = World(base, f"{mcp_base}/mcp", issued, coord, ops, audit, home)
        seed_records(w)
        yield w
    coord.close()
    store.close()


def _guesses(real_id: str) -> list[str]:
    """Ids a curious caller might try: neighbours of a real id, small numbers, random ids."""
    last = int(real_id[-1], 16)
    near = [real_id[:-1] + format((last + d) % 16, "x") for d in (1, -1)]
    return [*near, "1", "2", "0", str(uuid.uuid4()), str(uuid.uuid4())]


def _path(route: tuple[str, str], record_id: str) -> str:
    return re.sub(r"\{[a-z_]+\}", record_id, route[1])


def _kind_of(route: tuple[str, str]) -> str:
    if route[1].startswith("/v1/groups"):
        return "group"
    if route[1].startswith("/v1/transfers"):
        return "transfer"
    return "queued" if route[1].endswith("/cancel") else "task"


def _same_body(a: dict[str, Any], b: dict[str, Any], a_id: str, b_id: str) -> bool:
    """The two answers are the same but for the id each names (nothing tells them apart)."""
    return str(a).replace(a_id, "ID") == str(b).replace(b_id, "ID")


# --- coverage: every route and tool has a check ----------------------------------------------


def test_every_route_has_an_ownership_check(world: World) -> None:
    app = create_app(world.coord, TokenStore(world.home / "tokens.db"), ops=world.ops)
    # the API's routes (included routers too) as the OpenAPI document lists them, and the
    # app's own non-API routes (its docs)
    routes = {
        (method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item
    }
    for r in app.routes:
        for method in getattr(r, "methods", None) or ():
            if method not in ("HEAD", "OPTIONS") and getattr(r, "path", None):
                routes.add((method, r.path))  # type: ignore[attr-defined]
    missing = sorted(routes - set(ROUTE_CHECKS))
    assert not missing, (
        f"routes without an ownership check: {missing}; add each to ROUTE_CHECKS with the "
        "check that keeps callers apart there, and a test that tries to break it"
    )
    stale = sorted(set(ROUTE_CHECKS) - routes)
    assert not stale, f"ROUTE_CHECKS names routes the app no longer has: {stale}"
    api = {(m, r.path) for r in app.routes if isinstance(r, APIRoute) for m in r.methods}
    public = {k for k in api if ROUTE_CHECKS[k] == "public"}
    assert public == {("GET", "/v1/health")}, public  # the one API route without a token


def test_every_mcp_tool_has_an_ownership_check(world: World) -> None:
    async def names() -> set[str]:
        async with Client(build_server(_ops_of(world))) as c:
            return {t.name for t in (await c.list_tools()).tools}

    tools = anyio.run(names)
    missing = sorted(tools - set(TOOL_CHECKS))
    assert not missing, f"MCP tools without an ownership check: {missing}; add them to TOOL_CHECKS"
    assert not set(TOOL_CHECKS) - tools, sorted(set(TOOL_CHECKS) - tools)


def _ops_of(world: World) -> Any:
    async def get_ops() -> Operations:
        return world.ops

    return get_ops


# --- HTTP: records --------------------------------------------------------------------------


@pytest.mark.parametrize("route", RECORD_ROUTES, ids=lambda r: f"{r[0]} {r[1]}")
def test_record_route_refuses_another_caller_like_an_unknown_id(
    world: World, route: tuple[str, str]
) -> None:
    kind = _kind_of(route)
    with world.http("alice") as alice:
        # cancelling is tried for real: on a fresh queued task each time
        rid = _submit(alice, QUEUED)["task_id"] if kind == "queued" else world.alice[kind]
        with world.http("bob") as bob:
            theirs = bob.request(route[0], _path(route, rid))
            assert theirs.status_code == 404, theirs.text
            assert theirs.json()["error"] in NOT_FOUND
            for guess in _guesses(rid):
                r = bob.request(route[0], _path(route, guess))
                assert r.status_code == 404, (guess, r.text)
                assert _same_body(theirs.json(), r.json(), rid, guess), (theirs.json(), r.json())
        if kind == "queued":  # bob's cancel changed nothing
            assert alice.get(f"/v1/tasks/{rid}").json()["state"] == "queued"
        before = len(world.operator_rows("alice", rid))
        if kind != "queued":
            assert alice.request(route[0], _path(route, rid)).status_code == 200
            assert len(world.operator_rows("alice", rid)) == before  # her own: not audited
    with world.http("ops") as op:
        r = op.request(route[0], _path(route, rid))
        assert r.status_code == 200, r.text
    rows = world.operator_rows("alice", rid)
    assert len(rows) == before + 1 and rows[-1].actor == "ops", rows
    if kind == "queued":
        assert r.json()["cancelled"] is True and "cancel" in rows[-1].what
        with world.http("alice") as alice:
            st = alice.get(f"/v1/tasks/{rid}").json()
            assert st["state"] == "failed" and "cancel" in st["result"]["error"]


def test_task_list_shows_only_the_callers_own(world: World) -> None:
    with world.http("bob") as bob, world.http("alice") as alice, world.http("ops") as op:
        mine = {t["task_id"] for t in bob.get("/v1/tasks").json()}
        hers = {t["task_id"] for t in alice.get("/v1/tasks").json()}
        assert mine and hers and not mine & hers
        assert {world.alice["task"], world.alice["queued"]} <= hers
        everyone = op.get("/v1/tasks").json()
        assert mine | hers <= {t["task_id"] for t in everyone}
        assert {t["owner"] for t in everyone} >= {"alice", "bob"}
    listed = [r for r in world.operator_rows("bob") if r.task_kind == "tasks"]
    assert listed and listed[-1].actor == "ops"


def test_created_work_belongs_to_its_caller(world: World) -> None:
    """What bob creates (task, group, transfer) alice cannot see, and bob can."""
    with world.http("bob") as bob:
        t = _submit(bob, DONE)["task_id"]
        g = bob.post(
            "/v1/groups",
            json={"children": [{"function": "square", "args": [2], "envelope": DONE}]},
        ).json()["group_id"]
        x = bob.post(
            "/v1/transfers",
            json={
                "source_site": "local",
                "source_path": "bob.txt",
                "dest_site": "delta",
                "dest_path": "from-bob.txt",
            },
        ).json()["transfer_id"]
        for path in (f"/v1/tasks/{t}", f"/v1/groups/{g}", f"/v1/transfers/{x}"):
            assert bob.get(path).status_code == 200
    with world.http("alice") as alice:
        for path in (f"/v1/tasks/{t}", f"/v1/groups/{g}", f"/v1/transfers/{x}"):
            assert alice.get(path).status_code == 404, path
    for rid in (t, g, x):
        assert world.coord.events.owner_of(rid) == "bob"
    row = world.coord.store.task(t) if world.coord.store else None
    assert row is not None and row["owner"] == "bob"


# --- HTTP: events -----------------------------------------------------------------------------


def _gap_free(events: list[dict[str, Any]]) -> bool:
    return [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_event_log_shows_each_caller_only_their_own_on_a_gap_free_cursor(world: World) -> None:
    with world.http("bob") as bob, world.http("alice") as alice:
        b = bob.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()
        a = alice.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()
    alice_ids = set(world.alice.values())
    assert b["events"] and a["events"]
    assert {e["owner"] for e in b["events"]} == {"bob"}
    assert not {e["task_id"] for e in b["events"]} & alice_ids
    assert {e["owner"] for e in a["events"]} == {"alice"}
    assert _gap_free(b["events"]) and _gap_free(a["events"])
    assert b["last_seq"] >= b["cursor"] == b["events"][-1]["seq"]
    # a waiting bob is not woken by alice's events, and his cursor does not move for them
    with world.http("alice") as alice, world.http("bob") as bob:
        before = bob.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()["last_seq"]
        sub = _submit(alice, DONE)
        _wait(alice, sub["cursor"], {sub["task_id"]}, {"task.completed"})
        page = bob.get("/v1/events", params={"after": before, "timeout_s": 0.5}).json()
        assert page["timed_out"] and page["events"] == [] and page["last_seq"] == before


def test_event_filters_on_another_callers_ids_answer_as_unknown(world: World) -> None:
    with world.http("bob") as bob:
        for rid in [*world.alice.values(), *_guesses(world.alice["task"])]:
            for path in ("/v1/events", "/v1/events/stream"):
                r = bob.get(path, params={"after": 0, "task_id": rid, "timeout_s": 0})
                assert r.status_code == 404, (path, rid, r.text)
                assert r.json()["error"] == "unknown_task"
    sc = world.client("bob")
    try:
        with pytest.raises(OpsError) as ei:
            next(iter(sc.stream_events(0, [world.alice["group"]])))
        assert ei.value.status == 404
    finally:
        sc.close()


def test_event_stream_carries_only_the_callers_own_events(world: World) -> None:
    sc = world.client("bob")
    stop = threading.Event()
    timer = threading.Timer(20, stop.set)
    timer.start()
    try:
        last = sc.events_now(0, timeout_s=0).last_seq
        got: list[Event] = []
        for ev in sc.stream_events(0, stop=stop):
            got.append(ev)
            if ev.seq >= last:
                break
    finally:
        timer.cancel()
        sc.close()
    assert [e.seq for e in got] == list(range(1, last + 1))
    assert {e.owner for e in got} == {"bob"}


def test_operator_sees_every_callers_events_and_is_audited(world: World) -> None:
    with world.http("ops") as op:
        page = op.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()
        assert {e["owner"] for e in page["events"]} >= {"alice", "bob"}
        seqs = [e["seq"] for e in page["events"]]
        assert seqs == sorted(seqs) and page["last_seq"] == world.coord.events.last_seq
        mine = op.get(
            "/v1/events", params={"after": 0, "task_id": world.alice["task"], "timeout_s": 0}
        ).json()
        assert {e["task_id"] for e in mine["events"]} == {world.alice["task"]}
    read = [r for r in world.operator_rows("alice") if r.task_kind == "events"]
    assert read and read[-1].actor == "ops"


# --- HTTP: shared and operator routes ---------------------------------------------------------


def test_shared_routes_answer_the_same_for_every_caller(world: World) -> None:
    with world.http("alice") as alice, world.http("bob") as bob:
        for method, path, body in (
            ("GET", "/v1/functions", None),
            ("POST", "/v1/envelopes/draft", {"description": "tokenize a csv"}),
            ("GET", "/v1/federation?view=summary", None),
        ):
            ra, rb = alice.request(method, path, json=body), bob.request(method, path, json=body)
            assert ra.status_code == rb.status_code == 200
            if "federation" in path:
                ra_sites = [s["site"] for s in ra.json()["sites"]]
                assert ra_sites == [s["site"] for s in rb.json()["sites"]]
            else:
                assert ra.json() == rb.json()
    assert httpx.get(f"{world.base}/v1/health").json()["ok"] is True


def test_operator_routes_refuse_callers(world: World) -> None:
    """Carol's task is held for approval: bob may neither see nor decide it."""
    with world.http("carol") as carol:
        held = _submit(carol, DONE)
        assert held["state"] == "held"
        rid = held["task_id"]
        with world.http("bob") as bob:
            assert bob.get("/v1/policy/pending").status_code == 403
            assert bob.post(f"/v1/policy/{rid}/approve").status_code == 403
            assert bob.post(f"/v1/policy/{rid}/reject", json={"reason": "x"}).status_code == 403
            assert bob.get(f"/v1/tasks/{rid}").status_code == 404
            assert bob.post(f"/v1/tasks/{rid}/cancel").status_code == 404
        assert carol.get("/v1/policy/pending").status_code == 403  # not her own decision
        assert carol.get(f"/v1/tasks/{rid}").json()["state"] == "held"
    with world.http("ops") as op:
        assert rid in {h["task_id"] for h in op.get("/v1/policy/pending").json()}
        assert op.post(f"/v1/policy/{rid}/reject", json={"reason": "test"}).status_code == 200


# --- MCP: over HTTP (per token) and over stdio ------------------------------------------------


async def _mcp(world: Any, who: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """``calls`` through the MCP server over HTTP, as ``who`` (``world.token(who)``)."""
    headers = {"Authorization": f"Bearer {world.token(who)}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
        streamable_http_client(world.mcp_url, http_client=http) as (r, w),
        ClientSession(r, w) as s,
    ):
        await s.initialize()
        return [await s.call_tool(name, args) for name, args in calls]


def _text(res: Any) -> str:
    return str(res.content[0].text)


def check_mcp_record_tool_refuses_bob(world: Any, tool: str) -> tuple[str, Any]:
    """Bob's MCP calls of ``tool`` with Alice's record id (and made-up ones) are refused
    alike; Alice's own call works. Returns the record's kind and her call's result."""
    kind = RECORD_TOOLS[tool]
    if kind == "queued":
        with world.http("alice") as alice:
            rid = _submit(alice, QUEUED)["task_id"]
    else:
        rid = world.alice[kind]
    arg = ID_ARG[kind]
    calls = [(tool, {arg: rid})] + [(tool, {arg: g}) for g in _guesses(rid)]
    results = anyio.run(_mcp, world, "bob", calls)
    for (_, args), res in zip(calls, results, strict=True):
        assert res.is_error, (args, res.content)
        assert re.search(r"\bunknown_(task|group|transfer): ", _text(res)), _text(res)
        # the same words for her id as for a made-up one
        assert _text(res).replace(args[arg], "ID") == _text(results[0]).replace(rid, "ID")
    if kind == "queued":
        with world.http("alice") as alice:
            assert alice.get(f"/v1/tasks/{rid}").json()["state"] == "queued"
    (mine,) = anyio.run(_mcp, world, "alice", [(tool, {arg: rid})])
    assert not mine.is_error, _text(mine)
    return kind, mine


@pytest.mark.parametrize("tool", sorted(RECORD_TOOLS))
def test_mcp_http_record_tools_refuse_another_callers_ids(world: World, tool: str) -> None:
    kind, mine = check_mcp_record_tool_refuses_bob(world, tool)
    if kind == "queued":
        assert mine.structured_content["cancelled"] is True


def test_mcp_http_await_event_shows_only_the_tokens_caller(world: World) -> None:
    calls = [
        ("await_event", {"after": 0, "timeout_s": 0}),
        ("await_event", {"after": 0, "task_ids": [world.alice["task"]], "timeout_s": 0}),
        ("await_event", {"after": 0, "task_ids": [world.alice["group"]], "timeout_s": 0}),
    ]
    page, by_task, by_group = anyio.run(_mcp, world, "bob", calls)
    events = page.structured_content["events"]
    assert events and {e["owner"] for e in events} == {"bob"} and _gap_free(events)
    assert by_task.is_error and "unknown_task" in _text(by_task)
    assert by_group.is_error and "unknown_task" in _text(by_group)


def test_mcp_http_submissions_belong_to_the_token_caller(world: World) -> None:
    (sub,) = anyio.run(
        _mcp, world, "bob", [("submit_task", {"function": "square", "args": [9], "envelope": DONE})]
    )
    assert not sub.is_error, _text(sub)
    rid = sub.structured_content["task_id"]
    assert world.coord.events.owner_of(rid) == "bob"
    (theirs,) = anyio.run(_mcp, world, "alice", [("get_result", {"task_id": rid})])
    assert theirs.is_error and "unknown_task" in _text(theirs)


def test_mcp_stdio_caller_sees_only_its_own(world: World) -> None:
    """Over stdio (here: MCP's in-memory transport) tools act for ``mcp``: not alice."""

    async def main() -> tuple[Any, Any, Any, Any]:
        async with Client(build_server(_ops_of(world))) as c:
            sub = await c.call_tool(
                "submit_task", {"function": "square", "args": [2], "envelope": DONE}
            )
            hers = await c.call_tool("get_result", {"task_id": world.alice["task"]})
            cancel = await c.call_tool("cancel", {"task_id": world.alice["queued"]})
            page = await c.call_tool("await_event", {"after": 0, "timeout_s": 0})
            return sub, hers, cancel, page

    sub, hers, cancel, page = anyio.run(main)
    assert not sub.is_error and world.coord.events.owner_of(sub.structured_content["task_id"])
    assert world.coord.events.owner_of(sub.structured_content["task_id"]) == "mcp"
    assert hers.is_error and "unknown_task" in _text(hers)
    assert cancel.is_error and "unknown_task" in _text(cancel)
    assert {e["owner"] for e in page.structured_content["events"]} == {"mcp"}


# --- the CLI and the Jupyter executor against the service -------------------------------------


def test_cli_against_the_service_shows_only_the_tokens_callers_work(world: World) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    for kind in ("task", "group", "transfer"):
        rid = world.alice[kind]
        args = ["--service", world.base, "--token", world.tokens["bob"]]
        r = runner.invoke(app, ["result", rid, *args])
        assert r.exit_code == EXIT_ERROR, r.output
        assert "knows no task, group or transfer" in " ".join(r.output.split())
        w = runner.invoke(app, ["watch", rid, "--timeout-s", "5", *args])
        assert w.exit_code == EXIT_ERROR, w.output
        mine = runner.invoke(
            app, ["result", rid, "--service", world.base, "--token", world.tokens["alice"]]
        )
        assert mine.exit_code == EXIT_OK, mine.output


def test_jupyter_executor_against_the_service_sees_only_its_callers_work(world: World) -> None:
    ex = FederatedExecutor(service=world.base, token=world.tokens["bob"])
    try:
        fut = ex.submit("square", 7, envelope=DONE)  # type: ignore[arg-type]
        assert fut.result(timeout=30) == 49
        assert isinstance(fut, RemoteTaskFuture)
        assert {e.owner for e in fut.events} == {"bob"}
        assert all(e.task_id == fut.task_id for e in fut.events)
        # a future forged from alice's submission is refused, as an unknown task
        with world.http("alice") as alice:
            sub = SubmitResponse.model_validate(_submit(alice, QUEUED))
        forged = RemoteTaskFuture(ServiceClient(world.base, world.tokens["bob"]), sub)
        with pytest.raises(OpsError) as ei:
            forged.status()
        assert ei.value.status == 404
        with pytest.raises(OpsError):
            forged.cancel()
        with world.http("alice") as alice:
            assert alice.get(f"/v1/tasks/{sub.task_id}").json()["state"] == "queued"
    finally:
        ex.shutdown(wait=False)


# --- tokens, persistence, migration -----------------------------------------------------------


def test_built_in_caller_names_get_no_tokens(tmp_path: Path) -> None:
    tokens = TokenStore(tmp_path / "tokens.db")
    for name in ("local", "mcp"):
        with pytest.raises(ValueError, match="reserved"):
            tokens.issue(name)


def test_owners_and_cursors_survive_a_restart(tmp_path: Path) -> None:
    specs = load_sites(["local"])

    def coordinator() -> FixedCoordinator:
        sites = [ThreadSite(s) for s in specs]
        c = FixedCoordinator(
            sites,
            store=Store(tmp_path / "coordinator.db"),
            transfer_backends=LocalCopyBackend(["local"], tmp_path),
        )
        for s in sites:
            s.coord = c
        return c

    first = coordinator()
    ops = LocalOps(first, refresh_s=3600)
    from federation.interfaces.service.models import TaskRequest

    sub = ops.submit(
        TaskRequest.model_validate({"function": "square", "args": [3], "envelope": DONE}),
        "alice",
    )
    assert first.get_result(sub.task_id, timeout_s=30).status == "completed"
    alice_seq = first.events.last_seq_of("alice")
    ops.close()
    first.close()
    assert first.store is not None
    first.store.close()

    again = coordinator()
    try:
        again.recover()
        ops = LocalOps(again, refresh_s=3600)
        assert ops.status(sub.task_id, "alice").state == "completed"
        with pytest.raises(OpsError) as ei:
            ops.status(sub.task_id, "bob")
        assert ei.value.status == 404
        (h,) = again.handles()
        assert h.caller == "alice"
        assert again.events.last_seq_of("alice") == alice_seq
        assert again.events.last_seq_of("bob") == 0
        ops.close()
    finally:
        again.close()
        assert again.store is not None
        again.store.close()


def test_records_from_before_owners_migrate_to_local(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, task_id TEXT NOT NULL,
            site TEXT, at TEXT NOT NULL, detail TEXT NOT NULL);
        CREATE TABLE groups (id TEXT PRIMARY KEY, objective TEXT NOT NULL,
            distinct_sites INTEGER NOT NULL, children TEXT NOT NULL,
            replacements TEXT NOT NULL DEFAULT '[]', state TEXT NOT NULL,
            created_at TEXT NOT NULL);
        """
    )
    for seq in (1, 2, 3):
        db.execute(
            "INSERT INTO events VALUES (?, 'task.queued', 't1', 'local', "
            "'2026-01-01T00:00:00+00:00', '{}')",
            (seq,),
        )
    db.execute("INSERT INTO groups VALUES ('g1', '', 1, '[]', '[]', 'terminal', '2026-01-01')")
    db.commit()
    db.close()
    store = Store(path)
    try:
        evs = store.events()
        assert [(e.owner, e.owner_seq) for e in evs] == [("local", 1), ("local", 2), ("local", 3)]
        assert [g["owner"] for g in store.groups()] == ["local"]
    finally:
        store.close()
