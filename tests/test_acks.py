"""Acknowledgements are told, not looked for: the SDK's own future calls back when it gets
its id (runtime.acks), once, on the thread that set it; a future that cannot be told is
looked at by the fallback thread."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from globus_compute_sdk.sdk.asynchronous.compute_future import ComputeFuture

from federation.runtime.acks import Acks


def _recorder() -> tuple[list[tuple[str | None, str]], Any]:
    got: list[tuple[str | None, str]] = []

    def on_ack(tid: str | None) -> None:
        got.append((tid, threading.current_thread().name))

    return got, on_ack


def test_the_sdk_future_tells_its_id_once_on_the_thread_that_set_it() -> None:
    acks = Acks()
    fut = ComputeFuture()
    got, on_ack = _recorder()
    acks.watch(fut, on_ack)
    assert acks.waiting() == 1 and got == []
    assert isinstance(fut, ComputeFuture)  # still the SDK's future to every reader

    def submitter() -> None:
        fut.task_id = "abc"
        fut.task_id = "abc"  # set again: told once
        fut.set_result(1)

    t = threading.Thread(target=submitter, name="sdk-submitter")
    t.start()
    t.join()
    assert got == [("abc", "sdk-submitter")]
    assert fut.task_id == "abc" and acks.waiting() == 0
    assert acks._thread is None  # nothing polled


def test_a_future_that_ends_without_an_id_is_told_none_and_one_with_an_id_at_once() -> None:
    acks = Acks()
    refused = ComputeFuture()
    got, on_ack = _recorder()
    acks.watch(refused, on_ack)
    refused.set_exception(RuntimeError("refused before any acknowledgement"))
    assert [t for t, _ in got] == [None]
    known = ComputeFuture(task_id="xyz")
    got2, on_ack2 = _recorder()
    acks.watch(known, on_ack2)
    assert [t for t, _ in got2] == ["xyz"]
    assert acks.drain(1.0)


class _Slotted(Future[Any]):
    """A future whose class cannot take the property: the fallback looker watches it."""

    __slots__ = ("task_id",)

    def __init__(self) -> None:
        super().__init__()
        self.task_id: str | None = None


def test_a_future_that_cannot_tell_is_looked_at_and_drain_waits_for_it() -> None:
    acks = Acks()
    fut = _Slotted()
    got, on_ack = _recorder()
    acks.watch(fut, on_ack)
    threading.Timer(0.05, lambda: setattr(fut, "task_id", "late")).start()
    assert acks.drain(5.0)
    assert [t for t, _ in got] == ["late"]
    acks.close()


def test_nothing_is_told_after_close() -> None:
    acks = Acks()
    fut = ComputeFuture()
    got, on_ack = _recorder()
    acks.watch(fut, on_ack)
    acks.close()
    fut.task_id = "after-close"
    assert got == [] and fut.task_id == "after-close"
