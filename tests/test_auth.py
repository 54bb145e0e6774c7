"""Globus Auth: real globus-sdk apps, Auth answered by registered responses (no network)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

import globus_sdk
import pytest
import responses
from globus_compute_sdk import Client
from globus_sdk.testing import construct_error, get_last_request
from globus_sdk.token_storage import JSONTokenStorage, TokenStorageData

from federation.core.errors import ConsentRequiredError, LoginRequiredError
from federation.sites.globus_auth import AuthSettings, build_app, login, token_status, translate

COMPUTE_RS = "funcx_service"
COMPUTE_SCOPE = str(globus_sdk.scopes.ComputeScopes.all)
TOKEN_URL = "https://auth.globus.org/v2/oauth2/token"


@pytest.fixture
def mocked() -> Iterator[None]:
    responses.start()
    try:
        yield
    finally:
        responses.stop()
        responses.reset()


def user_settings(tmp_path: Path) -> AuthSettings:
    return AuthSettings(mode="user", token_storage=tmp_path / "tokens.json")


def store_tokens(settings: AuthSettings, *, expired: bool) -> None:
    storage = JSONTokenStorage(settings.token_path)
    exp = int(time.time()) + (-60 if expired else 3600)
    ident = str(uuid.uuid4())
    storage.store_token_data_by_resource_server(
        {
            rs: TokenStorageData(
                resource_server=rs,
                identity_id=ident,
                scope=scope,
                access_token=f"AT-{rs}",
                refresh_token=f"RT-{rs}",
                expires_at_seconds=exp if rs == COMPUTE_RS else int(time.time()) + 3600,
                token_type="Bearer",
            )
            for rs, scope in [
                (COMPUTE_RS, COMPUTE_SCOPE),
                ("transfer.api.globus.org", str(globus_sdk.scopes.TransferScopes.all)),
                ("auth.globus.org", "openid"),
            ]
        }
    )


def compute_call(settings: AuthSettings) -> None:
    client = Client(app=build_app(settings), do_version_check=False)
    client.get_endpoint_status(str(uuid.uuid4()))


def test_never_logged_in_says_run_federation_login(tmp_path: Path, mocked: None) -> None:
    settings = user_settings(tmp_path)
    with pytest.raises(Exception) as raw:
        compute_call(settings)  # the service never prompts: it raises
    err = translate(raw.value, settings)
    assert isinstance(err, LoginRequiredError)
    assert "run `federation login`" in str(err) and str(settings.token_path) in str(err)


def test_expired_refresh_token_invalid_grant(tmp_path: Path, mocked: None) -> None:
    settings = user_settings(tmp_path)
    store_tokens(settings, expired=True)
    responses.add(
        responses.POST,
        TOKEN_URL,
        status=400,
        json={"error": "invalid_grant", "error_description": "refresh token is invalid"},
    )
    with pytest.raises(Exception) as raw:
        compute_call(settings)
    assert isinstance(raw.value, globus_sdk.AuthAPIError)  # what users of the peers see
    err = translate(raw.value, settings)
    assert isinstance(err, LoginRequiredError)
    assert "invalid_grant" in str(err) and "federation login --force" in str(err)
    # and the refresh really was attempted with the stored refresh token
    assert "refresh_token=RT-funcx_service" in str(get_last_request().body)


def test_valid_refresh_renews_and_calls_the_service(tmp_path: Path, mocked: None) -> None:
    settings = user_settings(tmp_path)
    store_tokens(settings, expired=True)
    responses.add(
        responses.POST,
        TOKEN_URL,
        json={
            "access_token": "renewed",
            "scope": COMPUTE_SCOPE,
            "expires_in": 3600,
            "token_type": "Bearer",
            "resource_server": COMPUTE_RS,
            "refresh_token": "RT-2",
            "other_tokens": [],
        },
    )
    eid = str(uuid.uuid4())
    responses.add(
        responses.GET,
        f"https://compute.api.globus.org/v2/endpoints/{eid}/status",
        json={"status": "online"},
    )
    client = Client(app=build_app(settings), do_version_check=False)
    assert client.get_endpoint_status(eid)["status"] == "online"
    assert get_last_request().headers["Authorization"] == "Bearer renewed"


def test_missing_consent_gare_says_which_scope_and_command(tmp_path: Path, mocked: None) -> None:
    settings = user_settings(tmp_path)
    scope = "https://auth.globus.org/scopes/abc/data_access"
    task_id = str(uuid.uuid4())
    responses.add(
        responses.GET,
        f"https://transfer.api.globus.org/v0.10/task/{task_id}",
        status=403,
        json={
            "code": "ConsentRequired",
            "message": "Missing required data_access consent",
            "authorization_parameters": {"required_scopes": [scope]},
        },
    )
    tc = globus_sdk.TransferClient(authorizer=globus_sdk.AccessTokenAuthorizer("AT"))
    with pytest.raises(globus_sdk.TransferAPIError) as raw:
        tc.get_task(task_id)
    err = translate(raw.value, settings)
    assert isinstance(err, ConsentRequiredError)
    assert f"federation login --force --scope '{scope}'" in str(err)


def test_client_credentials_login_fetches_and_stores_tokens(
    tmp_path: Path, mocked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FED_SECRET", "s3cret")
    settings = AuthSettings(
        mode="client_credentials",
        client_id=uuid.uuid4(),
        client_secret_env="FED_SECRET",
        token_storage=tmp_path / "svc.json",
    )

    def grant(request: object) -> tuple[int, dict[str, str], str]:
        raw = getattr(request, "body", "")
        form = parse_qs(raw if isinstance(raw, str) else raw.decode())
        scope = form["scope"][0]
        rs = {
            COMPUTE_SCOPE: COMPUTE_RS,
            str(globus_sdk.scopes.TransferScopes.all): "transfer.api.globus.org",
        }.get(scope, "auth.globus.org")
        doc = {
            "access_token": f"AT-{rs}",
            "scope": scope,
            "expires_in": 3600,
            "token_type": "Bearer",
            "resource_server": rs,
            "other_tokens": [],
        }
        return 200, {}, json.dumps(doc)

    responses.add_callback(responses.POST, TOKEN_URL, callback=grant)
    servers = login(settings)
    assert COMPUTE_RS in servers and "transfer.api.globus.org" in servers
    stored = token_status(settings)
    assert stored[COMPUTE_RS]["expires_at_s"] > time.time()
    # the secret went in the Basic auth header, never into the token file
    assert "s3cret" not in settings.token_path.read_text()


def test_client_credentials_without_secret_names_the_variable(tmp_path: Path) -> None:
    settings = AuthSettings(
        mode="client_credentials", client_id=uuid.uuid4(), client_secret_env="NOT_SET_HERE_XYZ"
    )
    with pytest.raises(LoginRequiredError, match=r"\$NOT_SET_HERE_XYZ is not set"):
        build_app(settings)


def test_bad_client_secret_is_clear(tmp_path: Path, mocked: None) -> None:
    settings = AuthSettings(mode="client_credentials", client_id=uuid.uuid4())
    err = translate(
        construct_error(
            http_status=401, body={"error": "invalid_client"}, error_class=globus_sdk.AuthAPIError
        ),
        settings,
    )
    assert isinstance(err, LoginRequiredError)
    assert settings.client_secret_env in str(err) and "invalid_client" in str(err)


def test_client_credentials_mode_needs_a_client_id() -> None:
    with pytest.raises(ValueError, match="client_id"):
        AuthSettings(mode="client_credentials")
