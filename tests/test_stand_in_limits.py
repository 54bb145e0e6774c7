"""The web-service stand-in's limits are the Globus Compute service's (docs/stand-in.md).

Through the real SDK ``Client``/``Executor`` only: the request rate (20 per 10 s per
identity, answered 429 with ``Retry-After``), the SDK's own client-side throttle left as
shipped, the abandonment window of an unfetched result, the 10 MB limit on a submission
counted whole, and the identity each forwarded task carries to its endpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import globus_sdk
import pytest
from globus_compute_sdk import Client
from globus_sdk import GlobusAPIError
from test_stand_in import (
    BEAT,
    EID,
    PROBE,
    SITE,
    make_service,
    wait_for,
)

from federation.endpoint.manager import EndpointDaemons
from federation.sites.cloud import PAYLOAD_LIMIT_BYTES
from federation.sites.shipping import executor_serializer
from federation.standin.compute_service import LocalComputeService
from federation.standin.rate_limit import ANONYMOUS, RateLimit
from federation.standin.task_memory import TaskMemory
from functions.workloads import square


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[EndpointDaemons]:
    d = EndpointDaemons(tmp_path / "home")
    try:
        yield d
    finally:
        d.stop(SITE)


Served = tuple[float, str, str, int, dict[str, str]]
"""(monotonic time, method, path, status, headers) of a request the service answered."""


def answered(fut: Any, timeout_s: float) -> str:
    """The task id of a submitted future, once the service answered its submission."""
    wait_for(lambda: fut.task_id is not None, timeout_s, "the submission was answered")
    return str(fut.task_id)


def record(svc: LocalComputeService, monkeypatch: pytest.MonkeyPatch) -> list[Served]:
    """Every request the service answers from now on, timed where it is answered."""
    served: list[Served] = []
    lock = threading.Lock()
    answer = svc.handle

    def handle(method: str, path: str, body: Any, identity: str = ANONYMOUS) -> Any:
        status, payload, headers = answer(method, path, body, identity)
        with lock:
            served.append((time.monotonic(), method, path, status, dict(headers)))
        return status, payload, headers

    monkeypatch.setattr(svc, "handle", handle)
    return served


@contextlib.contextmanager
def no_retries(client: Client) -> Iterator[None]:
    """The SDK's own switch: each 429 reaches the caller instead of being waited out."""
    with contextlib.ExitStack() as stack:
        for web in (client._compute_web_client.v2, client._compute_web_client.v3):
            stack.enter_context(web.retry_config.tune(max_retries=0))
        yield


def bearer(token: str) -> globus_sdk.AccessTokenAuthorizer:
    return globus_sdk.AccessTokenAuthorizer(token)


def test_over_20_requests_in_10_s_an_identity_is_refused_429_with_retry_after(
    daemons: EndpointDaemons,
) -> None:
    svc = make_service(daemons)  # the documented limit: 20 requests per 10 s per client
    alice = svc.client(bearer("alice-token"))  # its version check is request 1
    bob = svc.client(bearer("bob-token"))
    anonymous = svc.client()
    try:
        refused: list[GlobusAPIError] = []
        t0 = time.monotonic()
        with no_retries(alice):
            for _ in range(25):
                try:
                    alice.get_endpoint_status(EID)
                except GlobusAPIError as e:
                    refused.append(e)
        assert time.monotonic() - t0 < 10  # all 25 within one window
        assert len(refused) == 6  # 1 + 19 admitted, the last 6 refused
        for err in refused:
            assert (err.http_status, err.code) == (429, "TOO_MANY_REQUESTS")
            assert 1 <= int(err.headers["Retry-After"]) <= 10
        # another identity (and the anonymous one) has a window of its own
        with no_retries(bob), no_retries(anonymous):
            for _ in range(10):
                assert bob.get_endpoint_status(EID)["status"] == "offline"
                assert anonymous.get_endpoint_status(EID)["status"] == "offline"
    finally:
        svc.close()


def test_the_sdk_waits_out_a_429_as_its_retry_after_says(
    daemons: EndpointDaemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's retries are left as shipped: a 429 is retried after its Retry-After."""
    svc = make_service(daemons, rate_limit=RateLimit(requests=3, window_s=2.0))
    served = record(svc, monkeypatch)
    client = svc.client()
    try:
        for _ in range(5):  # none fails: the SDK waits and retries
            assert client.get_endpoint_status(EID)["status"] == "offline"
        statuses = [s[3] for s in served]
        assert statuses.count(200) == 6 and 429 in statuses  # the version check + 5
        for before, after in itertools.pairwise(served):
            if before[3] == 429:  # the next try came no sooner than it was told
                assert after[0] - before[0] >= int(before[4]["Retry-After"]) - 0.05
    finally:
        svc.close()


def test_the_executor_throttles_itself_as_the_sdk_ships_it(
    daemons: EndpointDaemons, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10 single-task submissions: 4 at once (``api_burst_limit``), then one per
    ``api_burst_window_s / api_burst_limit`` = 4 s (less the time since the previous
    send, plus up to 1 s of jitter), as the SDK's own Executor paces itself."""
    svc = make_service(daemons)  # no daemon: each task waits in the service's queue
    served = record(svc, monkeypatch)
    client = svc.client()
    client.fx_serializer = executor_serializer()
    ex = svc.executor(EID, client, user_endpoint_config=PROBE)
    try:
        assert (ex.api_burst_limit, ex.api_burst_window_s, ex.batch_size) == (4, 16, 128)
        for i in range(10):  # one at a time: each its own submission request
            answered(ex.submit(square, i), 15)
        sent = [t for t, method, path, *_ in served if method == "POST" and "/submit" in path]
        assert len(sent) == 10
        assert sent[3] - sent[0] < 2.0  # the burst goes at once
        gaps = [b - a for a, b in itertools.pairwise(sent[3:])]
        assert all(g >= 3.0 for g in gaps), gaps  # the 5th and later wait their turn
        assert all(s[3] == 200 for s in served)  # so the service never had to refuse
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


def test_a_result_not_fetched_within_the_window_is_gone(
    daemons: EndpointDaemons, caplog: pytest.LogCaptureFixture
) -> None:
    window = 3.0
    daemons.start(SITE, BEAT)
    svc = make_service(daemons, strict=True, result_retention_s=window)
    client = svc.client()
    client.fx_serializer = executor_serializer()
    ex = svc.executor(EID, client, user_endpoint_config=PROBE)
    try:
        streamed = ex.submit(square, 5)  # delivered to its live result watcher: fetched
        assert streamed.result(timeout=60) == 25  # (and the engine is up)
        fid = client.register_function(square)
        batch = client.create_batch(user_endpoint_config=PROBE)  # a group nobody watches
        batch.add(fid, args=(3,))
        batch.add(fid, args=(4,))
        kept, dropped = client.batch_run(EID, batch)["tasks"][fid]
        wait_for(  # watched inside the service: asking over HTTP would fetch them
            lambda: all(svc._tasks[t].completed_at for t in (kept, dropped)), 60, "results"
        )
        completed = max(svc._tasks[t].completed_at or 0.0 for t in (kept, dropped))
        assert client.get_result(kept) == 9  # fetched in time: served
        time.sleep(max(0.0, completed + window - time.time()) + 0.1)  # both windows are over

        with (
            caplog.at_level(logging.WARNING, logger="federation.standin"),
            pytest.raises(GlobusAPIError) as err,
        ):
            client.get_task(dropped)
        assert (err.value.http_status, err.value.code) == (404, "TASK_NOT_FOUND")
        assert client.get_batch_result([dropped]) == {}  # not in a batch status either
        assert client.get_result(kept) == 9  # the client keeps what it fetched
        assert not svc._tasks  # every result past its window is released, fetched or not
        abandoned = [r.getMessage() for r in caplog.records if "abandoned" in r.getMessage()]
        assert len(abandoned) == 1 and dropped in abandoned[0]
        assert kept not in abandoned[0] and str(streamed.task_id) not in abandoned[0]
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


def test_a_batch_of_two_6_mb_tasks_is_refused_whole(daemons: EndpointDaemons) -> None:
    svc = make_service(daemons)  # refused on submission: no endpoint needed
    client = svc.client()
    try:
        fid = client.register_function(len)
        arg = "x" * 4_450_000  # serialized with the function: about 6 MB
        pair = client.create_batch()
        pair.add(fid, args=(arg,))
        pair.add(fid, args=(arg,))
        sizes = [len(p.encode()) for p in pair.prepare()["tasks"][fid]]  # type: ignore[index]
        assert all(5_500_000 < s < 6_500_000 for s in sizes), sizes
        assert max(sizes) < PAYLOAD_LIMIT_BYTES < sum(sizes)
        with pytest.raises(GlobusAPIError) as err:
            client.batch_run(EID, pair)
        assert (err.value.http_status, err.value.code) == (413, "TASK_PAYLOAD_TOO_LARGE")
        assert client.get_endpoint_status(EID)["details"]["queued_tasks"] == 0  # neither
        one = client.create_batch()
        one.add(fid, args=(arg,))
        (tid,) = client.batch_run(EID, one)["tasks"][fid]  # each alone is taken
        assert client.get_endpoint_status(EID)["details"]["queued_tasks"] == 1
        assert client.get_task(tid)["status"] == "waiting-for-ep"
    finally:
        svc.close()


def test_each_forwarded_task_names_its_submitters_identity(
    daemons: EndpointDaemons, tmp_path: Path
) -> None:
    """The endpoint runs one process per (identity, user endpoint config): every forwarded
    ``submit`` names the identity (a hash of the bearer token, never the token)."""
    memory = tmp_path / "compute-service.db"
    svc = make_service(daemons, strict=True, memory=memory)  # offline: the tasks wait
    alice, anonymous = svc.client(bearer("alice-token")), svc.client()
    try:
        ids: dict[str, str] = {}
        for who, client in (("alice", alice), ("anonymous", anonymous)):
            fid = client.register_function(len)
            batch = client.create_batch(user_endpoint_config=PROBE)
            batch.add(fid, args=("abc",))
            (ids[who],) = client.batch_run(EID, batch)["tasks"][fid]
        kept = TaskMemory(memory)  # what the service queued for its endpoint, as sent
        sent = {who: kept.undelivered(tid) for who, tid in ids.items()}
        alice_identity = hashlib.sha256(b"alice-token").hexdigest()[:32]
        assert sent["alice"] is not None and sent["alice"]["identity"] == alice_identity
        assert sent["anonymous"] is not None and sent["anonymous"]["identity"] == "anonymous"
        assert "alice-token" not in str(sent["alice"])
        assert sent["alice"]["user_endpoint_config"] == PROBE
    finally:
        svc.close()
