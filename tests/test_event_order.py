"""A task's events follow its life in order, however late (or never) the site reports its start.

The start of a job reaches the coordinator on its own path (a message from the endpoint),
which can arrive after the result, or not at all. A task whose result came back has run:
``task.started`` is announced before ``task.completed``/``task.failed`` (with
``seen: at_end``), and a start report arriving afterwards adds its Slurm job id without a
second event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from globus_compute_sdk.errors import TaskExecutionFailed
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import load_sites
from federation.core.tasks import PythonTask
from functions.workloads import square

ENV = ResourceEnvelope(sites=("local",), walltime_s=300)


class _NoStartReports:
    """What the site sees of the coordinator, minus the start report (it is lost)."""

    def __init__(self, coord: FixedCoordinator) -> None:
        self.coord = coord

    def handles(self) -> list[Any]:
        return self.coord.handles()

    @property
    def _registry(self) -> Any:
        return self.coord._registry

    def notify_started(self, compute_task_id: str, slurm_job_id: str | None) -> None:
        pass


@pytest.fixture
def coord() -> Iterator[FixedCoordinator]:
    site = ThreadSite(load_sites(["local"])[0])
    c = FixedCoordinator([site])
    site.coord = _NoStartReports(c)  # type: ignore[assignment]
    yield c
    c.close()


def _boom() -> None:
    """Fails as the SDK reports a task's own exception: with the worker's traceback."""
    raise TaskExecutionFailed(
        'Traceback (most recent call last):\n  File "task.py", line 1, in <module>\n'
        "ValueError: the task's own error"
    )


def test_a_completed_task_is_announced_started_first(coord: FixedCoordinator) -> None:
    h = coord.submit_task(PythonTask(square, (3,)), ENV)
    assert coord.get_result(h, timeout_s=30).value == 9
    evs = coord.history(h.id)
    assert [e.kind for e in evs] == ["task.queued", "task.started", "task.completed"]
    assert evs[1].detail["seen"] == "at_end"
    # the start report arrives late: it brings the job id, not a second event
    assert h.compute_task_id is not None
    coord.notify_started(h.compute_task_id, "4242")
    assert h.slurm_job_id == "4242"
    assert [e.kind for e in coord.history(h.id)].count("task.started") == 1


def test_a_task_whose_code_raised_is_announced_started_first(coord: FixedCoordinator) -> None:
    h = coord.submit_task(PythonTask(_boom, ()), ENV)
    res = coord.get_result(h, timeout_s=30)
    assert res.status == "failed" and "own error" in (res.error or "")
    assert [e.kind for e in coord.history(h.id)] == ["task.queued", "task.started", "task.failed"]
