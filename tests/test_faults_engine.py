"""Fault injection: the endpoint engine's worker running a task is killed (SIGKILL).

What the user sees: the task fails with the engine's own reason (``WorkerLost``, classified
``node_failure``), or, when the envelope allows another site and the retry budget is not
spent, a ``task.retried`` event and a completion on the other site, with the lost attempt
in the manifest. Never a hang; the task's side effect happens exactly once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import types
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle

pytestmark = pytest.mark.slurm


def pid_then_work(marker: str, done_file: str, work_s: float) -> str:
    """Write this worker's pid to ``marker``, work, then append one line to ``done_file``."""
    import os
    import time
    from pathlib import Path

    Path(marker).write_text(f"{os.getpid()}\n")
    time.sleep(work_s)
    with open(done_file, "a") as f:
        f.write(f"{os.environ.get('SLURM_CLUSTER_NAME')} {os.getpid()}\n")
    return os.environ.get("SLURM_CLUSTER_NAME") or "?"


def by_value(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``fn`` that dill ships by value (the workers cannot import test modules)."""
    copy = types.FunctionType(
        fn.__code__, {"__builtins__": __builtins__, "__name__": "__main__"}, fn.__name__
    )
    copy.__module__ = "__main__"
    return copy


def _wait_for(path: Path, h: TaskHandle, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text().strip()):
            return text
        assert not h.done, f"the task ended before it started working: {h.error}"
        time.sleep(0.1)
    raise AssertionError(f"the task never started (no {path} after {timeout_s:.0f} s)")


def _kill_worker(marker: Path, h: TaskHandle) -> int:
    pid = int(_wait_for(marker, h, 240))
    os.kill(pid, signal.SIGKILL)
    return pid


def _files(tmp_path: Path) -> tuple[Path, Path]:
    tag = uuid.uuid4().hex[:8]
    return tmp_path / f"pid-{tag}", tmp_path / f"done-{tag}"


def test_killed_worker_fails_the_task_with_the_engines_reason(
    coord: Coordinator, tmp_path: Path
) -> None:
    marker, done = _files(tmp_path)
    events: list[Event] = []
    h = coord.submit_task(
        PythonTask(by_value(pid_then_work), (str(marker), str(done), 120.0)),
        ResourceEnvelope(sites=("local",), walltime_s=600),
        on_event=events.append,
    )
    _kill_worker(marker, h)
    r = coord.get_result(h, timeout_s=240)  # parsl's worker watchdog notices within ~30 s
    assert r.status == "failed"
    assert "WorkerLost" in (r.error or ""), r.error  # the reason, not a '+++' banner line
    assert r.attempts == ()  # only one allowed site: nothing to retry on
    kinds = [e.kind for e in events]
    assert kinds.count("task.failed") == 1 and "task.completed" not in kinds
    failed = next(e for e in events if e.kind == "task.failed")
    assert failed.detail["failure"] == "node_failure"
    assert not done.exists(), "the killed attempt must not have finished its side effect"


def test_killed_worker_is_retried_on_another_site_exactly_once(
    coord: Coordinator, tmp_path: Path
) -> None:
    marker, done = _files(tmp_path)
    events: list[Event] = []
    retried = threading.Event()

    def on_event(ev: Event) -> None:
        events.append(ev)
        if ev.kind == "task.retried":
            retried.set()

    assert coord.retry_budget >= 1
    h = coord.submit_task(
        PythonTask(by_value(pid_then_work), (str(marker), str(done), 6.0)),
        ResourceEnvelope(sites=("local", "vista"), walltime_s=600),
        on_event=on_event,
    )
    first = h.site
    killed = _kill_worker(marker, h)
    assert retried.wait(240), [e.kind for e in events]
    r = coord.get_result(h, timeout_s=300)
    assert r.status == "completed", (r.error, r.remote_traceback)
    other = ({"local", "vista"} - {first}).pop()
    assert r.site == other and r.value == other
    assert [a["site"] for a in r.attempts] == [first]
    assert r.attempts[0]["failure"] == "node_failure"
    kinds = Counter(e.kind for e in events)
    assert kinds["task.completed"] == 1 and kinds["task.failed"] == 0
    assert kinds["task.retried"] == 1
    lines = done.read_text().splitlines()  # the side effect happened once, on the retry
    assert len(lines) == 1 and lines[0].split()[0] == other
    assert int(lines[0].split()[1]) != killed
