"""Each caller's own Globus identity (service.auth: globus): real globus-sdk clients, with
Globus Auth, Globus Compute and Transfer answered at the transport seam (``responses``;
``globus_sdk.testing`` registered responses: tests/globus_auth_standin.py).

The service's confidential client introspects each caller's token (active, inactive,
expired, wrong scope, revoked), gets the caller's dependent tokens (offline access), keeps
them sealed (no token readable in the database), refreshes them when they expire, drops
them when Globus refuses the refresh token, and revokes them on logout. Two callers' tasks
and transfers go out through the coordinator with each caller's own token (the
``Authorization`` header of every recorded request), in task groups of their own; the
service's own token is used for nothing they ship. Isolation of callers through the
service, the MCP server and the CLI: tests/test_globus_ownership.py.
"""

from __future__ import annotations

import base64
import json
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import globus_sdk
import httpx
import pytest
import responses
import typer
from cryptography.fernet import Fernet, MultiFernet
from globus_auth_standin import (
    INTROSPECT_URL,
    SCOPE,
    SECRET_ENV,
    SERVICE_CLIENT,
    TOKEN_URL,
    GlobusAuth,
    Person,
    form,
    globus_token,
    settings,
    token_doc,
)
from globus_compute_sdk import Client
from globus_sdk.testing import get_last_request, load_response
from globus_sdk.token_storage import JSONTokenStorage, TokenStorageData
from inprocess import idle_snapshot
from responses import matchers
from test_cloud_backend import COMPUTE, Cloud, WatchedExecutor, deliver, factory
from test_transfer_globus import DST, SRC, _accept, _stat, _task
from typer.testing import CliRunner

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import ConfigError
from federation.core.spec import load_site
from federation.core.tasks import PythonTask
from federation.deploy.callers import CallerSiteSets, caller_task_group
from federation.deploy.config import Deployment, FederationConfig, load_config
from federation.interfaces.cli.service import register as register_service
from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import running
from federation.runtime.coordinator import Coordinator
from federation.security.globus_callers import (
    COMPUTE_RS,
    TRANSFER_RS,
    CallerLoginRequired,
    CallerRefused,
    GlobusCallers,
)
from federation.security.scan import scan
from federation.security.sealed import KEY_ENV, SealedTokenStorage, load_key
from federation.sites.cloud import CloudSite
from federation.sites.globus_auth import GLOBUS_COMPUTE_NATIVE_CLIENT_ID
from functions.workloads import square


@pytest.fixture
def mock(monkeypatch: pytest.MonkeyPatch) -> Iterator[responses.RequestsMock]:
    """The default ``responses`` mock, started (Compute's stand-in in test_cloud_backend
    registers on it too)."""
    monkeypatch.setenv(SECRET_ENV, "service-client-secret-for-tests")
    monkeypatch.delenv(KEY_ENV, raising=False)
    responses.start()
    try:
        yield responses.mock
    finally:
        responses.stop()
        responses.reset()


@pytest.fixture
def auth(mock: responses.RequestsMock) -> GlobusAuth:
    return GlobusAuth(mock)


@pytest.fixture
def person(auth: GlobusAuth, secret_registry: Any) -> Any:
    """Make a person known to Globus Auth; their tokens are secrets the session scan seeks."""

    def make(username: str) -> Person:
        p = auth.person(username)
        for s in p.secrets():
            secret_registry.add(s)
        return p

    return make


@pytest.fixture
def callers(mock: responses.RequestsMock, tmp_path: Path) -> GlobusCallers:
    return GlobusCallers(settings(), tmp_path)


def _db_bytes(storage: SealedTokenStorage) -> bytes:
    path = storage.path
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _expire(callers: GlobusCallers, p: Person, rs: str) -> None:
    """Make the stored access token for ``rs`` expired (as an hour later)."""
    storage = callers.storage.for_namespace(p.sub)
    data = storage.get_token_data(rs)
    assert data is not None
    data.expires_at_seconds = int(time.time()) - 10
    storage.store_token_data_by_resource_server({rs: data})
    callers._bump(p.sub)


# --- introspection ------------------------------------------------------------------------------


def test_a_token_for_the_service_scope_names_its_caller_and_gets_offline_tokens(
    callers: GlobusCallers, auth: GlobusAuth, person: Any
) -> None:
    alice = person("alice@uni.edu")
    assert callers.authenticate(alice.token) == "alice@uni.edu"
    # the dependent grant, as the SDK sent it: the caller's token, offline access, the
    # Compute and Transfer scopes; authenticated as the service's confidential client
    grant = get_last_request()
    assert grant is not None and grant.url == TOKEN_URL
    body = form(grant)
    assert body["token"] == alice.token and body["access_type"] == "offline"
    assert body["scope"].split() == [
        str(globus_sdk.scopes.ComputeScopes.all),
        str(globus_sdk.scopes.TransferScopes.all),
    ]
    basic = base64.b64encode(f"{SERVICE_CLIENT}:service-client-secret-for-tests".encode())
    assert grant.headers["Authorization"] == f"Basic {basic.decode()}"
    (asked,) = auth.calls(INTROSPECT_URL)
    assert asked == {"token": alice.token, "include": "identity_set"}
    stored = callers.storage.for_namespace(alice.sub).get_token_data_by_resource_server()
    assert stored[COMPUTE_RS].access_token == alice.compute
    assert stored[COMPUTE_RS].refresh_token == alice.compute_refresh
    assert stored[TRANSFER_RS].access_token == alice.transfer
    assert {d.identity_id for d in stored.values()} == {alice.sub}
    assert callers.identity_of("alice@uni.edu") == (alice.sub, "alice@uni.edu", False)
    # within the cache: neither asked again nor granted again
    assert callers.authenticate(alice.token) == "alice@uni.edu"
    assert len(auth.calls(INTROSPECT_URL)) == 1 and auth.grants(alice) == 1


def test_an_inactive_token_is_refused_saying_what_to_do(
    callers: GlobusCallers, auth: GlobusAuth
) -> None:
    token = globus_token()
    auth.introspection(token, active=False)
    with pytest.raises(CallerRefused, match="not active") as e:
        callers.authenticate(token)
    assert f"federation token globus --scope {SCOPE}" in e.value.hint
    assert auth.calls(TOKEN_URL) == []  # no grant for a refused token


def test_an_expired_token_is_refused(callers: GlobusCallers, auth: GlobusAuth, person: Any) -> None:
    bob = person("bob@lab.gov")
    stale = globus_token()
    auth.introspection(stale, bob, exp=time.time() - 5)  # Auth itself says inactive
    with pytest.raises(CallerRefused, match="expired"):
        callers.authenticate(stale)
    assert auth.grants(bob) == 0


@pytest.mark.parametrize("when", ["expired", "valid"])
def test_the_sdks_own_sample_token_is_not_for_this_service(
    mock: responses.RequestsMock, tmp_path: Path, when: str
) -> None:
    """globus-sdk's sample introspection: a token for Globus Auth's own scopes. While it is
    valid it is refused for its scope; past its ``exp``, as expired."""
    sample = load_response(globus_sdk.ConfidentialAppAuthClient.oauth2_token_introspect)
    exp = sample.json["exp"]  # type: ignore[index]
    now = exp + 10 if when == "expired" else exp - 3600
    callers = GlobusCallers(settings(), tmp_path, clock=lambda: now)
    words = "expired" if when == "expired" else f"not for this service.*needs {SCOPE}"
    with pytest.raises(CallerRefused, match=words):
        callers.authenticate("sample-token-of-the-sdk")
    assert form(get_last_request())["include"] == "identity_set"


def test_a_revoked_token_is_refused_once_the_cache_has_passed(
    mock: responses.RequestsMock, auth: GlobusAuth, person: Any, tmp_path: Path
) -> None:
    now = [time.time()]
    callers = GlobusCallers(settings(introspect_cache_s=30), tmp_path, clock=lambda: now[0])
    carol = person("carol@uni.edu")
    assert callers.authenticate(carol.token) == "carol@uni.edu"
    auth.introspection(carol.token, active=False, replace=True)  # revoked at Globus Auth
    assert callers.authenticate(carol.token) == "carol@uni.edu"  # trusted for 30 s
    now[0] += 31
    with pytest.raises(CallerRefused, match="not active"):
        callers.authenticate(carol.token)


def test_the_services_own_tokens_are_never_sent_to_globus(callers: GlobusCallers) -> None:
    fedtok = "fedtok_0123456789ab_" + "x" * 40
    with pytest.raises(CallerRefused, match="not `federation token issue` tokens"):
        callers.authenticate(fedtok)
    assert len(responses.calls) == 0


# --- sealed at rest ---------------------------------------------------------------------------


def test_callers_tokens_are_sealed_at_rest(
    callers: GlobusCallers, person: Any, tmp_path: Path
) -> None:
    people = [person("alice@uni.edu"), person("bob@lab.gov")]
    for p in people:
        callers.authenticate(p.token)
    raw = _db_bytes(callers.storage)
    for p in people:
        for secret in p.secrets():
            assert secret.encode() not in raw
    report = scan([tmp_path], [s for p in people for s in p.secrets()])
    assert report.clean, report.summary()
    assert sorted(callers.storage.namespaces()) == sorted(p.sub for p in people)
    key_file = tmp_path / "service" / "callers.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(callers.storage.path.stat().st_mode) == 0o600
    assert key_file.read_bytes().strip() not in raw  # the key is not in the database
    # readable with the key only
    other = SealedTokenStorage(callers.storage.path, MultiFernet([Fernet(Fernet.generate_key())]))
    with pytest.raises(ConfigError, match="sealed with another key"):
        other.for_namespace(people[0].sub).get_token_data_by_resource_server()


def test_the_key_may_come_from_the_environment_and_rotate(
    mock: responses.RequestsMock, person: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Fernet.generate_key().decode()
    monkeypatch.setenv(KEY_ENV, old)
    callers = GlobusCallers(settings(), tmp_path)
    alice = person("alice@uni.edu")
    callers.authenticate(alice.token)
    assert not (tmp_path / "service" / "callers.key").exists()
    monkeypatch.setenv(KEY_ENV, f"{Fernet.generate_key().decode()},{old}")  # new key first
    rotated = SealedTokenStorage(callers.storage.path, load_key(None))
    data = rotated.for_namespace(alice.sub).get_token_data(COMPUTE_RS)
    assert data is not None and data.access_token == alice.compute


def test_a_key_file_others_can_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    key = tmp_path / "callers.key"
    key.write_text(Fernet.generate_key().decode())
    key.chmod(0o644)
    with pytest.raises(ConfigError, match=f"chmod 600 {key}"):
        load_key(key)


# --- refresh, a refused refresh, logout ------------------------------------------------------


def test_an_expired_token_is_refreshed_and_sealed_again(
    callers: GlobusCallers, auth: GlobusAuth, person: Any, secret_registry: Any
) -> None:
    alice = person("alice@uni.edu")
    callers.authenticate(alice.token)
    _expire(callers, alice, COMPUTE_RS)
    fresh = globus_token()
    secret_registry.add(fresh)
    auth.refresh(alice.compute_refresh, COMPUTE_RS, fresh)
    endpoint = uuid.uuid4()
    responses.add(
        responses.GET, f"{COMPUTE}/v2/endpoints/{endpoint}/status", json={"status": "online"}
    )
    client = Client(
        authorizer=callers.authorizer("alice@uni.edu", COMPUTE_RS), do_version_check=False
    )
    assert client.get_endpoint_status(str(endpoint))["status"] == "online"
    sent = get_last_request()
    assert sent is not None and sent.headers["Authorization"] == f"Bearer {fresh}"
    (refresh,) = [f for f in auth.calls(TOKEN_URL) if f.get("grant_type") == "refresh_token"]
    assert refresh["refresh_token"] == alice.compute_refresh
    data = callers.storage.for_namespace(alice.sub).get_token_data(COMPUTE_RS)
    assert data is not None and data.access_token == fresh
    assert data.refresh_token == alice.compute_refresh
    assert fresh.encode() not in _db_bytes(callers.storage)


def test_a_refused_refresh_token_drops_the_tokens_and_the_next_request_gets_new_ones(
    callers: GlobusCallers, auth: GlobusAuth, person: Any
) -> None:
    bob = person("bob@lab.gov")
    callers.authenticate(bob.token)
    _expire(callers, bob, TRANSFER_RS)
    auth.refuse_refresh(bob.transfer_refresh)
    authorizer = callers.authorizer("bob@lab.gov", TRANSFER_RS)
    with pytest.raises(CallerLoginRequired, match="federation token globus"):
        authorizer.get_authorization_header()
    assert callers.storage.for_namespace(bob.sub).get_token_data_by_resource_server() == {}
    with pytest.raises(CallerLoginRequired, match="no longer valid"):
        authorizer.get_authorization_header()
    # his next request (the same, still active token) is introspected again and granted anew
    assert callers.authenticate(bob.token) == "bob@lab.gov"
    assert auth.grants(bob) == 2
    assert authorizer.get_authorization_header() == f"Bearer {bob.transfer}"


def test_logout_revokes_every_token_and_deletes_them(
    callers: GlobusCallers, auth: GlobusAuth, person: Any
) -> None:
    alice, bob = person("alice@uni.edu"), person("bob@lab.gov")
    for p in (alice, bob):
        callers.authenticate(p.token)
    dropped: list[str] = []
    callers.on_logout.append(dropped.append)
    report = callers.logout("alice@uni.edu")
    assert report.revoked == 4 and report.deleted == 2 and not report.failed
    assert sorted(auth.revoked()) == sorted(
        [alice.compute, alice.compute_refresh, alice.transfer, alice.transfer_refresh]
    )
    assert dropped == ["alice@uni.edu"]
    assert callers.storage.for_namespace(alice.sub).get_token_data_by_resource_server() == {}
    assert callers.identity_of("alice@uni.edu") == (alice.sub, "alice@uni.edu", True)
    with pytest.raises(CallerLoginRequired, match="logged out"):
        callers.authorizer("alice@uni.edu", COMPUTE_RS).get_authorization_header()
    # bob is untouched
    assert callers.authorizer("bob@lab.gov", COMPUTE_RS).get_authorization_header() == (
        f"Bearer {bob.compute}"
    )
    # alice calls again: introspected and granted anew
    assert callers.authenticate(alice.token) == "alice@uni.edu"
    assert auth.grants(alice) == 2 and callers.identity_of("alice@uni.edu")[2] is False  # type: ignore[index]


# --- two callers, each acting as themselves -------------------------------------------------


SERVICE_COMPUTE = globus_token()
SERVICE_TRANSFER = globus_token()


def _config(tmp_path: Path, delta: uuid.UUID, anvil: uuid.UUID) -> FederationConfig:
    return FederationConfig.model_validate(
        {
            "home": str(tmp_path),
            "service": settings().model_dump(mode="json"),
            "placement": "best-feasible",
            "sites": {
                "delta": {
                    "backend": "globus",
                    "endpoint_id": str(delta),
                    "transfer_collection_id": SRC,
                    "collection_path_prefix": "/projects/delta/",
                    "job_check_s": None,
                },
                "anvil": {
                    "backend": "globus",
                    "endpoint_id": str(anvil),
                    "transfer_collection_id": DST,
                    "collection_path_prefix": "/scratch/fed/",
                    "job_check_s": None,
                },
            },
        }
    )


def _bearer(url_part: str) -> list[tuple[str, dict[str, Any]]]:
    """(Authorization, JSON body) of every recorded request whose URL has ``url_part``."""
    out = []
    for c in responses.calls:
        if url_part in c.request.url:
            body = json.loads(c.request.body) if c.request.body else {}
            out.append((c.request.headers["Authorization"], body))
    return out


@dataclass
class CloudWorld:
    delta: Cloud
    coord: Coordinator
    sets: CallerSiteSets


@pytest.fixture
def cloud_world(
    callers: GlobusCallers, tmp_path: Path, secret_registry: Any
) -> Iterator[CloudWorld]:
    """A coordinator from a ``federation.yaml`` with two Globus Compute sites (delta
    answered by the Compute stand-in of test_cloud_backend), Globus callers, and the
    service's own Compute and Transfer clients (a fixed token: the service's login is not
    what is tested here)."""
    secret_registry.add(SERVICE_COMPUTE)
    secret_registry.add(SERVICE_TRANSFER)
    delta = Cloud(uuid.uuid4())
    delta.routes()
    delta.status("online")
    delta.metadata(None)
    dep = Deployment(
        _config(tmp_path, delta.endpoint_id, uuid.uuid4()),
        home=tmp_path,
        executor_factory=factory,
        client_factory=lambda _: Client(
            authorizer=globus_sdk.AccessTokenAuthorizer(SERVICE_COMPUTE), do_version_check=False
        ),
        transfer_client_factory=lambda _: globus_sdk.TransferClient(
            authorizer=globus_sdk.AccessTokenAuthorizer(SERVICE_TRANSFER)
        ),
    )
    coord = dep.connect(telemetry=False, callers=callers)
    sets = coord.caller_sites
    assert isinstance(sets, CallerSiteSets)
    try:
        yield CloudWorld(delta, coord, sets)
    finally:
        coord.close()
        dep.close()
        for rw in WatchedExecutor.watchers.values():
            rw._time_to_stop = True
            rw._time_to_check_results.set()
        WatchedExecutor.watchers.clear()


def test_two_callers_ship_tasks_and_transfers_with_their_own_tokens(
    cloud_world: CloudWorld, callers: GlobusCallers, auth: GlobusAuth, person: Any
) -> None:
    delta, coord, sets = cloud_world.delta, cloud_world.coord, cloud_world.sets
    alice, bob = person("alice@uni.edu"), person("bob@lab.gov")
    for p in (alice, bob):
        callers.authenticate(p.token)
    snap = idle_snapshot([load_site("delta"), load_site("anvil")])
    env = ResourceEnvelope(walltime_s=300, sites=("delta",))
    handles = {
        p.username: coord.submit_task(
            PythonTask(square, (n,)), env, caller=p.username, snapshot=snap
        )
        for p, n in ((alice, 3), (bob, 4))
    }
    # each one's task went out with their own Compute token, in their own task group
    groups = {p.username: caller_task_group(sets.task_group_id, p.sub) for p in (alice, bob)}
    for p in (alice, bob):
        site = coord.site_for(p.username, "delta")
        assert isinstance(site, CloudSite) and site is not coord.backends["delta"]
        assert site.task_group_id == groups[p.username]
        h = handles[p.username]
        assert h.future is not None
        tid = _wait_task_id(h.future)
        deliver(site, site.client, tid, {"alice@uni.edu": 9, "bob@lab.gov": 16}[p.username])
    submits = _bearer(f"/v3/endpoints/{delta.endpoint_id}/submit")
    by_token = {auth_header: body["task_group_id"] for auth_header, body in submits}
    assert by_token == {
        f"Bearer {alice.compute}": str(groups["alice@uni.edu"]),
        f"Bearer {bob.compute}": str(groups["bob@lab.gov"]),
    }
    assert coord.get_result(handles["alice@uni.edu"], 30).value == 9
    assert coord.get_result(handles["bob@lab.gov"], 30).value == 16
    # data moves as each caller too
    _stat(responses.mock)
    _accept(responses.mock)
    _task(responses.mock, "SUCCEEDED", bytes_transferred=10, files_transferred=1)
    moves = [
        coord.move_data(
            "delta", "runs/in.bin", "anvil", f"in-{p.sub}.bin", caller=p.username, paths="storage"
        )
        for p in (alice, bob)
    ]
    for m in moves:
        assert m.wait(30) and m.state == "succeeded", m.as_dict()
    transfer_calls = [a for a, _ in _bearer("transfer.api.globus.org")]
    assert set(transfer_calls) == {f"Bearer {alice.transfer}", f"Bearer {bob.transfer}"}
    # nothing a caller shipped carried the service's own token
    every = {c.request.headers.get("Authorization") for c in responses.calls}
    assert f"Bearer {SERVICE_COMPUTE}" not in every
    assert f"Bearer {SERVICE_TRANSFER}" not in every
    # a caller who is not a Globus identity (the in-process user) uses the shared site
    assert coord.site_for("local", "delta") is coord.backends["delta"]


def test_through_the_service_a_callers_task_goes_out_with_their_token(
    cloud_world: CloudWorld, auth: GlobusAuth, person: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path: alice's Globus token at the HTTP service, her task at the Compute
    web service with her own Compute token; her logout drops her backends."""
    coord, sets = cloud_world.coord, cloud_world.sets
    # probing runs on the endpoint (the result stream cannot run here): an idle snapshot
    snap = idle_snapshot([load_site("delta"), load_site("anvil")])
    monkeypatch.setattr(coord, "inspect_federation", lambda: snap)
    alice = person("alice@uni.edu")
    with running(create_app(coord, sets.callers, refresh_s=3600)) as base:
        http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {alice.token}"}, timeout=30
        )
        with http:
            r = http.post(
                "/v1/tasks",
                json={
                    "function": "square",
                    "args": [5],
                    "envelope": {"walltime_s": 300, "sites": ["delta"]},
                },
            )
            assert r.status_code == 202, r.text
            assert coord.events.owner_of(r.json()["task_id"]) == "alice@uni.edu"
            deadline = time.monotonic() + 30
            while not _bearer(f"/v3/endpoints/{cloud_world.delta.endpoint_id}/submit"):
                assert time.monotonic() < deadline, "alice's task never reached Compute"
                time.sleep(0.02)
            ((header, body),) = _bearer(f"/v3/endpoints/{cloud_world.delta.endpoint_id}/submit")
            assert header == f"Bearer {alice.compute}"
            assert body["task_group_id"] == str(caller_task_group(sets.task_group_id, alice.sub))
            out = http.post("/v1/logout", params={"force": "true"})
            assert out.status_code == 200, out.text
            assert out.json()["revoked"] == 4 and out.json()["open_work"]
        assert "alice@uni.edu" not in sets._sets  # her backends closed and dropped


def _wait_task_id(fut: Any, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while getattr(fut, "task_id", None) is None:
        if fut.done() and fut.exception() is not None:
            raise fut.exception()
        assert time.monotonic() < deadline, "the SDK never submitted the task"
        time.sleep(0.01)
    return str(fut.task_id)


# --- the caller's side: `federation token globus` -----------------------------------------------


@pytest.mark.parametrize("expired", [False, True])
def test_token_globus_prints_a_current_token_for_the_scope(
    mock: responses.RequestsMock, tmp_path: Path, secret_registry: Any, expired: bool
) -> None:
    """The caller's own login (globus-sdk's UserApp over a token file): a stored token for
    the service's scope is printed; an expired one is refreshed first."""
    stored, fresh, refresh = globus_token(), globus_token(), globus_token()
    for s in (stored, fresh, refresh):
        secret_registry.add(s)
    rs = str(SERVICE_CLIENT)
    path = tmp_path / "my-tokens.json"
    JSONTokenStorage(path).store_token_data_by_resource_server(
        {
            rs: TokenStorageData(
                resource_server=rs,
                identity_id=str(uuid.uuid4()),
                scope=SCOPE,
                access_token=stored,
                refresh_token=refresh,
                expires_at_seconds=int(time.time()) + (-60 if expired else 3600),
                token_type="Bearer",
            )
        }
    )
    responses.add(
        responses.POST,
        TOKEN_URL,
        json={**token_doc(rs, SCOPE, fresh, refresh), "other_tokens": []},
        match=[
            matchers.urlencoded_params_matcher(
                {
                    "grant_type": "refresh_token",
                    "refresh_token": refresh,
                    "client_id": str(GLOBUS_COMPUTE_NATIVE_CLIENT_ID),
                }
            )
        ],
    )
    app = typer.Typer()
    register_service(app)
    out = CliRunner().invoke(
        app, ["token", "globus", "--scope", SCOPE, "--token-storage", str(path)]
    )
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == (fresh if expired else stored)
    bad = CliRunner().invoke(app, ["token", "globus", "--scope", "openid"])
    assert bad.exit_code == 2 and "not a service scope" in bad.output


def test_the_globus_mode_needs_the_services_client(tmp_path: Path) -> None:
    cfg = tmp_path / "federation.yaml"
    cfg.write_text("service:\n  auth: globus\nsites:\n  local:\n    backend: local\n")
    with pytest.raises(ConfigError, match=r"service: auth globus needs client_id"):
        load_config(cfg)
    cfg.write_text(
        f"service:\n  auth: globus\n  client_id: {SERVICE_CLIENT}\n" + "sites:\n  local: {}\n"
    )
    assert load_config(cfg).service.effective_scope == SCOPE
