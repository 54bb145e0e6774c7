"""Callers who are Globus identities cannot see, wait on or cancel each other's work.

The service in its ``globus`` auth mode (tokens introspected by the real
``ConfidentialAppAuthClient``; Globus Auth answered by ``globus_sdk.testing`` registered
responses, tests/globus_auth_standin.py). Four Globus identities share one coordinator:
``alice@uni.edu`` and ``bob@lab.gov`` (plain callers), ``ops@uni.edu`` (``operator: true``
in the policy) and ``carol@uni.edu`` (every task held for approval). The checks of
tests/test_ownership.py (made for the service's own tokens) hold for them through the HTTP
service, the MCP server over HTTP and the CLI: bob's reads, waits and cancels of alice's
tasks, groups, transfers and events answer exactly as ids that do not exist; records belong
to the Globus username; an operator sees everything, audited. Plus what only this mode has:
401s that say how to get a token for the service's scope, and ``POST /v1/logout`` (also
``federation token logout``), which revokes only the caller's own tokens.
No Slurm: the sites run tasks on threads (tests/inprocess.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import responses
import typer
from globus_auth_standin import SCOPE, SECRET_ENV, GlobusAuth, Person, globus_token, settings
from inprocess import FixedCoordinator, ThreadSite
from test_ownership import (
    DONE,
    NOT_FOUND,
    QUEUED,
    RECORD_ROUTES,
    RECORD_TOOLS,
    _gap_free,
    _guesses,
    _kind_of,
    _mcp,
    _path,
    _same_body,
    _submit,
    _text,
    _wait,
    check_mcp_record_tool_refuses_bob,
    seed_records,
)
from typer.testing import CliRunner

from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.core.workspace import workspace_rel
from federation.interfaces.cli.service import register as register_service
from federation.interfaces.cli.tasks import EXIT_ERROR, EXIT_OK, register
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.app import Guard, create_app
from federation.interfaces.service.ops import LocalOps, Operations
from federation.interfaces.service.server import running
from federation.runtime.store import Store
from federation.security.audit import AuditLog
from federation.security.globus_callers import GlobusCallers
from federation.security.policy import CallerPolicy, PolicyGate, PolicySet
from federation.security.sealed import KEY_ENV
from federation.security.tokens import TokenStore
from federation.transfer import LocalCopyBackend

NAMES = {"alice": "alice@uni.edu", "bob": "bob@lab.gov", "ops": "ops@uni.edu"}
NAMES["carol"] = "carol@uni.edu"


@dataclass
class World:
    base: str
    mcp_url: str
    people: dict[str, Person]
    coord: FixedCoordinator
    callers: GlobusCallers
    auth: GlobusAuth
    audit: AuditLog
    home: Path
    alice: dict[str, str] = field(default_factory=dict)

    def token(self, who: str) -> str:
        return self.people[who].token

    def http(self, who: str) -> httpx.Client:
        token = self.people[who].token
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def operator_rows(self, owner: str, record_id: str | None = None) -> list[Any]:
        rows = self.audit.records(caller=NAMES[owner], task_id=record_id)
        return [r for r in rows if r.decision == "operator_access"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, secret_registry: Any) -> Iterator[World]:
    home = tmp_path_factory.mktemp("globus-ownership")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, "service-client-secret-for-tests")
        mp.delenv(KEY_ENV, raising=False)
        responses.start()
        try:
            yield from _world(home, secret_registry)
        finally:
            responses.stop()
            responses.reset()


def _world(home: Path, secret_registry: Any) -> Iterator[World]:
    auth = GlobusAuth(responses.mock)
    people = {who: auth.person(name) for who, name in NAMES.items()}
    for p in people.values():
        for s in p.secrets():
            secret_registry.add(s)
    callers = GlobusCallers(settings(), home)
    audit = AuditLog(home / "audit.db")
    policies = PolicySet(
        callers={
            NAMES["ops"]: CallerPolicy(operator=True),
            NAMES["carol"]: CallerPolicy(require_approval=True),
        }
    )
    specs = {s.name: s for s in load_sites(["local", "delta"])}
    never = threading.Event()
    sites = [ThreadSite(specs["local"]), ThreadSite(specs["delta"], gate=never)]
    store = Store(home / "coordinator.db")
    coord = FixedCoordinator(
        sites,
        policy="earliest-start",
        store=store,
        gate=PolicyGate(policies, audit, tokens=TokenStore(home / "tokens.db")),
        transfer_backends=LocalCopyBackend(["local", "delta"], home),
    )
    for s in sites:
        s.coord = coord
    for who in NAMES.values():  # in each caller's own workspace (move_data's paths)
        ws = site_storage("local", home) / str(workspace_rel(who))
        ws.mkdir(parents=True, exist_ok=True)
        for short in NAMES:
            (ws / f"{short}.txt").write_text(f"{short}'s data\n")
    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Operations:
        return ops

    mcp_app = Guard(
        build_server(get_ops).streamable_http_app(host="127.0.0.1"), callers, max_body_bytes=10**6
    )
    with running(create_app(coord, callers, ops=ops)) as base, running(mcp_app) as mcp_base:
        w = World(base, f"{mcp_base}/mcp", people, coord, callers, auth, audit, home)
        seed_records(w)
        yield w
        ops.close()
    coord.close()
    store.close()


# --- who a caller is ----------------------------------------------------------------------------


def test_records_belong_to_the_globus_username(world: World) -> None:
    for rid in world.alice.values():
        assert world.coord.events.owner_of(rid) == "alice@uni.edu"
    row = world.coord.store.task(world.alice["task"]) if world.coord.store else None
    assert row is not None and row["owner"] == "alice@uni.edu"
    with world.http("alice") as alice:
        events = alice.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()["events"]
    assert events and {e["owner"] for e in events} == {"alice@uni.edu"} and _gap_free(events)


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("missing", "missing bearer token"),
        ("inactive", "not active"),
        ("wrong scope", "not for this service"),
        ("service token", "not `federation token issue` tokens"),
    ],
)
def test_refused_tokens_answer_401_saying_how_to_get_one(
    world: World, case: str, words: str
) -> None:
    headers: dict[str, str] = {}
    if case != "missing":
        token = "fedtok_0123456789ab_" + "y" * 40 if case == "service token" else globus_token()
        if case == "inactive":
            world.auth.introspection(token, active=False)
        elif case == "wrong scope":
            world.auth.introspection(token, world.people["bob"], scope="openid email")
        headers["Authorization"] = f"Bearer {token}"
    for url in (f"{world.base}/v1/tasks", world.mcp_url):
        r = (
            httpx.post(url, headers=headers, json={})
            if "mcp" in url
            else httpx.get(url, headers=headers)
        )
        assert r.status_code == 401, r.text
        body = r.json()
        assert body["error"] == "unauthorized" and words in body["message"], body
        assert f"federation token globus --scope {SCOPE}" in body["hint"]
        assert f'scope="{SCOPE}"' in r.headers["www-authenticate"]


# --- HTTP: records, lists, events ---------------------------------------------------------------


@pytest.mark.parametrize("route", RECORD_ROUTES, ids=lambda r: f"{r[0]} {r[1]}")
def test_record_route_refuses_another_globus_caller_like_an_unknown_id(
    world: World, route: tuple[str, str]
) -> None:
    kind = _kind_of(route)
    with world.http("alice") as alice:
        rid = _submit(alice, QUEUED)["task_id"] if kind == "queued" else world.alice[kind]
        with world.http("bob") as bob:
            theirs = bob.request(route[0], _path(route, rid))
            assert theirs.status_code == 404, theirs.text
            assert theirs.json()["error"] in NOT_FOUND
            for guess in _guesses(rid):
                r = bob.request(route[0], _path(route, guess))
                assert r.status_code == 404, (guess, r.text)
                assert _same_body(theirs.json(), r.json(), rid, guess)
        if kind == "queued":  # bob's cancel changed nothing
            assert alice.get(f"/v1/tasks/{rid}").json()["state"] == "queued"
        before = len(world.operator_rows("alice", rid))
        if kind != "queued":
            assert alice.request(route[0], _path(route, rid)).status_code == 200
    with world.http("ops") as op:
        r = op.request(route[0], _path(route, rid))
        assert r.status_code == 200, r.text
    rows = world.operator_rows("alice", rid)
    assert len(rows) == before + 1 and rows[-1].actor == "ops@uni.edu", rows


def test_lists_and_events_show_each_globus_caller_only_their_own(world: World) -> None:
    with world.http("bob") as bob, world.http("alice") as alice:
        mine = {t["task_id"] for t in bob.get("/v1/tasks").json()}
        hers = {t["task_id"] for t in alice.get("/v1/tasks").json()}
        assert mine and hers and not mine & hers
        page = bob.get("/v1/events", params={"after": 0, "timeout_s": 0}).json()
        assert {e["owner"] for e in page["events"]} == {"bob@lab.gov"}
        assert _gap_free(page["events"])
        for rid in world.alice.values():
            for path in ("/v1/events", "/v1/events/stream"):
                r = bob.get(path, params={"after": 0, "task_id": rid, "timeout_s": 0})
                assert r.status_code == 404 and r.json()["error"] == "unknown_task", r.text
        # a waiting bob is not woken by alice's events
        before = page["last_seq"]
        sub = _submit(alice, DONE)
        _wait(alice, sub["cursor"], {sub["task_id"]}, {"task.completed"})
        again = bob.get("/v1/events", params={"after": before, "timeout_s": 0.5}).json()
        assert again["timed_out"] and again["events"] == []


def test_held_tasks_are_decided_by_a_globus_operator_only(world: World) -> None:
    with world.http("carol") as carol:
        held = _submit(carol, DONE)
        assert held["state"] == "held"
        rid = held["task_id"]
        with world.http("bob") as bob:
            assert bob.get("/v1/policy/pending").status_code == 403
            assert bob.post(f"/v1/policy/{rid}/approve").status_code == 403
            assert bob.get(f"/v1/tasks/{rid}").status_code == 404
    with world.http("ops") as op:
        assert rid in {h["task_id"] for h in op.get("/v1/policy/pending").json()}
        assert op.post(f"/v1/policy/{rid}/reject", json={"reason": "test"}).status_code == 200


# --- MCP over HTTP ------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", sorted(RECORD_TOOLS))
def test_mcp_record_tools_refuse_another_globus_callers_ids(world: World, tool: str) -> None:
    check_mcp_record_tool_refuses_bob(world, tool)


def test_mcp_await_event_and_submissions_belong_to_the_globus_caller(world: World) -> None:
    page, hers, sub = anyio.run(
        _mcp,
        world,
        "bob",
        [
            ("await_event", {"after": 0, "timeout_s": 0}),
            ("await_event", {"after": 0, "task_ids": [world.alice["task"]], "timeout_s": 0}),
            ("submit_task", {"function": "square", "args": [9], "envelope": DONE}),
        ],
    )
    events = page.structured_content["events"]
    assert events and {e["owner"] for e in events} == {"bob@lab.gov"}
    assert hers.is_error and "unknown_task" in _text(hers)
    assert world.coord.events.owner_of(sub.structured_content["task_id"]) == "bob@lab.gov"


# --- the CLI against the service ----------------------------------------------------------------


def test_cli_shows_a_globus_caller_only_their_own_work(world: World) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    bob = ["--service", world.base, "--token", world.people["bob"].token]
    for kind in ("task", "group", "transfer"):
        rid = world.alice[kind]
        r = runner.invoke(app, ["result", rid, *bob])
        assert r.exit_code == EXIT_ERROR, r.output
        assert "knows no task, group or transfer" in " ".join(r.output.split())
        w = runner.invoke(app, ["watch", rid, "--timeout-s", "5", *bob])
        assert w.exit_code == EXIT_ERROR, w.output
        alice = ["--service", world.base, "--token", world.people["alice"].token]
        assert runner.invoke(app, ["result", rid, *alice]).exit_code == EXIT_OK


# --- logout -------------------------------------------------------------------------------------


def test_logout_revokes_only_the_callers_own_tokens(world: World) -> None:
    """Bob logs out with the CLI (nothing of his is open): his four tokens are revoked and
    deleted, nobody else's; alice, with a task still queued, is asked first (409)."""
    bob, alice = world.people["bob"], world.people["alice"]
    app = typer.Typer()
    register_service(app)
    before = set(world.auth.revoked())
    out = CliRunner().invoke(
        app, ["token", "logout", "--service", world.base, "--token", bob.token]
    )
    assert out.exit_code == 0, out.output
    assert "logged out bob@lab.gov: 4 token(s) revoked" in " ".join(out.output.split())
    assert set(world.auth.revoked()) - before == {
        bob.compute,
        bob.compute_refresh,
        bob.transfer,
        bob.transfer_refresh,
    }
    assert world.callers.storage.for_namespace(bob.sub).get_token_data_by_resource_server() == {}
    kept = world.callers.storage.for_namespace(alice.sub).get_token_data_by_resource_server()
    assert kept and kept["funcx_service"].access_token == alice.compute
    with world.http("alice") as a:
        r = a.post("/v1/logout")
        assert r.status_code == 409 and r.json()["error"] == "open_work", r.text
        assert world.alice["queued"] in r.json()["details"]["open"]
    # bob's next request gets him new tokens (a second grant)
    grants = world.auth.grants(bob)
    with world.http("bob") as b:
        assert b.get("/v1/tasks").status_code == 200
    assert world.auth.grants(bob) == grants + 1


def test_logout_with_the_services_own_tokens_has_nothing_to_do(tmp_path: Path) -> None:
    tokens = TokenStore(tmp_path / "tokens.db")
    issued = tokens.issue("dave").token
    specs = load_sites(["local"])
    coord = FixedCoordinator([ThreadSite(specs[0])])
    try:
        with running(create_app(coord, tokens, refresh_s=3600)) as base:
            r = httpx.post(f"{base}/v1/logout", headers={"Authorization": f"Bearer {issued}"})
        assert r.status_code == 409 and r.json()["error"] == "not_globus", r.text
        assert "federation token revoke" in r.json()["hint"]
        assert tokens.verify(issued) is not None  # nothing revoked
    finally:
        coord.close()
