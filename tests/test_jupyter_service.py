"""FederatedExecutor against a running coordinator service: catalog functions, by name or
by function, futures settled from the service's event stream."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from inprocess import FixedCoordinator, inprocess_coordinator

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import TaskFailedError
from federation.interfaces.jupyter.executor import (
    FederatedExecutor,
    NotCataloguedError,
    RemoteTaskFuture,
)
from federation.interfaces.service.app import create_app
from federation.interfaces.service.server import running
from federation.runtime.events import Event
from federation.security.tokens import TokenStore
from functions import workloads

ENV = ResourceEnvelope(walltime_s=300)


def local_square(x: int) -> int:
    return x * x


@pytest.fixture(scope="module")
def coord() -> Iterator[FixedCoordinator]:
    c = inprocess_coordinator(("local", "delta"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def service(coord: FixedCoordinator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tokens = TokenStore(tmp_path_factory.mktemp("jup-svc") / "tokens.db")
    token = tokens.issue("notebook").token
    with running(create_app(coord, tokens, refresh_s=3600)) as base:
        yield base, token


@pytest.fixture
def ex(service: tuple[str, str]) -> Iterator[FederatedExecutor]:
    base, token = service
    with FederatedExecutor(service=base, token=token, envelope=ENV) as e:
        yield e


def test_submit_by_function_and_by_name(ex: FederatedExecutor, coord: FixedCoordinator) -> None:
    seen: list[Any] = []
    done = threading.Event()
    fut = ex.submit(workloads.square, 12)  # a catalog entry's function: sent by name
    assert isinstance(fut, RemoteTaskFuture) and isinstance(fut, concurrent.futures.Future)

    def on_done(f: concurrent.futures.Future[Any]) -> None:
        seen.append(f.result())
        done.set()

    fut.add_done_callback(on_done)
    assert fut.result(timeout=30) == 144
    assert done.wait(5) and seen == [144]
    assert fut.task_id in {h.id for h in coord.handles()}  # the service's task
    assert fut.placement.site in ("local", "delta") and str(fut.placement)
    assert fut.decision.chosen.site == fut.placement.site
    assert [e.kind for e in fut.events] == ["task.queued", "task.started", "task.completed"]
    kinds: list[str] = []
    fut.add_event_callback(lambda ev: kinds.append(ev.kind))  # replays past events
    assert kinds[-1] == "task.completed"
    assert fut.state == "completed" and fut.slurm_job_id and fut.compute_task_id
    by_name = ex.submit("square", 9)
    assert by_name.result(timeout=30) == 81
    assert list(ex.map(workloads.square, [1, 2, 3], timeout=30)) == [1, 4, 9]


def test_uncatalogued_callable_is_refused_before_sending(
    ex: FederatedExecutor, coord: FixedCoordinator
) -> None:
    before = len(coord.handles())
    with pytest.raises(NotCataloguedError) as ei:
        ex.submit(local_square, 3)
    msg = str(ei.value)
    assert "local_square" in msg and "never unpickles" in msg and "square" in msg
    with pytest.raises(NotCataloguedError):
        ex.submit(lambda: 1)
    assert len(coord.handles()) == before


def test_remote_failure_is_task_failed_error(ex: FederatedExecutor) -> None:
    fut = ex.submit(workloads.fail_with, "remote boom")
    err = fut.exception(timeout=30)
    assert isinstance(err, TaskFailedError) and "remote boom" in str(err)
    assert "remote boom" in (err.remote_traceback or "")


def test_events_come_from_the_stream_not_polling(
    ex: FederatedExecutor, coord: FixedCoordinator
) -> None:
    got: list[Event] = []
    futs = [ex.submit("report_allocation", 0.2) for _ in range(3)]
    futs[0].add_event_callback(got.append)
    done, _ = concurrent.futures.wait(futs, timeout=30)
    assert len(done) == 3
    assert ex._stream is not None and ex._stream.alive  # one stream for every future
    assert {e.kind for e in got} >= {"task.queued", "task.completed"}


def test_dataframes_and_snapshot(ex: FederatedExecutor) -> None:
    ex.submit("square", 2).result(30)
    snap = ex.snapshot()
    assert snap.index.names == ["site", "partition"] and ("local", "debug") in snap.index
    tasks = ex.tasks()
    assert isinstance(tasks, pd.DataFrame) and list(tasks["task"]) == ["square"]
    assert tasks["state"].tolist() == ["completed"]
    hist = ex.history()
    assert list(hist["event"]) == ["queued", "started", "completed"]
    assert ex.telemetry().empty  # no telemetry across a service
    assert "service http://" in repr(ex)
    with pytest.raises(RuntimeError, match="coordinator service"):
        _ = ex.coordinator


def test_needs_a_token(service: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDERATION_TOKEN", raising=False)
    with pytest.raises(ValueError, match="bearer token"):
        FederatedExecutor(service=service[0])
