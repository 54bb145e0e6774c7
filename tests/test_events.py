"""The event bus: ordered, resumable waits, callbacks without polling."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.events import EventBus
from functions.workloads import report_allocation


def test_await_event_returns_matching_events_after_cursor() -> None:
    bus = EventBus()
    bus.emit("task.queued", "a")
    bus.emit("task.queued", "b")
    bus.emit("task.completed", "a")
    got = bus.await_event(0, task_ids={"a"}, timeout_s=0)
    assert [(e.seq, e.kind) for e in got] == [(1, "task.queued"), (3, "task.completed")]
    assert bus.await_event(3, timeout_s=0) == []
    assert [e.task_id for e in bus.await_event(1, kinds={"task.queued"}, timeout_s=0)] == ["b"]


def test_waiter_is_woken_by_a_later_event() -> None:
    bus = EventBus()
    out: list[str] = []

    def waiter() -> None:
        out.extend(e.kind for e in bus.await_event(0, kinds={"task.completed"}, timeout_s=10))

    t = threading.Thread(target=waiter)
    t.start()
    bus.emit("task.started", "x")
    bus.emit("task.completed", "x")
    t.join(10)
    assert out == ["task.completed"]


def test_timeout_returns_empty() -> None:
    assert EventBus().await_event(0, timeout_s=0.05) == []


def test_callbacks_filtered_by_task_and_failures_isolated() -> None:
    bus = EventBus()
    seen: list[str] = []

    def bad(_: object) -> None:
        raise RuntimeError("callback bug")

    bus.subscribe(bad)
    bus.subscribe(lambda e: seen.append(e.kind), task_id="t1")
    bus.emit("task.queued", "t1")
    bus.emit("task.queued", "t2")
    bus.emit("task.failed", "t1", error="boom")
    assert seen == ["task.queued", "task.failed"]
    assert bus.last_seq == 3
    assert bus.history("t1")[-1].detail == {"error": "boom"}


@pytest.mark.slurm
def test_waiting_caller_is_resumed_by_completion_with_zero_service_requests(
    local_federation: Any,
) -> None:
    local = LocalSites(home=local_federation.home)
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    service = local.service
    assert service is not None
    requests: list[tuple[str, str]] = []
    serve = service.handle

    def counting(method: str, path: str, body: Any, *rest: Any) -> Any:
        requests.append((method, path))
        return serve(method, path, body, *rest)

    service.handle = counting  # type: ignore[method-assign]
    try:
        env = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=300)
        h = coord.submit_task(PythonTask(report_allocation, (3.0,)), env)
        started = coord.events.await_event(
            0, task_ids={h.id}, kinds={"task.started"}, timeout_s=180
        )
        assert started, "the task never started"
        cursor = started[-1].seq
        before = len(requests)
        assert before > 0  # the submission itself went through the (counted) service
        got = coord.events.await_event(
            cursor, task_ids={h.id}, kinds={"task.completed", "task.failed"}, timeout_s=180
        )
        resumed_at = time.time()
        during = requests[before:]
        assert [e.kind for e in got] == ["task.completed"]
        assert during == []  # nobody polled: no status, batch-status or task-group calls
        done_at = service._tasks[h.compute_task_id or ""].completed_at  # the endpoint's clock
        assert done_at is not None
        latency_s = resumed_at - done_at
        print(f"\ncompletion-to-resume latency: {latency_s * 1000:.1f} ms, requests during wait: 0")
        assert latency_s < 1.0  # the bound; bench/bench_events.py reports the spread
        assert coord.result_value(h)["cluster"] == "local"
    finally:
        coord.close()
        service.close()


class _StartsBeforeAck:
    """A site whose job starts and ends before the submit reply put the id on the future:
    the start report finds no task, and the result overtakes the coordinator's retry."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.coord: Any = None

    @property
    def name(self) -> str:
        return str(self.spec.name)

    def submit(self, task: Any, shape: Any) -> Any:
        from concurrent.futures import Future

        fut: Future[Any] = Future()
        self.coord.notify_started("early-1", "4242")  # the id is not on the future yet
        fut.task_id = "early-1"  # type: ignore[attr-defined]
        fut.set_result(task.fn(*task.args))
        return fut

    can_cancel = True

    def cancel(self, task_id: str) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_start_reported_before_the_submit_reply_is_announced_before_the_end() -> None:
    from inprocess import FixedCoordinator

    from federation.core.spec import load_sites
    from federation.runtime.telemetry import Telemetry

    site = _StartsBeforeAck(load_sites(["local"])[0])
    coord = FixedCoordinator([site], telemetry=Telemetry(":memory:"))  # type: ignore[list-item]
    site.coord = coord
    try:
        h = coord.submit_task(PythonTask(sum, ([1, 2],)), ResourceEnvelope(cpus_min=1))
        assert h.wait(5) and h.value == 3
        kinds = [e.kind for e in coord.events.history() if e.task_id == h.id]
        assert kinds == ["task.queued", "task.started", "task.completed"]
        started = next(e for e in coord.events.history() if e.kind == "task.started")
        assert started.detail["slurm_job_id"] == "4242" and h.slurm_job_id == "4242"
        time.sleep(0.5)  # the retry timer finds the task settled and adds nothing
        assert len([e for e in coord.events.history() if e.task_id == h.id]) == 3
    finally:
        coord.close()
