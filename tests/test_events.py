"""The event bus: ordered, resumable waits, callbacks without polling."""

from __future__ import annotations

import threading

from federation.events import EventBus


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
