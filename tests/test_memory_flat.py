"""Memory stays flat: a finished task leaves memory, the store keeps it (issue 18, part 5).

With a store, the coordinator keeps in memory only what can still change: open tasks'
handles and histories, and the latest events. A finished task is read back from the store
when asked about (``task``, ``get_result``, ``history``, the service's listing), and a
cursor older than the events in memory is served from the store, in order, without gaps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import load_sites
from federation.core.tasks import PythonTask
from federation.runtime.events import EventBus
from federation.runtime.store import Store
from functions.workloads import square

ENV = ResourceEnvelope(sites=("local",), walltime_s=300)


# --- the bus ------------------------------------------------------------------------------
def _emit_tasks(bus: EventBus, n: int, owner_of: dict[str, str]) -> None:
    for i in range(n):
        tid = f"t{i}"
        bus.set_owner(tid, owner_of.setdefault(tid, "ann" if i % 2 else "bob"))
        bus.emit("task.queued", tid, "local", i=i)
        bus.emit("task.completed", tid, "local", i=i)
        bus.forget(tid)


def test_a_bus_with_a_store_keeps_only_the_latest_events(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    bus = EventBus(store, keep_events=10)
    owners: dict[str, str] = {}
    _emit_tasks(bus, 100, owners)
    assert len(bus._log) <= 20 and all(len(v) <= 20 for v in bus._owner_log.values())
    assert bus._task_log == {} and bus._owners == {} and bus._by_task == {}
    # everything is still there, in order, from the store
    every = bus.history()
    assert [e.seq for e in every] == list(range(1, 201))
    assert [e.kind for e in bus.history("t3")] == ["task.queued", "task.completed"]
    assert bus.owner_of("t3") == "ann" and bus.owner_of("t4") == "bob"
    # a cursor older than memory: served from the store without gaps or repeats
    got = bus.await_event(0, timeout_s=0)
    assert [e.seq for e in got] == list(range(1, 201))
    mine = bus.await_event(0, owner="ann", timeout_s=0)
    assert [e.owner_seq for e in mine] == list(range(1, 101))
    assert {e.task_id for e in mine} == {f"t{i}" for i in range(1, 100, 2)}
    assert bus.last_seq == 200 and bus.last_seq_of("ann") == 100


def test_an_old_cursor_waits_for_the_next_matching_event(tmp_path: Path) -> None:
    bus = EventBus(Store(tmp_path / "s.db"), keep_events=5)
    _emit_tasks(bus, 30, {})
    found: list[int] = []

    def wait() -> None:
        got = bus.await_event(3, kinds={"task.failed"}, timeout_s=10)
        found.extend(e.seq for e in got)

    t = threading.Thread(target=wait)
    t.start()
    t.join(0.3)
    assert t.is_alive(), "no task.failed yet: the waiter must still be waiting"
    bus.set_owner("late", "bob")
    bus.emit("task.failed", "late", "local", error="x")
    t.join(10)
    assert found == [61]


def test_a_restarted_bus_continues_both_cursors(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = EventBus(Store(path), keep_events=4)
    _emit_tasks(first, 10, {})
    again = EventBus(Store(path), keep_events=4)
    assert len(again._log) == 4 and again.last_seq == 20
    assert again.last_seq_of("ann") == 10 and again.last_seq_of("bob") == 10
    again.set_owner("t99", "ann")
    ev = again.emit("task.queued", "t99", "local")
    assert (ev.seq, ev.owner_seq) == (21, 11)
    with pytest.raises(ValueError, match="already belongs"):
        again.set_owner("t1", "bob")  # owners are read back for forgotten records too
    assert [e.owner_seq for e in again.await_event(8, owner="ann", timeout_s=0)] == [9, 10, 11]


def test_without_a_store_the_bus_keeps_everything() -> None:
    bus = EventBus(keep_events=3)
    _emit_tasks(bus, 10, {})
    assert len(bus.history()) == 20 and len(bus.history("t2")) == 2


# --- the coordinator ----------------------------------------------------------------------
def _until(ready: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[FixedCoordinator]:
    site = ThreadSite(load_sites(["local"])[0])
    c = FixedCoordinator([site], store=Store(tmp_path / "coordinator.db"))
    site.coord = c
    yield c
    c.close()


def test_finished_tasks_leave_memory_and_are_read_back(durable: FixedCoordinator) -> None:
    handles = [durable.submit_task(PythonTask(square, (i,)), ENV) for i in range(40)]
    for h in handles:
        assert h.wait(30)
    reg = durable._registry
    # a handle wakes its waiters as its end is told, a moment before it leaves memory
    assert _until(lambda: reg.released == 40), reg.released
    assert durable.live_handles() == []
    assert not (reg.by_compute_id or reg.unindexed or reg.copy_ids or reg.early_starts)
    assert durable.events._task_log == {} and durable.events._by_task == {}
    back = durable.task(handles[7].id)
    assert back is not None and back is not handles[7]
    assert back.state == "completed" and back.value == 49 and back.done
    assert durable.get_result(handles[7].id, timeout_s=0).value == 49
    assert [e.kind for e in durable.history(handles[7].id)] == [
        "task.queued",
        "task.started",
        "task.completed",
    ]
    assert [h.id for h in durable.handles()] == [h.id for h in handles]
    assert durable.task("no-such-task") is None


def test_ended_groups_leave_memory_and_are_read_back(durable: FixedCoordinator) -> None:
    """A group whose round ended leaves the coordinator's memory (issue 25), as its tasks
    do; get() reads it back from the store, ended, with its children's results."""
    groups = [
        durable.submit_group(
            [(f"c{i}", PythonTask(square, (i,)), ENV) for i in (1, 2)],
            objective=f"round {n}",
            distinct_sites=False,
        )
        for n in range(5)
    ]
    for g in groups:
        assert g.wait(30)
    manager = durable.groups
    assert manager.groups == {} and manager.released == 5
    back = manager.get(groups[3].id)
    assert back is not groups[3] and back.done and back.objective == "round 3"
    assert back.state() == {"c1": "completed", "c2": "completed"}
    assert [c.handle.value for c in back.children] == [1, 4]
    with pytest.raises(KeyError, match="unknown group"):
        manager.get("no-such-group")


def test_a_finished_tasks_notes_are_kept_with_its_end(durable: FixedCoordinator) -> None:
    from federation.runtime.rows import end_fields

    h = durable.submit_task(PythonTask(square, (3,)), ENV)
    assert h.wait(30)
    assert durable.task(h.id).notes == []  # type: ignore[union-attr]
    h.notes.append("failed on local: retried on local")  # as retries.py writes one
    durable.store.update_task(h.id, **end_fields(h))  # type: ignore[union-attr]
    back = durable.task(h.id)
    assert back is not None and back is not h and back.notes == h.notes


def test_a_restart_keeps_finished_tasks_in_the_store(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    site = ThreadSite(load_sites(["local"])[0])
    first = FixedCoordinator([site], store=Store(path))
    site.coord = first
    done = [first.submit_task(PythonTask(square, (i,)), ENV) for i in range(5)]
    for h in done:
        assert h.wait(30)
    first.close()
    site2 = ThreadSite(load_sites(["local"])[0])
    second = FixedCoordinator([site2], store=Store(path))
    site2.coord = second
    try:
        second.recover()
        assert second.live_handles() == []  # nothing open: nothing taken back into memory
        assert [second.get_result(h.id, timeout_s=0).value for h in done] == [0, 1, 4, 9, 16]
    finally:
        second.close()


def test_a_cancelled_deadline_frees_what_it_holds() -> None:
    from federation.runtime.milestones import Timers

    timers = Timers("test-timers")
    try:
        held = [bytearray(1000) for _ in range(500)]
        tokens = [timers.call_later(3600, lambda b=b: len(b)) for b in held]  # type: ignore[misc]
        for tok in tokens[:-1]:
            timers.cancel(tok)
        assert timers.pending == 1
        assert len(timers._heap) <= 64, "the heap keeps cancelled deadlines"
        assert list(timers._live) == [tokens[-1]]
        fired = threading.Event()
        timers.call_later(0, fired.set)
        assert fired.wait(5), "a deadline due now still fires after compaction"
    finally:
        timers.close()


def test_a_start_seen_while_the_task_ends_never_overwrites_the_end(tmp_path: Path) -> None:
    """Seen in a 3,000-task run: the start's write of ``running`` landed after the end's
    ``completed`` (the two moves ran in two threads), so the released task read back as
    open and ``get_result`` called it unknown. One move of a task at a time."""
    gate = threading.Event()
    site = ThreadSite(load_sites(["local"])[0], gate=gate)
    store = Store(tmp_path / "coordinator.db")
    c = FixedCoordinator([site], store=store)
    site.coord = c
    try:
        h = c.submit_task(PythonTask(square, (3,)), ENV)
        paused, go_on = threading.Event(), threading.Event()
        write = store.update_task

        def slow_start(task_id: str, **fields: object) -> None:
            if fields.get("state") == "running":
                paused.set()
                go_on.wait(10)
            write(task_id, **fields)

        store.update_task = slow_start  # type: ignore[method-assign]
        life = c._lifecycle
        starting = threading.Thread(target=life.start, args=(h, "7"))
        starting.start()
        assert paused.wait(10)
        ending = threading.Thread(target=life.complete, args=(h, 9))
        ending.start()
        ending.join(0.3)
        go_on.set()
        starting.join(10)
        ending.join(10)
        assert store.task(h.id)["state"] == "completed"  # type: ignore[index]
        back = c.task(h.id)
        assert back is not None and back.state == "completed" and back.value == 9
        assert c.get_result(h.id, timeout_s=0).value == 9
        kinds = [e.kind for e in c.history(h.id)]
        assert kinds == ["task.queued", "task.started", "task.completed"], kinds
    finally:
        gate.set()
        c.close()
