"""Secrets never reach a log, the audit log or any file under the federation home.

Runs the HTTP service for real (uvicorn in a thread, httpx as the client) over the
in-process federation, with every logger at DEBUG into a file that has NO redaction filter:
the token and the Globus client secret must simply never be logged. Then shows that the
redaction filter catches them when some code does log them by mistake.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from inprocess import inprocess_coordinator

from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import running
from federation.security import AuditLog, CallerPolicy, PolicyGate
from federation.security.tokens import RedactTokens, TokenStore


@pytest.fixture
def debug_log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "debug.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


def _files_containing(home: Path, needles: list[str]) -> list[str]:
    hits = []
    for p in home.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            hits += [f"{p.name}: {n[:12]}..." for n in needles if n.encode() in data]
    return hits


def test_service_requests_never_log_tokens_or_client_secrets(
    tmp_path: Path,
    debug_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client_secret = "gcs-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_ID", "00000000-0000-4000-8000-000000000001")
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_SECRET", client_secret)
    caplog.set_level(logging.DEBUG)
    home = tmp_path / "home"
    tokens = TokenStore(home / "service" / "tokens.db")
    agent = tokens.issue("agent", policy=CallerPolicy(max_gpus_per_task=0))
    op = tokens.issue("op", policy=CallerPolicy(operator=True, require_approval=True))
    coord = inprocess_coordinator(("local",))
    coord.gate = PolicyGate(audit=AuditLog(home / "audit.db"), tokens=tokens)
    forged = agent.token[:-4] + "AAAA"
    try:
        with running(create_app(coord, tokens, refresh_s=3600)) as url:
            auth = {"Authorization": f"Bearer {agent.token}"}
            with httpx.Client(base_url=url, timeout=30) as c:
                statuses = [
                    c.get("/v1/federation", headers=auth).status_code,
                    c.get("/v1/functions", headers=auth).status_code,
                    c.post(
                        "/v1/tasks",
                        json={"function": "square", "args": [4], "envelope": {}},
                        headers=auth,
                    ).status_code,
                    c.post(
                        "/v1/tasks", json={"envelope": {"cpus_min": -1}}, headers=auth
                    ).status_code,
                    c.post(
                        "/v1/tasks",
                        json={"function": "square", "args": [4], "envelope": {"gpus_min": 1}},
                        headers=auth,
                    ).status_code,
                    c.get(
                        "/v1/events", params={"after": 0, "timeout_s": 0}, headers=auth
                    ).status_code,
                    c.get(
                        "/v1/functions", headers={"Authorization": f"Bearer {forged}"}
                    ).status_code,
                    c.get("/v1/functions", headers={"Authorization": agent.token}).status_code,
                    c.post(
                        "/v1/tasks",
                        json={"command": "hostname", "envelope": {}},
                        headers={"Authorization": f"Bearer {op.token}"},
                    ).status_code,
                    c.get(
                        "/v1/policy/pending", headers={"Authorization": f"Bearer {op.token}"}
                    ).status_code,
                ]
        assert statuses == [200, 200, 202, 422, 403, 200, 401, 401, 202, 200]
    finally:
        coord.close()
    secrets_ = [agent.token, op.token, forged, client_secret]
    # the secret parts: fedtok_<12 hex id>_<secret>, and the secret may itself contain "_"
    secrets_ += [t.split("_", 2)[2] for t in (agent.token, op.token)]
    assert all(len(s) >= 20 for s in secrets_)
    text = debug_log.read_text()
    assert "uvicorn" in text or "federation" in text  # the log did capture the requests
    assert "/v1/tasks" in text
    for s in secrets_:
        assert s not in text, "a credential was written to the debug log"
        assert s not in caplog.text
    assert not _files_containing(home, secrets_)  # tokens.db, audit.db: hashes and names only
    assert {r.caller for r in AuditLog(home / "audit.db").records()} == {"agent", "op"}


def test_redaction_catches_credentials_logged_by_mistake(monkeypatch: pytest.MonkeyPatch) -> None:
    client_secret = "gcs-" + secrets.token_urlsafe(24)
    monkeypatch.setenv("GLOBUS_COMPUTE_CLIENT_SECRET", client_secret)
    token = "fedtok_0123456789ab_" + secrets.token_urlsafe(32)
    flt = RedactTokens()
    for msg, args in [
        ("request with %s", (token,)),
        ("headers: {'authorization': 'Bearer %s'}", (token,)),
        ("auth failed: client_secret=%s&grant_type=client_credentials", (client_secret,)),
        ('{"client_id": "x", "client_secret": "%s"}', (client_secret,)),
        ("env has %s", (client_secret,)),
    ]:
        rec = logging.LogRecord("federation.x", logging.ERROR, __file__, 1, msg, args, None)
        assert flt.filter(rec)
        out = rec.getMessage()
        assert token not in out and client_secret not in out, out
        assert "<redacted>" in out
