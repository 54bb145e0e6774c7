"""Milestones: one timer thread for every deadline; typed, persisted, fired once."""

from __future__ import annotations

import functools
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.runtime.events import EventBus
from federation.runtime.milestones import Milestones, MilestoneWatcher, Timers
from federation.runtime.store import Store
from functions.workloads import report_allocation

QUICK = Milestones(queued_longer_than_predicted=True, queue_slack=0, queue_margin_s=0.05)


def _timer_threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_one_timer_thread_runs_every_deadline_in_order_and_skips_cancelled() -> None:
    timers = Timers("test-timers-a")
    ran: list[int] = []
    last = threading.Event()
    gate = threading.Event()
    timers.call_later(0, lambda: gate.wait(10))  # holds the thread until we have cancelled
    tokens: dict[int, int] = {}
    t0 = time.monotonic() + 0.05  # one base: the deadlines' order is not the calls' pace
    for i in range(200):
        due = t0 + 0.001 * ((i * 37) % 200)  # shuffled deadlines, 0..0.2 s after t0
        tokens[i] = timers.call_at(due, functools.partial(ran.append, i))
    timers.call_at(t0 + 0.3, last.set)
    cancelled = {i for i in range(0, 200, 7)}
    for i in cancelled:
        timers.cancel(tokens[i])
    assert _timer_threads("test-timers-a") == 1  # 202 deadlines, one thread
    gate.set()
    assert last.wait(10)
    assert set(ran) == set(range(200)) - cancelled
    dues = [(i * 37) % 200 for i in ran]
    assert dues == sorted(dues)
    assert timers.pending == 0
    timers.close()


def _watch(w: MilestoneWatcher, tid: str, wants: Milestones, wait_s: float = 0.05) -> None:
    w.watch(
        tid,
        "local",
        wants,
        predicted_wait_s=wait_s,
        walltime_s=600,
        submitted_at=datetime.now(UTC),
    )


def test_queued_longer_than_predicted_fires_once_only_for_tasks_still_queued() -> None:
    bus = EventBus()
    w = MilestoneWatcher(bus, Timers("test-timers-b"))
    for tid in ("slow", "quick", "finished"):
        _watch(w, tid, QUICK)
    bus.emit("task.started", "quick", "local", slurm_job_id="7", queue_wait_s=0.01)
    bus.emit("task.completed", "finished", "local")
    _watch(w, "sentinel", QUICK, wait_s=0.3)  # due after the others: one heap, in order
    got = bus.await_event(0, task_ids={"sentinel"}, kinds={"task.milestone"}, timeout_s=10)
    assert got, "the sentinel's milestone never fired"
    fired = [
        (e.task_id, e.detail["milestone"]) for e in bus.history() if e.kind == "task.milestone"
    ]
    assert fired == [
        ("slow", "queued_longer_than_predicted"),
        ("sentinel", "queued_longer_than_predicted"),
    ]
    slow = next(e for e in bus.history("slow") if e.kind == "task.milestone")
    assert slow.detail["predicted_wait_s"] == 0.05 and slow.detail["deadline_s"] == 0.1
    assert _timer_threads("test-timers-b") == 1
    w.close()


def test_started_milestone_and_stall_of_a_running_task() -> None:
    bus = EventBus()
    w = MilestoneWatcher(bus, Timers("test-timers-c"))
    wants = Milestones(started=True, stall_margin_s=0.0)
    w.watch(
        "t",
        "local",
        wants,
        predicted_wait_s=0,
        walltime_s=0,  # estimate already passed once it starts: stalled at once
        submitted_at=datetime.now(UTC),
    )
    bus.emit("task.started", "t", "local", slurm_job_id="42", queue_wait_s=1.5)
    stalled = bus.await_event(0, kinds={"task.stalled"}, timeout_s=10)
    assert [e.task_id for e in stalled] == ["t"]
    kinds = [(e.kind, e.detail.get("milestone")) for e in bus.history("t")]
    assert kinds == [("task.started", None), ("task.milestone", "started"), ("task.stalled", None)]
    started = bus.history("t")[1]
    assert started.detail == {"milestone": "started", "slurm_job_id": "42", "queue_wait_s": 1.5}
    w.close()


def test_a_milestone_in_the_log_is_not_fired_again_after_a_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.db")
    bus = EventBus(store)
    w = MilestoneWatcher(bus, Timers("test-timers-d"))
    _watch(w, "t", QUICK)
    assert bus.await_event(0, kinds={"task.milestone"}, timeout_s=10)
    w.close()
    again = EventBus(Store(tmp_path / "c.db"))  # a restarted coordinator, same log
    w2 = MilestoneWatcher(again, Timers("test-timers-e"))
    _watch(w2, "t", QUICK)
    _watch(w2, "sentinel", QUICK, wait_s=0.3)
    assert again.await_event(again.last_seq, task_ids={"sentinel"}, timeout_s=10)
    assert [e.task_id for e in again.history() if e.kind == "task.milestone"] == ["t", "sentinel"]
    w2.close()


def test_milestone_names_are_checked() -> None:
    assert Milestones.of(["started"]).names == ("started",)
    assert Milestones.of(None).names == ()
    with pytest.raises(ValueError, match="unknown milestone"):
        Milestones.of(["finished_early"])


@pytest.mark.slurm
def test_started_milestone_on_the_local_federation(coord: Any) -> None:
    env = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=300)
    h = coord.submit_task(PythonTask(report_allocation, (0.2,)), env, milestones=("started",))
    r = coord.get_result(h, timeout_s=180)
    assert r.status == "completed", r.error
    assert r.milestones == ("started",)
    ms = [e for e in r.events if e.kind == "task.milestone"]
    assert [e.detail["milestone"] for e in ms] == ["started"]
    assert ms[0].detail["slurm_job_id"] == r.value["slurm_job_id"]
    kinds = [e.kind for e in r.events]
    assert (
        kinds.index("task.started") < kinds.index("task.milestone") < kinds.index("task.completed")
    )
