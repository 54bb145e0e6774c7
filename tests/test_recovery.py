"""A coordinator killed with SIGKILL mid-run loses nothing and reports no completion twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from federation.envelope import ResourceEnvelope
from federation.events import EventBus
from federation.local import LocalSites
from federation.store import Store
from federation.tasks import PythonTask
from functions.workloads import square

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]


def test_store_keeps_events_and_continues_the_sequence(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.db")
    bus = EventBus(store)
    bus.emit("task.queued", "a")
    bus.emit("task.completed", "a", runtime_s=1.5)
    again = EventBus(Store(tmp_path / "c.db"))
    assert [(e.seq, e.kind) for e in again.history()] == [(1, "task.queued"), (2, "task.completed")]
    assert again.emit("task.queued", "b").seq == 3
    assert again.await_event(2, timeout_s=0)[0].task_id == "b"
    assert Store(tmp_path / "c.db").task_group_id() == store.task_group_id()


def test_sigkill_mid_run_then_restart_accounts_for_every_task(
    local_federation: Any, tmp_path: Path
) -> None:
    home = local_federation.home
    LocalSites(home=home).up()
    db = home / "coordinator.db"
    db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    # one quick task (done before the kill), two that are still running when it comes
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "helpers" / "crash_child.py"), str(home), "0.1,6,8"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("SUBMITTED "), line
        ids = line.split()[1:]
        time.sleep(4.0)  # let the first finish and the others start
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    local = LocalSites(home=home)
    coord = local.connect(durable=True, telemetry=False)
    try:
        for tid in ids:
            r = coord.get_result(tid, timeout_s=120)
            assert r.status == "completed", (tid, r.error)
            assert r.value["cluster"] == "local"
        completions = Counter(
            e.task_id for e in coord.events.history() if e.kind == "task.completed"
        )
        assert {tid: completions[tid] for tid in ids} == {tid: 1 for tid in ids}
        # the restarted coordinator still runs new work, on the same task group
        h = coord.submit_task(
            PythonTask(square, (9,)), ResourceEnvelope(sites=("local",), walltime_s=300)
        )
        assert coord.result_value(h, timeout_s=120) == 81
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
