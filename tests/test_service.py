"""The HTTP service: catalog, tokens, and the API over a real coordinator on local Slurm."""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from federation.core.snapshot import FederationSnapshot
from federation.interfaces.service.app import create_app
from federation.interfaces.service.ops import LocalOps
from federation.interfaces.service.server import running
from federation.parsing.snapshot_builder import unreachable_snapshot
from federation.runtime.catalog import CatalogError, UnknownFunctionError, default_catalog
from federation.runtime.coordinator import Coordinator
from federation.security.tokens import RedactTokens, TokenStore
from functions.workloads import square

LOCAL = {"sites": ["local"], "walltime_s": 300}


# --- catalog and tokens (no Slurm) ------------------------------------------------------------


def test_catalog_binds_plain_json_arguments() -> None:
    cat = default_catalog()
    assert {"report_allocation", "square", "fail_with"} <= set(cat.names())
    t = cat.bind("square", [7])
    assert t.fn is square and t.args == () and t.kwargs == {"x": 7} and t.label == "square"
    assert cat.bind("square", kwargs={"x": 3}).kwargs == {"x": 3}
    assert cat.bind("report_allocation").kwargs == {"work_s": 0.5}
    info = {i.name: i for i in cat.describe()}
    assert info["square"].parameters == ("x",)
    assert info["square"].args_schema["properties"]["x"]["type"] == "integer"


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "needle"),
    [
        ("square", ["seven"], {}, "x: Input should be a valid integer"),
        ("square", [], {}, "x: Field required"),
        ("square", [1, 2], {}, "at most 1 positional"),
        ("square", [1], {"x": 2}, "both positionally and by keyword"),
        ("square", [], {"x": 1, "y": 2}, "y: Extra inputs are not permitted"),
        ("report_allocation", [], {"work_s": -1}, "greater than or equal to 0"),
    ],
)
def test_catalog_rejects_bad_arguments(
    name: str, args: list[Any], kwargs: dict[str, Any], needle: str
) -> None:
    with pytest.raises(CatalogError) as ei:
        default_catalog().bind(name, args, kwargs)
    assert needle in str(ei.value)
    assert f"{name}(" in str(ei.value)  # names the expected signature


def test_unknown_function_lists_the_catalog() -> None:
    with pytest.raises(UnknownFunctionError) as ei:
        default_catalog().bind("os.system", ["rm -rf /"])
    msg = str(ei.value)
    assert "'os.system'" in msg and "report_allocation, square" in msg.replace("fail_with, ", "")


def test_tokens_are_stored_hashed_and_revocable(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.db")
    issued = store.issue("alice")
    assert issued.token.startswith(f"fedtok_{issued.id}_")
    info = store.verify(issued.token)
    assert info is not None and info.name == "alice" and info.id == issued.id
    raw = (tmp_path / "tokens.db").read_bytes()
    assert issued.token.encode() not in raw
    secret = issued.token.split("_", 2)[2]  # the id is 12 hex; the secret may hold "_"
    assert secret.encode() not in raw
    with sqlite3.connect(tmp_path / "tokens.db") as db:
        (stored,) = db.execute("SELECT sha256 FROM tokens").fetchone()
    assert len(stored) == 64
    assert store.verify(issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")) is None
    assert store.verify("nonsense") is None
    assert store.revoke(issued.id) is True
    assert store.revoke(issued.id) is False
    assert store.verify(issued.token) is None
    (listed,) = store.list_tokens()
    assert listed.id == issued.id and not listed.active
    with pytest.raises(ValueError, match="token name"):
        store.issue("two words")
    assert (tmp_path / "tokens.db").stat().st_mode & 0o077 == 0


def test_token_cli_issue_list_revoke(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from federation.interfaces.cli.service import register

    app = typer.Typer()
    register(app)
    run = CliRunner().invoke
    issued = run(app, ["token", "issue", "bob", "--home", str(tmp_path)])
    assert issued.exit_code == 0, issued.output
    token = issued.stdout.strip().splitlines()[-1]
    store = TokenStore(tmp_path / "service" / "tokens.db")
    info = store.verify(token)
    assert info is not None and info.name == "bob"
    listed = run(app, ["token", "list", "--json", "--home", str(tmp_path)])
    assert token not in listed.stdout and info.id in listed.stdout
    assert run(app, ["token", "revoke", info.id, "--home", str(tmp_path)]).exit_code == 0
    assert store.verify(token) is None
    assert run(app, ["token", "revoke", info.id, "--home", str(tmp_path)]).exit_code == 1
    assert run(app, ["token", "issue", "no spaces", "--home", str(tmp_path)]).exit_code == 2
    helptext = run(app, ["--help"]).stdout
    assert all(cmd in helptext for cmd in ("serve", "token"))  # mcp: mcp_cli's command


def test_redaction_filter_hides_tokens() -> None:
    rec = logging.LogRecord(
        "x",
        logging.INFO,
        __file__,
        1,
        "got %s and Bearer abc.def",
        ("fedtok_0123456789ab_" + "x" * 43,),
        None,
    )
    RedactTokens().filter(rec)
    assert rec.getMessage() == "got fedtok_<redacted> and Bearer <redacted>"


# --- the API over the real local federation ---------------------------------------------------


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> TokenStore:
    return TokenStore(tmp_path_factory.mktemp("svc") / "tokens.db")


@pytest.fixture(scope="module")
def token(tokens: TokenStore) -> str:
    return tokens.issue("test-suite").token


@pytest.fixture(scope="module")
def app(coord: Coordinator, tokens: TokenStore) -> Any:
    # One probe at start; tests that need fresh data ask for ?refresh=true.
    return create_app(coord, tokens, refresh_s=3600)


@pytest.fixture(scope="module")
def client(app: Any, token: str) -> Iterator[TestClient]:
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def _ops(app: Any) -> LocalOps:
    ops = app.state.ops
    assert isinstance(ops, LocalOps)
    return ops


def _wait_done(client: TestClient, cursor: int, ids: set[str], budget_s: float = 120) -> int:
    """Long-poll on the cursor until every task in ``ids`` completed or failed."""
    pending = set(ids)
    deadline = time.monotonic() + budget_s
    while pending and time.monotonic() < deadline:
        r = client.get(
            "/v1/events", params={"after": cursor, "task_id": sorted(ids), "timeout_s": 10}
        )
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["cursor"] >= cursor
        for ev in page["events"]:
            assert ev["seq"] > cursor and ev["task_id"] in ids
            if ev["kind"] in ("task.completed", "task.failed"):
                pending.discard(ev["task_id"])
        cursor = page["cursor"]
    assert not pending, f"still running after {budget_s} s: {pending}"
    return cursor


@pytest.mark.slurm
def test_happy_path_shell_and_catalog_function(client: TestClient, coord: Coordinator) -> None:
    r = client.get("/v1/federation")
    assert r.status_code == 200
    snap = FederationSnapshot.model_validate(r.json())
    assert {s.site for s in snap.sites} == set(coord.backends)
    summary = client.get("/v1/federation", params={"view": "summary"}).json()
    assert all("nodes" not in s for s in summary["sites"])
    assert {f["name"] for f in client.get("/v1/functions").json()} >= {"square"}
    draft = client.post("/v1/envelopes/draft", json={"description": "tokenize a csv"}).json()
    assert draft["workload_class"] == "cpu-prep" and draft["validation"]["feasible"]

    t0 = time.monotonic()
    shell = client.post(
        "/v1/tasks", json={"command": "echo hi from $SLURM_JOB_PARTITION", "envelope": LOCAL}
    )
    fn = client.post("/v1/tasks", json={"function": "square", "args": [12], "envelope": LOCAL})
    submit_s = time.monotonic() - t0
    assert shell.status_code == 202, shell.text
    assert fn.status_code == 202, fn.text
    assert submit_s < 2.0, f"two submissions took {submit_s:.2f} s"
    s, f = shell.json(), fn.json()
    for sub in (s, f):
        assert sub["site"] == "local" and sub["state"] in ("queued", "running")
        assert sub["shape"]["site"] == "local" and sub["granted"].startswith("local/")
        assert sub["decision"]["chosen"]["site"] == "local"
        assert "policy auto: chose local/" in sub["explain"]
        assert "excluded by the envelope's site list" in sub["explain"]
    assert f["label"] == "square"

    _wait_done(client, min(s["cursor"], f["cursor"]), {s["task_id"], f["task_id"]})

    rs = client.get(f"/v1/tasks/{s['task_id']}").json()
    assert rs["done"] and rs["state"] == "completed", rs
    assert rs["result"]["stdout"].strip() == f"hi from {rs['partition']}"
    assert rs["result"]["returncode"] == 0 and rs["result"]["slurm_job_id"]
    rf = client.get(f"/v1/tasks/{f['task_id']}").json()
    assert rf["result"]["value"] == 144 and rf["result"]["value_is_json"]
    kinds = [e["kind"] for e in rf["result"]["events"]]
    assert kinds == ["task.queued", "task.started", "task.completed"], kinds
    # done tasks cannot be cancelled, and say so
    c = client.post(f"/v1/tasks/{f['task_id']}/cancel").json()
    assert c == {
        "task_id": f["task_id"],
        "cancelled": False,
        "state": "completed",
        "message": "already completed; nothing to cancel",
    }
    listed = {t["task_id"] for t in client.get("/v1/tasks").json()}
    assert {s["task_id"], f["task_id"]} <= listed


@pytest.mark.slurm
def test_auth_required_and_revocation(app: Any, client: TestClient, tokens: TokenStore) -> None:
    with TestClient(app) as anon:
        assert anon.get("/v1/health").status_code == 200  # liveness only
        r = anon.get("/v1/federation")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"] == "unauthorized" and "token issue" in r.json()["hint"]
        assert (
            anon.post("/v1/tasks", json={"command": "true", "envelope": LOCAL}).status_code == 401
        )
        bad = {"Authorization": "Bearer fedtok_000000000000_" + "x" * 43}
        assert anon.get("/v1/functions", headers=bad).status_code == 401
        assert anon.get("/v1/functions", headers={"Authorization": "Basic Zm9v"}).status_code == 401
        issued = tokens.issue("short-lived")
        good = {"Authorization": f"Bearer {issued.token}"}
        assert anon.get("/v1/functions", headers=good).status_code == 200
        tokens.revoke(issued.id)
        assert anon.get("/v1/functions", headers=good).status_code == 401


BIG = "x" * 1_500_000


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("body", "status", "error", "needle"),
    [
        (
            {"command": "true", "envelope": {"cpus_min": 8, "cpus_max": 2}},
            422,
            "bad_envelope",
            "cpus_min=8 is larger",
        ),
        ({"command": "true", "envelope": {"walltime_s": 5}}, 422, "bad_envelope", "walltime_s"),
        ({"command": "true", "envelope": {"cpus": 4}}, 422, "bad_envelope", "Extra inputs"),
        ({"command": "true"}, 422, "bad_envelope", "envelope: Field required"),
        (
            {"command": "true", "function": "square", "envelope": LOCAL},
            422,
            "bad_request",
            "exactly one",
        ),
        (
            {"command": "true", "args": [1], "envelope": LOCAL},
            422,
            "bad_request",
            "go with `function`",
        ),
        ({"function": "pickle.loads", "envelope": LOCAL}, 422, "bad_function", "the catalog has"),
        (
            {"function": "square", "args": ["x"], "envelope": LOCAL},
            422,
            "bad_function",
            "valid integer",
        ),
        ({"command": "true", "envelope": {"sites": ["nowhere"]}}, 422, "unknown_site", "nowhere"),
        (
            {"command": "true", "envelope": {"gpus_min": 1, "gpu_types": ["tpu9"]}},
            422,
            "bad_envelope",
            "tpu9",
        ),
        (
            {"command": "true", "envelope": {"gpus_min": 64}},
            409,
            "no_feasible_site",
            "GPUs per node",
        ),
        (
            {"command": "true", "envelope": {"mem_gb_min": 50000, "sites": ["local"]}},
            409,
            "no_feasible_site",
            "local",
        ),
        ({"command": BIG, "envelope": LOCAL}, 413, "payload_too_large", "larger than 1000000"),
    ],
)
def test_refused_requests_submit_nothing(
    client: TestClient,
    coord: Coordinator,
    body: dict[str, Any],
    status: int,
    error: str,
    needle: str,
) -> None:
    before, seq = len(coord.handles()), coord.events.last_seq
    r = client.post("/v1/tasks", json=body)
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["error"] == error, doc
    assert needle in r.text, doc
    assert doc["hint"], doc
    if status == 409:
        assert doc["details"]["reasons"], doc  # a reason per site
    assert len(coord.handles()) == before and coord.events.last_seq == seq


@pytest.mark.slurm
def test_chunked_oversized_body_is_refused(client: TestClient, coord: Coordinator) -> None:
    before = len(coord.handles())

    def chunks() -> Iterator[bytes]:
        yield b'{"command": "'
        for _ in range(20):
            yield b"y" * 100_000
        yield b'", "envelope": {}}'

    r = client.post("/v1/tasks", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    assert len(coord.handles()) == before


@pytest.mark.slurm
def test_malformed_json_and_unknown_routes(client: TestClient) -> None:
    r = client.post("/v1/tasks", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == "bad_request"
    r = client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


@pytest.mark.slurm
def test_unknown_task_is_404(client: TestClient) -> None:
    for r in (
        client.get("/v1/tasks/no-such-task"),
        client.post("/v1/tasks/no-such-task/cancel"),
        client.get("/v1/events", params={"task_id": "no-such-task", "timeout_s": 0}),
    ):
        assert r.status_code == 404, r.text
        assert r.json()["error"] == "unknown_task" and "submit" in r.json()["hint"]


@pytest.mark.slurm
def test_site_down_is_503_and_nothing_runs(
    app: Any, client: TestClient, coord: Coordinator
) -> None:
    ops = _ops(app)
    real = ops.cache.get()
    down = FederationSnapshot(
        taken_at=real.taken_at,
        sites=tuple(
            unreachable_snapshot(s.site, "probe timed out; check the endpoint")
            if s.site == "local"
            else s
            for s in real.sites
        ),
    )
    before = len(coord.handles())
    ops.cache.put(down)
    try:
        r = client.post("/v1/tasks", json={"command": "true", "envelope": LOCAL})
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "site_unavailable" and "local" in r.json()["message"]
        assert r.headers["retry-after"]
        # the same envelope without the site list goes elsewhere: 503 only when nothing is up
        assert (
            client.post(
                "/v1/tasks", json={"command": "true", "envelope": {"mem_gb_min": 50000}}
            ).status_code
            == 409
        )
    finally:
        ops.cache.put(real)
    assert len(coord.handles()) == before


@pytest.mark.slurm
def test_event_long_poll_contract(client: TestClient, coord: Coordinator) -> None:
    last = coord.events.last_seq_of("test-suite")  # the caller's own cursor, not the whole log's
    t0 = time.monotonic()
    r = client.get("/v1/events", params={"after": last, "timeout_s": 0.5})
    assert 0.4 < time.monotonic() - t0 < 3
    assert r.json() == {"events": [], "cursor": last, "timed_out": True, "last_seq": last}
    if last:
        r = client.get("/v1/events", params={"after": 0, "kinds": "task.queued,task.completed"})
        page = r.json()
        assert page["events"] and not page["timed_out"]
        assert {e["kind"] for e in page["events"]} <= {"task.queued", "task.completed"}
        assert page["cursor"] == max(e["seq"] for e in page["events"])
    r = client.get("/v1/events", params={"kinds": "task.exploded", "timeout_s": 0})
    assert r.status_code == 422 and "task.completed" in r.json()["hint"]
    r = client.get("/v1/events", params={"after": -1})
    assert r.status_code == 422


def _until(what: str, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.02)


def _raw_long_poll(base: str, token: str, after: int, waiting: Callable[[], bool]) -> None:
    """Open a long poll on a raw socket, then, once the service waits on it, hang up
    without reading the answer."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(
            (
                f"GET /v1/events?after={after}&timeout_s=25 HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: Bearer {token}\r\n\r\n"
            ).encode()
        )
        _until("the service waits on the raw long poll", waiting)


@pytest.mark.slurm
def test_survives_client_disconnect_and_never_logs_tokens(
    app: Any, token: str, coord: Coordinator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    ops = _ops(app)
    headers = {"Authorization": f"Bearer {token}"}
    with running(app) as base:
        after = coord.events.last_seq_of("test-suite")  # the caller's cursor
        _raw_long_poll(base, token, after, lambda: ops.waiters > 0)  # hangs up mid-request
        # a second one through httpx, cancelled by its own short read timeout
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(
                f"{base}/v1/events",
                params={"after": after, "timeout_s": 25},
                headers=headers,
                timeout=0.5,
            )
        t0 = time.monotonic()
        r = httpx.get(f"{base}/v1/functions", headers=headers, timeout=5)
        assert r.status_code == 200 and time.monotonic() - t0 < 1.0
        # the abandoned waits give their threads back within about a slice
        deadline = time.monotonic() + 5
        while ops.waiters and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ops.waiters == 0

        # while one long poll waits, everything else still answers at once
        done = threading.Event()

        def poll() -> None:
            httpx.get(
                f"{base}/v1/events",
                params={"after": coord.events.last_seq_of("test-suite"), "timeout_s": 3},
                headers=headers,
                timeout=10,
            )
            done.set()

        threading.Thread(target=poll, daemon=True).start()
        _until("the service waits on the long poll", lambda: ops.waiters == 1)
        t0 = time.monotonic()
        assert httpx.get(f"{base}/v1/tasks", headers=headers, timeout=5).status_code == 200
        assert time.monotonic() - t0 < 1.0 and not done.is_set()
        assert done.wait(10)
        # requests that fail and get logged: unknown token in the header, bad bodies
        httpx.get(f"{base}/v1/functions", headers={"Authorization": f"Bearer {token}x"})
        httpx.post(f"{base}/v1/tasks", json={"command": "true"}, headers=headers)
    assert "GET /v1/functions" in caplog.text  # the access log was captured
    secret = token.split("_", 2)[2]  # the id is 12 hex; the secret may hold "_"
    assert token not in caplog.text and secret not in caplog.text
