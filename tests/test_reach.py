"""``doctor`` and ``inspect`` when Globus cannot be reached: one line per site, no traceback.

The real globus-sdk and globus-compute-sdk objects run; only their HTTP transport is
answered by the ``responses`` library: with nothing registered it refuses every connection
(as a machine with no route to Globus does), and ``globus_sdk.testing`` registered
responses give a 401 (a refused token) or an endpoint that is offline. Globus Auth is not
asked at all: the stored tokens are fresh.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import globus_sdk
import pytest
import responses
from globus_sdk.scopes import ComputeScopes, TransferScopes
from globus_sdk.testing import RegisteredResponse, get_response_set
from globus_sdk.token_storage import JSONTokenStorage, TokenStorageData
from typer.testing import CliRunner

from federation.interfaces.cli.main import app as cli_app

DELTA = uuid.UUID("11111111-1111-1111-1111-111111111111")
ANVIL = uuid.UUID("33333333-3333-3333-3333-333333333333")


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every HTTP request refused unless registered; the SDK's retry pauses skipped."""
    monkeypatch.setattr(
        globus_sdk.transport.RequestsTransport, "_retry_sleep", lambda *a, **k: None
    )
    responses.start()
    try:
        yield
    finally:
        responses.stop()
        responses.reset()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Two Globus sites, user login, fresh tokens stored (nothing asks Globus Auth)."""
    tokens = tmp_path / "tokens.json"
    expires = int(time.time()) + 86400
    JSONTokenStorage(tokens).store_token_data_by_resource_server(
        {
            rs: TokenStorageData(
                resource_server=rs,
                identity_id=None,
                scope=scope,
                access_token="stored-access-token",
                refresh_token="stored-refresh-token",
                expires_at_seconds=expires,
                token_type="Bearer",
            )
            for rs, scope in (
                (ComputeScopes.resource_server, str(ComputeScopes.all)),
                (TransferScopes.resource_server, str(TransferScopes.all)),
            )
        }
    )
    path = tmp_path / "federation.yaml"
    path.write_text(
        f"home: {tmp_path / 'home'}\n"
        f"auth:\n  mode: user\n  token_storage: {tokens}\n"
        "sites:\n"
        f"  delta:\n    backend: globus\n    endpoint_id: {DELTA}\n"
        f"  anvil:\n    backend: globus\n    endpoint_id: {ANVIL}\n"
    )
    return path


def _version() -> None:
    RegisteredResponse(
        service="compute",
        path="/v2/version",
        method="GET",
        json={"api": "1.0", "min_ep_version": "2.0.0", "min_sdk_version": "2.0.0"},
    ).add()


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("command", ["doctor", "inspect"])
def test_no_route_to_globus_is_one_line_per_site(refused: None, config: Path, command: str) -> None:
    r = CliRunner().invoke(cli_app, [command, "--config", str(config)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "GlobusConnectionError" not in r.output, r.output
    lines = _lines(r.stderr)
    assert [line.split(":")[0] for line in lines] == ["delta", "anvil"], lines
    for line in lines:
        assert "no route: no route to Globus Compute" in line, line
        assert "check this machine's network route to Globus" in line, line


@pytest.mark.parametrize("command", ["doctor", "inspect"])
def test_a_refused_token_says_to_log_in_again(refused: None, config: Path, command: str) -> None:
    """Globus Compute answers 401; the SDK refreshes the token through Globus Auth, which
    refuses the refresh token (revoked, or six months unused)."""
    RegisteredResponse(
        service="compute",
        path="/v2/version",
        method="GET",
        status=401,
        json={"code": "UNAUTHORIZED", "message": "token expired or revoked"},
    ).add()
    RegisteredResponse(
        service="auth",
        path="/v2/oauth2/token",
        method="POST",
        status=400,
        json={"error": "invalid_grant"},
    ).add()
    r = CliRunner().invoke(cli_app, [command, "--config", str(config)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output, r.output
    lines = _lines(r.stderr)
    assert len(lines) == 2, lines
    for site, line in zip(("delta", "anvil"), lines, strict=True):
        assert line.startswith(f"{site}: token refused: "), line
        assert "invalid_grant" in line and "federation login --force" in line, line


def test_an_offline_endpoint_is_named_with_what_to_do(refused: None, config: Path) -> None:
    _version()
    RegisteredResponse(
        service="compute",
        path="/v3/functions",
        method="POST",
        json={"function_uuid": str(uuid.uuid4())},
    ).add()
    meta = get_response_set("compute.v2.get_endpoint").lookup("default").json
    assert isinstance(meta, dict)
    for eid, state in ((DELTA, "offline"), (ANVIL, "online")):
        RegisteredResponse(
            service="compute",
            path=f"/v2/endpoints/{eid}/status",
            method="GET",
            json={"status": state, "details": {}},
        ).add()
        RegisteredResponse(
            service="compute",
            path=f"/v2/endpoints/{eid}",
            method="GET",
            json={**meta, "uuid": str(eid)},
        ).add()
    r = CliRunner().invoke(cli_app, ["inspect", "--config", str(config), "--json"])
    assert "Traceback" not in r.output, r.output
    assert r.exit_code == 1, r.output
    delta = [line for line in _lines(r.stderr) if line.startswith("delta:")]
    assert len(delta) == 1, r.stderr
    assert f"endpoint {DELTA} is offline" in delta[0], delta
    assert "globus-compute-endpoint start delta" in delta[0], delta
