"""Durable by default, everywhere a caller waits (issue 33, item 1).

``federation serve`` and ``federation mcp`` keep their coordinator's tasks, groups, transfers
and events in the SQLite store (``--in-memory``: not); a caller's event cursor continues
across a restart with the same store; a cursor ahead of the log (the service restarted
without its store) is an error that says where to resume, at the bus, over HTTP (long poll
and SSE, ``Last-Event-ID`` too), through the service client and the MCP tool, never a wait.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import CursorAheadError, FederationError, StoreInUseError
from federation.deploy.connect import hold_store
from federation.interfaces.cli.main import app as cli_app
from federation.interfaces.mcp_server import build_server
from federation.interfaces.service.app import create_app
from federation.interfaces.service.client import ServiceClient
from federation.interfaces.service.errors import OpsError
from federation.interfaces.service.models import EventsPage, TaskRequest
from federation.interfaces.service.ops import LocalOps
from federation.interfaces.service.server import running, service_connection
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import EventBus
from federation.runtime.store import Store
from federation.security.tokens import TokenStore

RESUME = ("restarted without its store", "after=0")
SLOW: dict[str, Any] = {"probe_timeout_s": 60}
"""Probes on a busy 2-core machine (as conftest's ``coord``)."""


def _emit(bus: EventBus, owner: str, record: str, n: int) -> None:
    """``n`` more events of ``record``, which belongs to ``owner``."""
    if bus.owner_of(record) is None:
        bus.set_owner(record, owner)
    for _ in range(n):
        bus.emit("task.milestone", record, "local", note="step")


def _refused_at_once(bus: EventBus, after: int, owner: str | None = None) -> CursorAheadError:
    """``await_event(after)`` raises at once, although it was allowed to wait 30 s."""
    t0 = time.monotonic()
    with pytest.raises(CursorAheadError) as ei:
        bus.await_event(after, timeout_s=30, owner=owner)
    assert time.monotonic() - t0 < 5, "waited on a cursor no event can ever pass"
    return ei.value


# --- the bus ------------------------------------------------------------------------------------


def test_a_cursor_ahead_of_the_log_is_an_error_naming_where_to_resume(tmp_path: Path) -> None:
    bus = EventBus()
    _emit(bus, "ann", "a1", 2)
    _emit(bus, "bob", "b1", 3)
    assert bus.last_seq == 5 and bus.last_seq_of("ann") == 2
    err = _refused_at_once(bus, 57)
    assert (err.cursor, err.last, err.owner) == (57, 5, None)
    msg = str(err)
    assert "event cursor 57" in msg and "ends at 5" in msg and "after=5" in msg
    assert all(part in msg for part in RESUME), msg
    assert isinstance(err, FederationError)
    # an owner's cursor is compared with their own log: 3 is inside the whole log (5
    # events) but past ann's 2
    err = _refused_at_once(bus, 3, owner="ann")
    assert (err.cursor, err.last, err.owner) == (3, 2, "ann") and "'ann'" in str(err)
    # the end of the log is a cursor like any other: nothing yet, no error
    assert bus.await_event(5, timeout_s=0) == []
    assert bus.await_event(2, owner="ann", timeout_s=0) == []
    assert [e.owner_seq for e in bus.await_event(1, owner="ann", timeout_s=0)] == [2]
    # a service that restarted without its store: the caller's cursor is past the new log
    before = EventBus(Store(tmp_path / "first.db"))
    _emit(before, "ann", "a1", 57)
    after = EventBus(Store(tmp_path / "second.db"))
    _emit(after, "ann", "a2", 3)
    err = _refused_at_once(after, 57, owner="ann")
    assert err.last == 3 and "after=3" in str(err)
    bus.check_cursor(5)  # the same check, without waiting
    with pytest.raises(CursorAheadError):
        bus.check_cursor(6)


# --- the HTTP service, the client and the MCP tool over one durable coordinator ----------------


def _coordinator(store: Path) -> Coordinator:
    return Coordinator([], store=Store(store))


def _close(coord: Coordinator) -> None:
    coord.close()
    if coord.store is not None:
        coord.store.close()


@pytest.fixture
def tokens(tmp_path: Path) -> TokenStore:
    return TokenStore(tmp_path / "tokens.db")


def _client(coord: Coordinator, tokens: TokenStore, name: str) -> TestClient:
    token = tokens.issue(name).token
    return TestClient(
        create_app(coord, tokens, refresh_s=3600), headers={"Authorization": f"Bearer {token}"}
    )


def _poll(c: TestClient, after: int, **params: Any) -> Any:
    return c.get("/v1/events", params={"after": after, "timeout_s": 0, **params})


def _assert_cursor_ahead(r: Any, cursor: int, last: int) -> None:
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["error"] == "cursor_ahead", body
    assert body["details"] == {"cursor": cursor, "last": last}
    assert f"event cursor {cursor}" in body["message"] and f"ends at {last}" in body["message"]
    assert all(part in body["message"] for part in RESUME), body
    assert f"after={last}" in body["hint"] and "after=0" in body["hint"]


def test_http_long_poll_and_stream_refuse_a_cursor_ahead_with_409(
    tmp_path: Path, tokens: TokenStore
) -> None:
    coord = _coordinator(tmp_path / "coordinator.db")
    try:
        _emit(coord.events, "alice", "t-a", 2)
        _emit(coord.events, "bob", "t-b", 4)  # the whole log is 6 long; alice's 2
        with _client(coord, tokens, "alice") as c:
            _assert_cursor_ahead(_poll(c, 57), 57, 2)
            _assert_cursor_ahead(_poll(c, 3), 3, 2)  # past alice's log, inside the whole
            ok = EventsPage.model_validate(_poll(c, 2).json())
            assert ok.timed_out and ok.cursor == 2 and ok.last_seq == 2
            # the stream: by query, and by Last-Event-ID (a reconnecting client)
            _assert_cursor_ahead(c.get("/v1/events/stream", params={"after": 57}), 57, 2)
            r = c.get("/v1/events/stream", headers={"Last-Event-ID": "9"})
            _assert_cursor_ahead(r, 9, 2)
            # the error says where to resume, and resuming there works
            page = EventsPage.model_validate(_poll(c, 0).json())
            assert [e.seq for e in page.events] == [1, 2] and page.cursor == 2
    finally:
        _close(coord)


def test_client_and_mcp_tool_raise_cursor_ahead(tmp_path: Path, tokens: TokenStore) -> None:
    coord = _coordinator(tmp_path / "coordinator.db")
    try:
        _emit(coord.events, "carol", "t-c", 3)
        token = tokens.issue("carol").token
        with running(create_app(coord, tokens, refresh_s=3600)) as base:
            client = ServiceClient(base, token)
            try:
                for call in (
                    lambda: client.events_now(after=57),
                    lambda: anyio.run(client.events, 57, None, None, 30.0),
                    lambda: next(iter(client.stream_events(57))),
                ):
                    t0 = time.monotonic()
                    with pytest.raises(OpsError) as ei:
                        call()
                    assert time.monotonic() - t0 < 10
                    assert ei.value.status == 409 and ei.value.body.error == "cursor_ahead"
                    assert ei.value.body.details == {"cursor": 57, "last": 3}
                    assert "after=3" in ei.value.body.hint
                assert [e.seq for e in client.events_now(after=1).events] == [2, 3]
            finally:
                client.close()
        # the MCP tool over the same operations: a ToolError with the same message
        _emit(coord.events, "mcp", "t-m", 2)  # stdio's caller is "mcp"
        ops = LocalOps(coord, refresh_s=3600)

        async def get_ops() -> LocalOps:
            return ops

        async def main() -> tuple[Any, Any]:
            async with Client(build_server(get_ops)) as s:
                ahead = await s.call_tool("await_event", {"after": 40, "timeout_s": 30})
                fine = await s.call_tool("await_event", {"after": 1, "timeout_s": 0})
                return ahead, fine

        t0 = time.monotonic()
        ahead, fine = anyio.run(main)
        assert time.monotonic() - t0 < 10
        assert ahead.is_error
        text = ahead.content[0].text
        assert "cursor_ahead: event cursor 40 is ahead of the event log of 'mcp'" in text
        assert "ends at 2" in text and all(part in text for part in RESUME), text
        assert "What to do: resume with after=2" in text
        assert not fine.is_error
        assert [e["seq"] for e in fine.structured_content["events"]] == [2]
    finally:
        _close(coord)


# --- cursors across a restart with the same store ---------------------------------------------


def test_cursors_continue_across_a_restart_with_the_same_store(
    tmp_path: Path, tokens: TokenStore
) -> None:
    db = tmp_path / "coordinator.db"
    first = _coordinator(db)
    try:
        _emit(first.events, "dave", "t-d1", 2)
        _emit(first.events, "erin", "t-e1", 3)
        _emit(first.events, "dave", "t-d1", 1)
        with _client(first, tokens, "dave") as c:
            page = EventsPage.model_validate(_poll(c, 0).json())
        assert [e.seq for e in page.events] == [1, 2, 3] and page.cursor == 3
        cursor, global_last = page.cursor, first.events.last_seq
    finally:
        _close(first)
    assert global_last == 6

    again = _coordinator(db)  # the service restarted, with its store
    try:
        assert again.events.last_seq == 6 and again.events.last_seq_of("dave") == 3
        with _client(again, tokens, "dave") as c:
            waited = EventsPage.model_validate(_poll(c, cursor).json())
            assert waited.timed_out and waited.cursor == cursor  # no error: where it was
            _emit(again.events, "erin", "t-e1", 1)
            _emit(again.events, "dave", "t-d2", 2)
            page = EventsPage.model_validate(_poll(c, cursor).json())
            # dave's cursor continues, gap-free; the whole log's seq too
            assert [e.seq for e in page.events] == [4, 5] and page.cursor == 5
            assert [e.task_id for e in page.events] == ["t-d2", "t-d2"]
            everything = EventsPage.model_validate(_poll(c, 0).json())
            assert [e.seq for e in everything.events] == [1, 2, 3, 4, 5]
        stored = again.events.history()
        assert [e.seq for e in stored] == list(range(1, 10))
        assert [e.owner_seq for e in stored if e.owner == "dave"] == [1, 2, 3, 4, 5]
        assert [e.owner_seq for e in stored if e.owner == "erin"] == [1, 2, 3, 4]
        assert [e.seq for e in again.events.await_event(6, timeout_s=0)] == [7, 8, 9]
    finally:
        _close(again)

    fresh = _coordinator(tmp_path / "elsewhere.db")  # restarted WITHOUT its store
    try:
        with _client(fresh, tokens, "dave") as c:
            _assert_cursor_ahead(_poll(c, 5), 5, 0)
    finally:
        _close(fresh)


# --- serve and mcp: durable by default, --in-memory on request ---------------------------------


def test_a_store_is_held_by_one_service_at_a_time(tmp_path: Path) -> None:
    store = tmp_path / "home" / "coordinator.db"
    release = hold_store(store)
    try:
        with pytest.raises(StoreInUseError) as ei:
            hold_store(store)
        msg = str(ei.value)
        assert str(store) in msg and "--in-memory" in msg and "--service" in msg
        # the policy CLI's own coordinator would open it too: it points to the service
        home = ["--home", str(store.parent)]
        r = CliRunner().invoke(cli_app, ["policy", "reject", "t-1", *home])
        assert r.exit_code == 2 and "--service URL" in r.output, r.output
    finally:
        release()
    hold_store(store)()  # let go: the next service takes it


def test_a_starting_service_waits_for_the_one_closing_on_its_store(tmp_path: Path) -> None:
    """An agent restarts its MCP server at once; the old one lets go of the store once it
    has drained: the new one waits for that (within its wait), and is refused after it."""
    store = tmp_path / "home" / "coordinator.db"
    release = hold_store(store)
    timer = threading.Timer(0.5, release)
    timer.start()
    t0 = time.monotonic()
    hold_store(store, wait_s=20)()
    assert 0.4 < time.monotonic() - t0 < 20
    timer.join()
    release = hold_store(store)
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreInUseError):
            hold_store(store, wait_s=0.3)
        assert time.monotonic() - t0 >= 0.3
    finally:
        release()


def test_serve_and_mcp_commands_pass_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from federation.interfaces import mcp_run
    from federation.interfaces.service import server

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(server, "serve", lambda *a, **kw: seen.append(kw))
    monkeypatch.setattr(mcp_run, "run", lambda **kw: seen.append(kw))
    run = CliRunner().invoke
    for args in (["serve", "--no-up"], ["serve", "--no-up", "--in-memory"]):
        r = run(cli_app, args)
        assert r.exit_code == 0, r.output
    for args in (["mcp", "--no-up"], ["mcp", "--no-up", "--in-memory"]):
        r = run(cli_app, args)
        assert r.exit_code == 0, r.output
    assert [kw["in_memory"] for kw in seen] == [False, True, False, True]
    for cmd in ("serve", "mcp"):
        text = " ".join(run(cli_app, [cmd, "--help"]).output.split())
        assert "--in-memory" in text and "coordinator.db" in text, text


@pytest.mark.slurm
def test_serve_and_mcp_build_durable_coordinators_unless_in_memory(
    local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from federation.deploy import connect as connect_module
    from federation.interfaces.mcp_run import embedded_ops

    monkeypatch.setattr(connect_module, "STORE_HANDOVER_S", 0.5)  # the holder stays

    durable_service = tmp_path / "service-store" / "coordinator.db"  # not the shared home's

    conn, callers = service_connection(
        local.home, bring_up=False, store_path=durable_service, **SLOW
    )
    try:
        assert callers is None
        assert conn.coord.store is not None and conn.coord.store.path == durable_service
        # a second service on the same store is refused before it connects anything
        with pytest.raises(StoreInUseError):
            service_connection(local.home, bring_up=False, store_path=durable_service, **SLOW)
    finally:
        conn.close()
    volatile, _ = service_connection(local.home, bring_up=False, in_memory=True)
    try:
        assert volatile.coord.store is None
    finally:
        volatile.close()
    ops = embedded_ops(local.home, bring_up=False, store_path=durable_service)
    try:
        assert isinstance(ops, LocalOps)
        assert ops.coord.store is not None and ops.coord.store.path == durable_service
    finally:
        ops.close()
    ops = embedded_ops(local.home, bring_up=False, in_memory=True)
    try:
        assert isinstance(ops, LocalOps) and ops.coord.store is None
    finally:
        ops.close()


def _events_until(
    client: ServiceClient, after: int, task_id: str, kind: str, budget_s: float
) -> list[Any]:
    """Every event of the caller's after ``after`` up to ``task_id``'s ``kind``."""
    seen: list[Any] = []
    deadline = time.monotonic() + budget_s
    cursor = after
    while time.monotonic() < deadline:
        page = client.events_now(cursor, timeout_s=min(10.0, deadline - time.monotonic()))
        seen.extend(page.events)
        cursor = page.cursor
        if any(e.task_id == task_id and e.kind == kind for e in page.events):
            return seen
    raise AssertionError(f"no {kind} of {task_id} within {budget_s} s: {seen}")


@pytest.mark.slurm
def test_a_restarted_service_reattaches_and_the_cursor_continues(
    local: Any, tmp_path: Path
) -> None:
    durable_service = tmp_path / "service-store" / "coordinator.db"
    tokens = TokenStore(tmp_path / "tokens.db")
    token = tokens.issue("durable-fay").token
    envelope = ResourceEnvelope(sites=["local"], walltime_s=300)
    req = TaskRequest(command="sleep 6; echo survived", envelope=envelope)
    conn, _ = service_connection(
        local.home, ["local"], bring_up=False, store_path=durable_service, **SLOW
    )
    try:
        with running(create_app(conn.coord, tokens, refresh_s=3600)) as base:
            client = ServiceClient(base, token, timeout_s=180)  # the first probe: slow here
            try:
                sub = client.submit(req)
                before = _events_until(client, sub.cursor, sub.task_id, "task.started", 240)
            finally:
                client.close()
    finally:
        conn.close()  # the service stops with the task still running
    cursor = before[-1].seq
    assert [e.seq for e in before] == list(range(sub.cursor + 1, cursor + 1))

    again, _ = service_connection(
        local.home, ["local"], bring_up=False, store_path=durable_service, **SLOW
    )
    try:
        with running(create_app(again.coord, tokens, refresh_s=3600)) as base:
            client = ServiceClient(base, token, timeout_s=180)
            try:
                after = _events_until(client, cursor, sub.task_id, "task.completed", 300)
                status = client.status(sub.task_id)
            finally:
                client.close()
    finally:
        again.close()
    # the caller's cursor continued where it was: no gap, nothing repeated
    assert [e.seq for e in after] == list(range(cursor + 1, cursor + 1 + len(after)))
    assert status.state == "completed" and status.result is not None
    assert (status.result.stdout or "").strip() == "survived", status.result
