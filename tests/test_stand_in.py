"""The web-service stand-in behaves as the Globus Compute service does (docs/stand-in.md).

Everything goes through the real SDK ``Client``/``Executor`` from
:class:`~federation.standin.compute_service.LocalComputeService` and, where an endpoint is needed,
a real endpoint daemon in a temporary run dir with the ``probe`` profile (LocalProvider on
this machine: no Slurm). Each daemon heartbeats every 0.2 s (``FEDERATION_EP_HEARTBEAT_S``)
so that a lost heartbeat shows within a second.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from globus_compute_sdk import Client, Executor
from globus_compute_sdk.errors import TaskExecutionFailed
from globus_sdk import GlobusAPIError

from federation.core.errors import SiteUnavailableError
from federation.endpoint import protocol
from federation.endpoint.manager import EndpointDaemons, local_endpoint_id
from federation.sites.cloud import PAYLOAD_LIMIT_BYTES
from federation.sites.shipping import executor_serializer
from federation.standin.compute_service import LocalComputeService
from federation.standin.endpoint_link import EndpointLink
from federation.standin.rate_limit import RateLimit
from functions.workloads import square

SITE = "local"
EID = local_endpoint_id(SITE)
PROBE = {"profile": "probe"}
BEAT = {protocol.HEARTBEAT_ENV: "0.2"}


def big_result(n: int) -> str:
    """A result of ``n`` characters (shipped by source: defined here, runs on the worker)."""
    return "x" * n


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[EndpointDaemons]:
    d = EndpointDaemons(tmp_path / "home")
    try:
        yield d
    finally:
        d.stop(SITE)


def make_service(daemons: EndpointDaemons, **kwargs: Any) -> LocalComputeService:
    svc = LocalComputeService(**kwargs)
    svc.add_endpoint(EID, SITE, daemons.run_dir(SITE))
    return svc


def make_executor(svc: LocalComputeService) -> tuple[Client, Executor]:
    client = svc.client()
    client.fx_serializer = executor_serializer()  # our functions travel by source
    return client, svc.executor(EID, client, user_endpoint_config=PROBE)


def task_id_of(fut: Any, timeout_s: float = 10) -> str:
    wait_for(lambda: fut.task_id is not None, timeout_s, "the submission was answered")
    return str(fut.task_id)


def test_offline_endpoint_queues_then_delivers_in_order(daemons: EndpointDaemons) -> None:
    svc = make_service(daemons)  # no daemon yet: the endpoint is offline
    client, ex = make_executor(svc)
    try:
        assert client.get_endpoint_status(EID)["status"] == "offline"
        futs = [ex.submit(square, i) for i in (3, 4, 5)]
        tids = [task_id_of(f) for f in futs]  # accepted, not refused
        seen: set[str] = set()
        for tid in tids:
            task = client.get_task(tid)
            assert task["pending"] is True and task["status"] == "waiting-for-ep"
            seen.add(task["status"])
        assert not any(f.done() for f in futs)
        assert client.get_endpoint_status(EID)["details"]["queued_tasks"] == 3

        stop = threading.Event()

        def watch() -> None:  # every status the service reports, while the tasks run
            while not stop.is_set():
                seen.update(s["status"] for s in client.get_batch_result(tids).values())
                time.sleep(0.6)  # within the service's 20 requests per 10 s

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        daemons.start(SITE, BEAT)  # the endpoint comes back: the queue is delivered
        assert [f.result(timeout=180) for f in futs] == [9, 16, 25]  # cold engine
        stop.set()
        watcher.join(5)
        assert client.get_endpoint_status(EID)["status"] == "online"
        assert client.get_endpoint_status(EID)["details"]["queued_tasks"] == 0
        assert all(client.get_task(t)["status"] == "success" for t in tids)
        assert seen <= {"waiting-for-ep", "success"}, seen  # no "running": not reported
        with sqlite3.connect(daemons.run_dir(SITE) / "tasks.db") as db:
            order = [r[0] for r in db.execute("SELECT task_id FROM tasks ORDER BY rowid")]
        assert order == tids  # delivered once each, in the order submitted
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


class _FlakyConnection:
    """Stands for an EndpointConnection whose daemon drops out after taking one task."""

    def __init__(self) -> None:
        self.connected = True
        self.generation = 1
        self.last_heard: float | None = time.monotonic()
        self.taken: list[str] = []
        self.fail_next = False

    def connect(self) -> None:
        self.connected = True
        self.generation += 1

    def request(self, msg: protocol.Message, timeout_s: float = 30.0) -> protocol.Message:
        if self.fail_next or not self.connected:
            self.fail_next, self.connected = False, False
            raise SiteUnavailableError("endpoint connection lost (on purpose)")
        if msg["task_id"] not in self.taken:  # the daemon ignores a resend
            self.taken.append(msg["task_id"])
        if len(self.taken) == 1:
            self.fail_next = True  # the connection drops while forwarding the second
        return {"op": "reply"}

    def close(self) -> None:
        self.connected = False


def test_forwarding_that_fails_half_way_loses_nothing(tmp_path: Path) -> None:
    delivered: list[str] = []
    backs: list[int] = []
    link = EndpointLink(
        SITE,
        tmp_path,
        lambda _msg: None,
        on_back=lambda: backs.append(1),
        on_delivered=delivered.append,
        first_retry_s=0.01,
    )
    fake = _FlakyConnection()
    link.conn = fake  # type: ignore[assignment]
    link.report = {"period_s": 30.0}  # as if its first heartbeat came
    link.start()
    try:
        link.hold([{"op": "submit", "task_id": t} for t in ("a", "b", "c")])
        wait_for(lambda: len(delivered) == 3, 5, "the queue was delivered after the drop")
        assert fake.taken == ["a", "b", "c"] and delivered == ["a", "b", "c"]
        assert len(link) == 0 and len(backs) == 2  # settled again after the reconnect
    finally:
        link.close()


def test_cancel_of_a_queued_task_is_the_embedded_services_privilege(
    daemons: EndpointDaemons,
) -> None:
    svc = make_service(daemons)  # endpoint offline: the task waits in the service
    client, ex = make_executor(svc)
    try:
        fut = ex.submit(square, 2)
        tid = task_id_of(fut)
        assert svc.cancel(tid) == (True, "cancelled before delivery")
        with pytest.raises(TaskExecutionFailed, match="cancelled"):
            fut.result(timeout=10)
        assert client._compute_web_client.v2.get_task(tid)["status"] == "failed"
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


def test_heartbeat_loss_marks_the_endpoint_offline(daemons: EndpointDaemons) -> None:
    pid = daemons.start(SITE, BEAT)
    # the test asks the status 50 times a second, to time the heartbeats: over the
    # service's request rate, which is not what it tests (tests/test_stand_in_limits.py)
    svc = make_service(daemons, rate_limit=RateLimit(requests=10_000, window_s=10.0))
    client = svc.client()
    try:
        status = client.get_endpoint_status(EID)
        assert status["status"] == "online" and status["details"]["period_s"] == 0.2
        meta = client.get_endpoint_metadata(EID)
        assert meta["python_version"] and meta["hostname"]
        os.kill(pid, signal.SIGSTOP)  # alive, connected, silent
        try:
            t0 = time.monotonic()
            wait_for(
                lambda: client.get_endpoint_status(EID)["status"] == "offline",
                5,
                "three missed heartbeats show the endpoint offline",
            )
            assert time.monotonic() - t0 >= 0.4  # not before the heartbeats were missed
            assert svc._endpoints[str(EID)].link.conn.connected  # the socket is still open
            assert client.get_endpoint_metadata(EID)["python_version"] == meta["python_version"]
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(
            lambda: client.get_endpoint_status(EID)["status"] == "online",
            5,
            "heartbeats again: online",
        )
        daemons.stop(SITE)  # the connection closes: offline at once
        wait_for(
            lambda: client.get_endpoint_status(EID)["status"] == "offline",
            2,
            "a closed connection is offline",
        )
    finally:
        svc.close()


def test_payload_over_10_mb_is_refused_with_the_services_error(
    daemons: EndpointDaemons,
) -> None:
    svc = make_service(daemons)  # refused on submission: no endpoint needed
    client, ex = make_executor(svc)
    try:
        fut = ex.submit(len, "x" * 11_000_000)
        with pytest.raises(GlobusAPIError) as err:
            fut.result(timeout=10)
        assert err.value.http_status == 413
        assert err.value.code == "TASK_PAYLOAD_TOO_LARGE"
        assert str(PAYLOAD_LIMIT_BYTES) in str(err.value.message)
        fid = client.register_function(len)
        with pytest.raises(GlobusAPIError) as err2:  # the Client refuses the same way
            client.run("y" * (PAYLOAD_LIMIT_BYTES + 1), endpoint_id=EID, function_id=fid)
        assert (err2.value.http_status, err2.value.code) == (413, "TASK_PAYLOAD_TOO_LARGE")
        tid = client.run("y" * 7_000_000, endpoint_id=EID, function_id=fid)  # ~9.3 MB: taken
        assert client.get_task(tid)["status"] == "waiting-for-ep"
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


def test_results_over_the_limit_fail_as_the_real_system_fails_them(
    daemons: EndpointDaemons,
) -> None:
    daemons.start(SITE, BEAT)
    svc = make_service(daemons)
    _client, ex = make_executor(svc)
    try:
        # serialized, a result is ~1.35 times its characters: 11 M -> 14.9 MB, refused by
        # the worker's own check (10 MiB); 7.55 M -> 10.2 MB, which the worker lets through
        # and the service refuses (10 MB)
        worker_refused = ex.submit(big_result, 11_000_000)
        service_refused = ex.submit(big_result, 7_550_000)
        fine = ex.submit(big_result, 1000)
        assert fine.result(timeout=180) == "x" * 1000
        with pytest.raises(TaskExecutionFailed, match=r"MaxResultSizeExceeded\(\d+, 10485760"):
            worker_refused.result(timeout=180)
        with pytest.raises(TaskExecutionFailed, match=f"limit of {PAYLOAD_LIMIT_BYTES}B"):
            service_refused.result(timeout=180)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()


def test_strict_service_has_no_cancel_no_start_news_no_adoption(
    daemons: EndpointDaemons,
) -> None:
    daemons.start(SITE, BEAT)
    strict, embedded = make_service(daemons, strict=True), make_service(daemons)
    heard: dict[str, list[str]] = {"strict": [], "embedded": []}
    embedded.on_started(lambda tid, _job: heard["embedded"].append(tid))
    with pytest.raises(RuntimeError, match="nothing about a task's start"):
        strict.on_started(lambda tid, _job: heard["strict"].append(tid))
    # even a listener slipped past on_started hears nothing from the strict service
    strict._started_listeners.append(lambda tid, _job: heard["strict"].append(tid))
    s_client, s_ex = make_executor(strict)
    _e_client, e_ex = make_executor(embedded)
    try:
        s_fut, e_fut = s_ex.submit(square, 6), e_ex.submit(square, 7)
        assert (s_fut.result(timeout=180), e_fut.result(timeout=180)) == (36, 49)  # cold engines
        tid = str(s_fut.task_id)
        wait_for(lambda: heard["embedded"] == [e_fut.task_id], 10, "the embedded start news")
        assert heard["strict"] == []  # the daemon announced both starts; strict kept quiet
        with pytest.raises(RuntimeError, match="has no task cancel"):
            strict.cancel(tid)
        with pytest.raises(RuntimeError, match="remembers its tasks"):
            strict.adopt_task(tid, EID, uuid.UUID(str(s_ex.task_group_id)))
        assert s_client.get_task(tid)["status"] == "success"
    finally:
        s_ex.shutdown(wait=False, cancel_futures=True)
        e_ex.shutdown(wait=False, cancel_futures=True)
        strict.close()
        embedded.close()


def test_embedded_acknowledgement_means_the_endpoint_holds_the_task(
    daemons: EndpointDaemons,
) -> None:
    """The embedded service dies with its coordinator, so its acknowledgement must come
    after the endpoint took the task; a re-adopted task its endpoint never received fails
    saying so (it would otherwise wait forever)."""
    daemons.start(SITE, BEAT)
    svc = make_service(daemons)
    wait_for(lambda: svc._endpoints[str(EID)].link.online(), 10, "the endpoint came online")
    client = svc.client()
    client.fx_serializer = executor_serializer()
    fid = client.register_function(square)
    batch = client.create_batch(user_endpoint_config=PROBE)
    batch.add(fid, args=(5,))
    tg = uuid.uuid4()
    batch.task_group_id = tg
    (tid,) = client.batch_run(EID, batch)["tasks"][fid]
    # acknowledged: already in the endpoint's own task table, not only in the service queue
    with sqlite3.connect(daemons.run_dir(SITE) / "tasks.db") as db:
        held = [r[0] for r in db.execute("SELECT task_id FROM tasks")]
    assert held == [tid]
    svc.close()

    later = make_service(daemons)  # a restarted coordinator's service
    try:
        wait_for(lambda: later._endpoints[str(EID)].link.online(), 10, "the endpoint came online")
        never_sent = str(uuid.uuid4())  # recorded as shipped by a coordinator killed too soon
        later.adopt_task(tid, EID, tg)
        later.adopt_task(never_sent, EID, tg)
        c2 = later.client()
        wait_for(lambda: c2.get_task(tid)["status"] == "success", 60, "the held task's result")
        lost = c2._compute_web_client.v2.get_task(never_sent).data
        assert lost["status"] == "failed"
        assert "never received this task" in str(lost.get("exception")), lost
    finally:
        later.close()


def test_a_restarted_service_still_delivers_what_it_accepted(
    daemons: EndpointDaemons, tmp_path: Path
) -> None:
    """The real service's queue for an endpoint is durable: a task accepted while the
    endpoint was away is delivered when it is back, whatever happened to the client. The
    stand-in dies with its process, so it keeps an undelivered task's message in its memory
    and a restarted one delivers it (a restarted coordinator re-attaches through the task
    group: ``federation.runtime.intents``)."""
    memory = tmp_path / "compute-service.db"
    first = LocalComputeService(strict=True, memory=memory)
    first.add_endpoint(EID, SITE, daemons.run_dir(SITE))  # no daemon: offline
    _client, ex = make_executor(first)
    try:
        tid = task_id_of(ex.submit(square, 7))
        tg = ex.task_group_id  # the service named it
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        first.close()  # gone before it could forward anything
    # a restarted client is a new process: none of the old one's result watchers survive
    # (the SDK keeps them per task group in a module global)
    from globus_compute_sdk.sdk import executor as sdk_executor

    sdk_executor._RESULT_WATCHERS.pop(tg, None)
    daemons.start(SITE, BEAT)
    second = LocalComputeService(strict=True, memory=memory)
    second.add_endpoint(EID, SITE, daemons.run_dir(SITE))
    client2 = second.client()
    client2.fx_serializer = executor_serializer()
    ex2 = second.executor(EID, client2, user_endpoint_config=PROBE, task_group_id=tg)
    try:
        (fut,) = [f for f in ex2.reload_tasks() if str(f.task_id) == tid]
        assert fut.result(timeout=180) == 49  # a first result: a cold engine on a loaded machine
        with sqlite3.connect(daemons.run_dir(SITE) / "tasks.db") as db:
            assert [r[0] for r in db.execute("SELECT task_id FROM tasks")] == [tid]  # once
    finally:
        ex2.shutdown(wait=False, cancel_futures=True)
        second.close()
