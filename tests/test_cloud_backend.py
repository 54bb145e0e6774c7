"""The cloud site backend through the REAL globus_compute_sdk Client and Executor.

Only the Globus web services are answered, at the transport seam, by the ``responses``
library (and ``globus_sdk.testing`` registered responses where they exist); the AMQP
result stream, which cannot run here, is the SDK's own result watcher fed in-process
(``federation.standin.compute_service.InProcessResultWatcher``). Globus Auth runs for real through a
``ClientApp`` whose client-credentials grant is answered the same way.
"""

from __future__ import annotations

import json
import platform
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any
from urllib.parse import parse_qs

import globus_sdk
import pytest
import responses
from globus_compute_common.messagepack.message_types import Result
from globus_compute_sdk import Client, Executor
from globus_compute_sdk.sdk.executor import _ResultWatcher
from globus_sdk.testing import get_response_set

from federation.core.envelope import Shape
from federation.core.errors import (
    LoginRequiredError,
    PayloadTooLargeError,
    PermissionDeniedError,
    SiteUnavailableError,
    VersionMismatchError,
)
from federation.core.spec import load_site
from federation.core.tasks import PythonTask, ShellTask
from federation.sites import jobtags
from federation.sites.cloud import PAYLOAD_LIMIT_BYTES, CloudSite, payload_size_bytes
from federation.sites.globus_auth import AuthSettings, build_app
from federation.sites.user_config import shape_to_user_config
from federation.standin.compute_service import InProcessResultWatcher
from functions.workloads import square

COMPUTE = "https://compute.api.globus.org"
TOKEN_URL = "https://auth.globus.org/v2/oauth2/token"
SECRET_ENV = "FEDERATION_TEST_CLIENT_SECRET"
ACCESS_TOKEN = "compute-token-from-client-credentials"


def token_doc(rs: str, scope: str, token: str) -> dict[str, Any]:
    return {
        "access_token": token,
        "scope": scope,
        "expires_in": 172800,
        "token_type": "Bearer",
        "resource_server": rs,
        "other_tokens": [],
    }


def register_client_credentials_grant() -> list[str]:
    """Globus Auth's answer to each client-credentials grant: a token for the scope asked.

    Returns the list the requested scopes are appended to, one entry per grant.
    """
    by_scope = {
        str(globus_sdk.scopes.ComputeScopes.all): ("funcx_service", ACCESS_TOKEN),
        str(globus_sdk.scopes.TransferScopes.all): ("transfer.api.globus.org", "transfer-token"),
        "openid": ("auth.globus.org", "auth-token"),
    }
    asked: list[str] = []

    def grant(request: Any) -> tuple[int, dict[str, str], str]:
        form = parse_qs(request.body if isinstance(request.body, str) else request.body.decode())
        assert form["grant_type"] == ["client_credentials"]
        scope = form["scope"][0].split()[0]
        asked.append(scope)
        rs, token = by_scope[scope]
        return 200, {}, json.dumps(token_doc(rs, scope, token))

    responses.add_callback(
        responses.POST, TOKEN_URL, callback=grant, content_type="application/json"
    )
    return asked


class WatchedExecutor(Executor):  # type: ignore[misc]
    """The real Executor; its AMQP result watcher is replaced by an in-process one."""

    watchers: dict[str, InProcessResultWatcher] = {}

    def _get_result_watcher(self) -> _ResultWatcher:
        key = str(self.task_group_id)
        rw = self.watchers.get(key)
        if rw is None or not rw.is_alive():
            rw = InProcessResultWatcher(self.task_group_id, self.client, poll_period_s=0.5)
            rw.start()
            self.watchers[key] = rw
        return rw


def factory(eid: uuid.UUID, client: Client, uec: dict[str, Any], tg: uuid.UUID) -> Executor:
    ex = WatchedExecutor(endpoint_id=eid, client=client, user_endpoint_config=uec, task_group_id=tg)
    ex.api_burst_limit = 1000
    return ex


class Cloud:
    """The web service's answers for one endpoint, recorded so tests can read requests."""

    def __init__(self, endpoint_id: uuid.UUID) -> None:
        self.endpoint_id = endpoint_id
        self.submits: list[dict[str, Any]] = []
        self.task_ids: list[str] = []

    def status(self, state: str = "online", http: int = 200, body: Any = None) -> None:
        responses.upsert(
            responses.GET,
            f"{COMPUTE}/v2/endpoints/{self.endpoint_id}/status",
            json=body if body is not None else {"status": state, "details": {}},
            status=http,
        )

    def metadata(self, python_version: str | None) -> None:
        # the globus-sdk project's own sample of this route's answer
        doc = get_response_set("compute.v2.get_endpoint").lookup("default").json
        assert isinstance(doc, dict)
        doc = {**doc, "uuid": str(self.endpoint_id)}
        if python_version is not None:
            doc["python_version"] = python_version
        responses.upsert(responses.GET, f"{COMPUTE}/v2/endpoints/{self.endpoint_id}", json=doc)

    def routes(self) -> None:
        responses.add(
            responses.GET,
            f"{COMPUTE}/v2/version",
            json={"api": "1.0", "min_ep_version": "2.0.0", "min_sdk_version": "2.0.0"},
        )
        responses.add(
            responses.POST, f"{COMPUTE}/v3/functions", json={"function_uuid": str(uuid.uuid4())}
        )
        responses.add_callback(
            responses.POST,
            f"{COMPUTE}/v3/endpoints/{self.endpoint_id}/submit",
            callback=self._submit,
            content_type="application/json",
        )

    def _submit(self, request: Any) -> tuple[int, dict[str, str], str]:
        body = json.loads(request.body)
        self.submits.append(body)
        tasks: dict[str, list[str]] = {}
        for fid, payloads in body["tasks"].items():
            ids = [str(uuid.uuid4()) for _ in payloads]
            self.task_ids.extend(ids)
            tasks[fid] = ids
        doc = {
            "request_id": str(uuid.uuid4()),
            "task_group_id": body["task_group_id"],
            "endpoint_id": str(self.endpoint_id),
            "tasks": tasks,
        }
        return 200, {}, json.dumps(doc)


@pytest.fixture
def mocked() -> Iterator[None]:
    responses.start()
    try:
        yield
    finally:
        responses.stop()
        responses.reset()


@pytest.fixture
def auth(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> AuthSettings:
    monkeypatch.setenv(SECRET_ENV, "s3cret")
    return AuthSettings(
        mode="client_credentials",
        client_id=uuid.uuid4(),
        client_secret_env=SECRET_ENV,
        token_storage=tmp_path / "tokens.json",
    )


@pytest.fixture
def cloud(mocked: None) -> Cloud:
    c = Cloud(uuid.uuid4())
    c.routes()
    c.status("online")
    c.metadata(None)
    return c


@pytest.fixture
def client(cloud: Cloud, auth: AuthSettings) -> Client:
    register_client_credentials_grant()
    cl = Client(app=build_app(auth))  # real version check through the seam
    for web in (cl._compute_web_client.v2, cl._compute_web_client.v3):
        web.retry_config.max_retries = 0  # a 429 test must not sleep through backoffs
    return cl


@pytest.fixture
def site(cloud: Cloud, client: Client, auth: AuthSettings) -> Iterator[CloudSite]:
    s = CloudSite(
        load_site("delta"),
        cloud.endpoint_id,
        client,
        auth=auth,
        executor_factory=factory,
        account="bbka-delta",
    )
    try:
        yield s
    finally:
        _close(s)


def _close(site: CloudSite) -> None:
    """Close ``site`` and stop the in-process result watchers its executors used."""
    site.close()
    for rw in WatchedExecutor.watchers.values():
        rw._time_to_stop = True
        rw._time_to_check_results.set()
    WatchedExecutor.watchers.clear()


SHAPE = Shape(
    site="delta",
    partition="cpu",
    nodes=1,
    cpus=4,
    mem_gb=8,
    gpus=0,
    walltime_s=600,
    account="bbka-delta",
)


def deliver(site: CloudSite, client: Client, task_id: str, value: Any) -> None:
    """What the AMQP result queue would carry, once the SDK watches for the task."""
    import time

    deadline = time.monotonic() + 30
    while True:
        rw = WatchedExecutor.watchers.get(str(site.task_group_id))
        if rw is not None and task_id in rw._open_futures:
            break
        assert time.monotonic() < deadline, "the SDK never watched for the task's result"
        time.sleep(0.01)
    rw.deliver(Result(task_id=uuid.UUID(task_id), data=client.fx_serializer.serialize(value)))


def submit_requests() -> list[Any]:
    return [c for c in responses.calls if c.request.url.endswith("/submit")]


def task_submits() -> list[Any]:
    """Submissions of tasks (not the login-node shell functions that read squeue)."""
    return [
        c
        for c in submit_requests()
        if json.loads(c.request.body)["user_endpoint_config"].get("profile") != "probe"
    ]


def test_submit_goes_through_the_real_sdk_with_shape_and_token(
    site: CloudSite, cloud: Cloud, client: Client
) -> None:
    fut = site.submit(PythonTask(square, (7,)), SHAPE)
    # the SDK's submit thread posts the batch; the future learns its task id from it
    tid = _wait_task_id(fut)
    assert tid in cloud.task_ids
    (body,) = [b for b in cloud.submits if b["user_endpoint_config"]["profile"] == "task"]
    uec = dict(body["user_endpoint_config"])
    shape_jobs = uec.pop("job_tag")  # the shape's batch jobs are named fed.<shape>
    bare = shape_to_user_config(
        partition="cpu", nodes=1, cpus=4, mem_gb=8, gpus=0, walltime_s=600, account="bbka-delta"
    )
    assert uec == bare and shape_jobs == jobtags.shape_tag(bare)  # nothing of the task in it
    # the task's own tag rides in its arguments: it claims ~/.federation-jobs/claims/<tag>
    (tracked,) = site.jobs._tracked.values() if site.jobs else ()
    assert re.fullmatch(r"[0-9a-f]{20}", tracked.tag) and tracked.shape == shape_jobs
    assert body["task_group_id"] == str(site.task_group_id)
    auth_header = submit_requests()[0].request.headers["Authorization"]
    assert auth_header == f"Bearer {ACCESS_TOKEN}"  # from the client-credentials grant
    deliver(site, client, tid, 49)
    assert fut.result(timeout=30) == 49


def test_one_executor_per_user_endpoint_config_never_mutated(site: CloudSite) -> None:
    a = site.submit(ShellTask(command="true"), SHAPE)
    b = site.submit(ShellTask(command="true"), SHAPE)
    other = SHAPE.model_copy(update={"cpus": 8})
    c = site.submit(ShellTask(command="true"), other)
    for f in (a, b, c):
        _wait_task_id(f)
    uec = site.shape_config(SHAPE)
    ex = site.executor(uec)
    assert ex.user_endpoint_config == uec  # the first shape's executor kept its config
    shapes = [k for k in site._executors if '"probe"' not in k]  # the probe's reads squeue
    assert len(shapes) == 2


def test_offline_endpoint_is_site_unavailable_and_nothing_is_sent(
    site: CloudSite, cloud: Cloud
) -> None:
    cloud.status("offline")
    with pytest.raises(SiteUnavailableError, match=r"offline.*globus-compute-endpoint start"):
        site.submit(PythonTask(square, (2,)), SHAPE)
    with pytest.raises(SiteUnavailableError, match="offline"):
        site.probe()
    assert submit_requests() == []


def test_endpoint_back_online_is_noticed_without_restart(site: CloudSite, cloud: Cloud) -> None:
    cloud.status("offline")
    with pytest.raises(SiteUnavailableError):
        site.submit(ShellTask(command="true"), SHAPE)
    cloud.status("online")
    _wait_task_id(site.submit(ShellTask(command="true"), SHAPE))
    assert len(task_submits()) == 1


def test_unknown_endpoint_id_names_the_config_field(site: CloudSite, cloud: Cloud) -> None:
    cloud.status(http=404, body={"code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"})
    with pytest.raises(SiteUnavailableError, match=r"sites\.delta\.endpoint_id"):
        site.submit(ShellTask(command="true"), SHAPE)


def test_payload_over_10_mb_is_refused_before_any_request(site: CloudSite, client: Client) -> None:
    big = b"x" * (PAYLOAD_LIMIT_BYTES + 1)
    task = PythonTask(len, (big,))
    assert payload_size_bytes(client, task) > PAYLOAD_LIMIT_BYTES
    before = len(responses.calls)
    with pytest.raises(PayloadTooLargeError, match="move_data") as err:
        site.submit(task, SHAPE)
    assert "10 MB" in str(err.value)
    assert len(responses.calls) == before  # not even the endpoint status was asked


def test_payload_under_the_limit_is_measured_not_refused(client: Client) -> None:
    small = PythonTask(len, (b"x" * 1000,))
    size = payload_size_bytes(client, small)
    assert 1000 < size < PAYLOAD_LIMIT_BYTES


def test_python_mismatch_names_both_versions(site: CloudSite, cloud: Cloud) -> None:
    cloud.metadata("2.7.18")
    with pytest.raises(VersionMismatchError, match=r"Python 3\.\d+.*Python 2\.7\.18"):
        site.submit(PythonTask(square, (2,)), SHAPE)
    # shell tasks do not pickle Python objects across the gap: they go, with a warning
    _wait_task_id(site.submit(ShellTask(command="true"), SHAPE))
    assert any("2.7.18" in w for w in site.warnings)


def test_python_mismatch_warn_mode_submits(
    cloud: Cloud, client: Client, auth: AuthSettings
) -> None:
    cloud.metadata("2.7.18")
    s = CloudSite(
        load_site("delta"),
        cloud.endpoint_id,
        client,
        auth=auth,
        executor_factory=factory,
        python_mismatch="warn",
    )
    try:
        _wait_task_id(s.submit(PythonTask(square, (2,)), SHAPE))
        assert s.warnings and "2.7.18" in s.warnings[0]
    finally:
        s.close()


@pytest.mark.parametrize(
    ("http", "code", "error", "text"),
    [
        (401, "UNAUTHORIZED", LoginRequiredError, "federation login"),
        (403, "FORBIDDEN", PermissionDeniedError, "administrator"),
        (429, "TOO_MANY_REQUESTS", SiteUnavailableError, "rate-limiting"),
    ],
)
def test_service_refusals_become_clear_errors(
    site: CloudSite, cloud: Cloud, http: int, code: str, error: type[Exception], text: str
) -> None:
    cloud.status(http=http, body={"code": code, "message": f"{http} on purpose"})
    with pytest.raises(error, match=text):
        site.submit(ShellTask(command="true"), SHAPE)
    assert submit_requests() == []


def _task_group_answers(tg: uuid.UUID, results: dict[str, dict[str, Any]]) -> None:
    """The service's answers to a reload: the task group lists ``results``' tasks, and
    their batch status is ``results``."""
    responses.add(
        responses.GET,
        f"{COMPUTE}/v2/taskgroup/{tg}",
        json={"taskgroup_id": str(tg), "tasks": [{"id": t} for t in results]},
    )
    responses.add(
        responses.POST,
        f"{COMPUTE}/v2/batch_status",
        json={"response": "batch", "results": results},
    )


def test_reattach_reloads_the_task_group(site: CloudSite, client: Client) -> None:
    done, running = str(uuid.uuid4()), str(uuid.uuid4())
    _task_group_answers(
        site.task_group_id,
        {
            done: {
                "task_id": done,
                "status": "success",
                "result": client.fx_serializer.serialize(81),
                "completion_t": "1700000000.0",
            },
            running: {"task_id": running, "status": "running"},
        },
    )
    futs = site.reattach([done, running])
    assert set(futs) == {done, running}
    assert futs[done].result(timeout=10) == 81
    assert not futs[running].done()


def test_every_site_reattaches_its_tasks_from_the_one_task_group(
    site: CloudSite, client: Client, auth: AuthSettings
) -> None:
    """The sites of a coordinator share its task group: the first site's reload opens
    futures for every site's tasks, and the SDK's reload skips tasks a watcher already
    holds, so a second site's reload used to find nothing ("Received no tasks") and its
    tasks were reported as no longer known (issue 25)."""
    other = CloudSite(
        load_site("vista"),
        uuid.uuid4(),
        client,
        auth=auth,
        executor_factory=factory,
        task_group_id=site.task_group_id,
        account="ASC23000",
    )
    on_delta, on_vista = str(uuid.uuid4()), str(uuid.uuid4())
    tg = str(site.task_group_id)
    _task_group_answers(
        site.task_group_id,
        {t: {"task_id": t, "status": "running"} for t in (on_delta, on_vista)},
    )
    result = client.fx_serializer.serialize
    try:
        assert set(site.reattach([on_delta])) == {on_delta}
        again = other.reattach([on_vista])  # still running: the first reload watches it
        assert set(again) == {on_vista}
        # and its result reaches the future the second site handed out
        rw = WatchedExecutor.watchers[tg]
        rw.deliver(Result(task_id=uuid.UUID(on_vista), data=result(7)))
        assert again[on_vista].result(timeout=10) == 7
    finally:
        _close(other)


def _wait_task_id(fut: Any, timeout_s: float = 30.0) -> str:
    import time

    deadline = time.monotonic() + timeout_s
    while fut.task_id is None:
        if fut.done() and fut.exception() is not None:
            raise fut.exception()
        assert time.monotonic() < deadline, "the SDK never submitted the task"
        time.sleep(0.01)
    return str(fut.task_id)


def test_the_workers_python_decides_not_the_endpoint_process(site: CloudSite, cloud: Cloud) -> None:
    """The endpoint's metadata gives its own process's Python; the workers (what runs the
    task) may run another, and the probe (which runs on them) reports theirs."""
    mine = platform.python_version()
    cloud.metadata(mine)  # the endpoint process matches the coordinator...
    done: Future[dict[str, Any]] = Future()
    done.set_result({"python_version": "3.9.18"})
    site._learn_worker_python(done)  # ...but the last probe ran on Python 3.9 workers
    with pytest.raises(VersionMismatchError, match=r"the site's workers run Python 3\.9\.18"):
        site.submit(PythonTask(square, (2,)), SHAPE)


def test_a_fan_out_of_one_shape_is_one_config_one_function_and_batched_requests(
    cloud: Cloud, client: Client, auth: AuthSettings
) -> None:
    """200 tasks of one shape, the SDK's own client-side limits as it ships them: one
    user_endpoint_config (so one user endpoint process on the site), the shell function
    registered once (also for a second shape), and the tasks batched into a few requests
    (at most 128 per request).
    Before shipping per shape, every task carried its own job_tag (200 configs, 200
    requests, 200 registrations)."""

    def sdk_defaults(eid: uuid.UUID, c: Client, uec: dict[str, Any], tg: uuid.UUID) -> Executor:
        return WatchedExecutor(
            endpoint_id=eid, client=c, user_endpoint_config=uec, task_group_id=tg
        )

    site = CloudSite(
        load_site("delta"),
        cloud.endpoint_id,
        client,
        auth=auth,
        executor_factory=sdk_defaults,
        account="bbka-delta",
        job_check_s=3600.0,  # no look during the test: only task submissions are counted
    )
    try:
        futs = [site.submit(ShellTask(command=f"echo {i}"), SHAPE) for i in range(200)]
        # a second shape: a config (and executor) of its own, the function not registered
        # again (its id is passed to the new executor)
        other = SHAPE.model_copy(update={"cpus": SHAPE.cpus + 1})
        futs += [site.submit(ShellTask(command=f"echo {i}"), other) for i in range(5)]
        for f in futs:
            _wait_task_id(f, timeout_s=120.0)
        bodies = [json.loads(c.request.body) for c in task_submits()]
        configs = {json.dumps(b["user_endpoint_config"], sort_keys=True) for b in bodies}
        assert len(configs) == 2
        assert sum(len(p) for b in bodies for p in b["tasks"].values()) == 205
        assert all(len(p) <= 128 for b in bodies for p in b["tasks"].values())
        # the SDK sends what its queue holds when it wakes: its first few requests go out
        # small, then its own pacing (4 small requests per 16 s) lets the rest gather into
        # batches; before, each task was a request of its own (200)
        assert len(bodies) <= 13, [sum(len(p) for p in b["tasks"].values()) for b in bodies]
        registrations = [c for c in responses.calls if c.request.url.endswith("/v3/functions")]
        assert len(registrations) == 1
        tags = {x.tag for x in site.jobs._tracked.values()} if site.jobs else set()
        assert len(tags) == 205  # each task still claims a tag of its own
    finally:
        _close(site)
