"""A lost result stream is not a failed task: the coordinator re-attaches to the task group.

When the SDK's AMQP watcher thread dies, every open future of its Executor fails with
``RuntimeError("SDK thread quit unexpectedly.")``; the tasks themselves go on at the site.
Here a site's stream dies mid-task, exactly so: the coordinator fetches the task again
(``reattach``: the SDK's task-group reload on a real site), and the task completes once,
with its events in order. Only when the site no longer knows the task, or the stream keeps
dying, does the task fail, saying so (never as the scientist's own error).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from inprocess import FixedCoordinator

import federation.runtime.retries as coordinator_module  # REATTACH_DELAY_S, MAX_REATTACHES
from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.spec import SiteSpec, load_sites
from federation.core.tasks import PythonTask, TaskSpec
from functions.workloads import square

ENV = ResourceEnvelope(sites=("local",), walltime_s=300)
LOST = "SDK thread quit unexpectedly."


class LosingStreamSite:
    """Runs each task; its result stream dies ``losses`` times before the result arrives."""

    can_cancel = True

    def __init__(self, spec: SiteSpec, losses: int = 1, forgets: bool = False) -> None:
        self.spec = spec
        self.coord: FixedCoordinator | None = None
        self.losses = losses
        self.forgets = forgets
        self.reattached: list[str] = []
        self.results: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.spec.name

    def probe(self) -> Future[dict[str, Any]]:
        f: Future[dict[str, Any]] = Future()
        f.set_exception(RuntimeError("not probed"))
        return f

    def _future(self, tid: str) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.task_id = tid  # type: ignore[attr-defined]
        return fut

    def _settle(self, tid: str, fut: Future[Any]) -> None:
        if self.losses > 0:  # the stream dies before the result comes through it
            self.losses -= 1
            fut.set_exception(RuntimeError(LOST))
        else:
            fut.set_result(self.results[tid])

    def submit(self, task: TaskSpec, shape: Shape) -> Future[Any]:
        assert isinstance(task, PythonTask)
        tid = str(uuid.uuid4())
        fut = self._future(tid)

        def run() -> None:
            assert self.coord is not None
            for _ in range(500):
                if any(h.compute_task_id == tid for h in self.coord.handles()):
                    break
                threading.Event().wait(0.002)
            self.coord.notify_started(tid, "4711")
            self.results[tid] = task.fn(*task.args, **task.kwargs)
            self._settle(tid, fut)

        threading.Thread(target=run, daemon=True).start()
        return fut

    def reattach(self, task_ids: list[str]) -> dict[str, Future[Any]]:
        self.reattached += task_ids
        if self.forgets:
            return {}
        out = {}
        for tid in task_ids:
            out[tid] = fut = self._future(tid)
            self._settle(tid, fut)
        return out

    def cancel(self, task_id: str) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator_module, "REATTACH_DELAY_S", 0.01)


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[FixedCoordinator] = []

    def build(**site: Any) -> tuple[FixedCoordinator, LosingStreamSite]:
        s = LosingStreamSite(load_sites(["local"])[0], **site)
        c = FixedCoordinator([s])
        s.coord = c
        made.append(c)
        return c, s

    yield build
    for c in made:
        c.close()


def test_a_task_whose_stream_died_completes_once(make: Any) -> None:
    coord, site = make(losses=1)
    h = coord.submit_task(PythonTask(square, (6,)), ENV)
    r = coord.get_result(h, timeout_s=10)
    assert r.status == "completed" and r.value == 36
    assert site.reattached == [h.compute_task_id]
    kinds = [e.kind for e in coord.history(h.id)]
    assert kinds == ["task.queued", "task.started", "task.completed"], kinds
    assert any("result stream from local lost" in n for n in h.notes)


def test_a_stream_that_keeps_dying_is_reattached_a_bounded_number_of_times(make: Any) -> None:
    coord, site = make(losses=coordinator_module.MAX_REATTACHES + 1)
    h = coord.submit_task(PythonTask(square, (6,)), ENV)
    r = coord.get_result(h, timeout_s=10)
    assert r.status == "failed" and LOST in (r.error or "")
    assert len(site.reattached) == coordinator_module.MAX_REATTACHES
    failed = coord.history(h.id)[-1]
    assert failed.kind == "task.failed" and failed.detail["failure"] == "result_stream_lost"


def test_a_task_the_site_forgot_fails_saying_why(make: Any) -> None:
    coord, _ = make(losses=1, forgets=True)
    h = coord.submit_task(PythonTask(square, (6,)), ENV)
    r = coord.get_result(h, timeout_s=10)
    assert r.status == "failed"
    assert "lost the result stream from local and could not re-attach" in (r.error or "")
    assert "no longer knows it" in (r.error or "")
