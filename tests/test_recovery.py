"""A coordinator killed with SIGKILL mid-run loses nothing and reports no completion twice."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.events import EventBus
from federation.runtime.store import Store
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


def _submit_then_kill(home: Path, path: str, args: list[str], after_s: float) -> list[str]:
    """Run ``tests/helpers/crash_child.py HOME *args`` on ``path``; SIGKILL it ``after_s``
    after it printed the ids of the tasks it submitted, which are returned."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "helpers" / "crash_child.py"), str(home), *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FEDERATION_PATH": path},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("SUBMITTED "), line
        time.sleep(after_s)
        return line.split()[1:]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)


@pytest.mark.crash
@pytest.mark.parametrize("path", ["embedded", "cloud"])
def test_sigkill_mid_run_then_restart_accounts_for_every_task(
    local_federation: Any, tmp_path: Path, path: str
) -> None:
    home = local_federation.home
    LocalSites(home=home).up()
    db = home / "coordinator.db"
    db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    # one quick task (done before the kill), two that are still running when it comes;
    # the kill 4 s after: the first finished and the others started
    ids = _submit_then_kill(home, path, ["0.1,6,8"], after_s=4.0)
    local = LocalSites(home=home, path=path)  # the cloud path: the service remembers
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
    # the store connect() opened was closed with the coordinator (no handle left open)
    assert coord.store is not None
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        coord.store.tasks()


@pytest.mark.crash
@pytest.mark.parametrize("path", ["embedded", "cloud"])
def test_sigkill_with_tasks_on_three_sites_reattaches_every_site(
    local_federation: Any, tmp_path: Path, path: str
) -> None:
    """Six shell tasks over three sites, the coordinator SIGKILLed at a seeded random time
    while they run: the restarted one reports every task completed with its own output,
    and each ran once (one job id in its file). Before, only the first site re-attached
    its tasks; the others were reported as no longer known (issue 25)."""
    home = local_federation.home
    LocalSites(home=home).up()
    db = home / "coordinator.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    seed = int(os.environ.get("FEDERATION_CRASH_SEED", time.time_ns() % 10_000))
    delay_s = random.Random(seed).uniform(2.0, 8.0)
    print(f"\ncrash seed {seed}: SIGKILL {delay_s:.1f} s after the tasks were submitted")
    out = tmp_path / "ran"
    out.mkdir()
    work = "3,3,3,20,20,20"
    ids = _submit_then_kill(home, path, [work, "shell", "local,delta,vista", str(out)], delay_s)
    local = LocalSites(home=home, path=path)
    coord = local.connect(durable=True, telemetry=False)
    try:
        sites = {}
        for i, tid in enumerate(ids):
            r = coord.get_result(tid, timeout_s=180)
            assert r.status == "completed", (seed, tid, r.site, r.error)
            assert r.stdout is not None and r.stdout.strip() == f"ran-{i}", (seed, r.stdout)
            sites[tid] = r.site
        assert set(sites.values()) == {"local", "delta", "vista"}
        ran = {p.name: p.read_text().split() for p in out.iterdir()}
        assert {k: len(v) for k, v in ran.items()} == {str(i): 1 for i in range(6)}, (seed, ran)
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()


@pytest.mark.crash
@pytest.mark.parametrize("path", ["embedded", "cloud"])
def test_sigkill_during_a_group_then_restart_reattaches_the_group(
    local_federation: Any, tmp_path: Path, path: str
) -> None:
    home = local_federation.home
    LocalSites(home=home).up()
    db = home / "coordinator.db"
    db.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    child = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "crash_child.py"),
            str(home),
            "0.1,6,8",
            "group",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FEDERATION_PATH": path},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("SUBMITTED "), line
        ids = line.split()[1:]
        gline = child.stdout.readline()
        assert gline.startswith("GROUP "), gline
        gid = gline.split()[1]
        time.sleep(4.0)  # the first child finishes, the others are running
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    # killed mid-round: the store holds the group, not yet terminal, and all three children
    store = Store(db)
    (row,) = [r for r in store.groups() if r["id"] == gid]
    assert row["state"] == "running"
    assert {r["id"] for r in store.tasks()} >= set(ids)
    store.close()
    local = LocalSites(home=home, path=path)  # the cloud path: the service remembers
    coord = local.connect(durable=True, telemetry=False)
    try:
        g = coord.groups.get(gid)
        assert [c.name for c in g.children] == ["c1", "c2", "c3"]
        assert [c.handle.id for c in g.children] == ids
        assert g.wait(180), g.state()
        assert g.state() == {"c1": "completed", "c2": "completed", "c3": "completed"}
        for tid in ids:
            r = coord.get_result(tid, timeout_s=60)
            assert r.status == "completed", (tid, r.error)
        hist = coord.events.history()
        assert [e.seq for e in hist] == list(range(1, len(hist) + 1))  # none lost, none twice
        per_task = Counter((e.task_id, e.kind) for e in hist)
        for tid in ids:
            assert per_task[(tid, "task.queued")] == 1
            assert per_task[(tid, "task.completed")] == 1
            assert per_task[(tid, "task.failed")] == 0
        assert per_task[(gid, "group.submitted")] == 1
        assert per_task[(gid, "group.round_terminal")] == 1
        last_child = max(e.seq for e in hist if e.task_id in ids and e.kind == "task.completed")
        terminal = next(e for e in hist if e.kind == "group.round_terminal")
        assert terminal.seq > last_child and terminal.detail["state"] == g.state()
        assert Store(db).groups()[-1]["state"] == "terminal"
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
