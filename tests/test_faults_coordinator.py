"""Fault injection: the coordinator SIGKILLed inside ``submit_task``.

What the user sees after a restart (``LocalSites.connect(durable=True)``): a task the
coordinator recorded but never shipped is shipped by the restarted coordinator (the site's
task group shows it never arrived) and completes once; the site receives it once. (The
other crash points are in ``tests/test_crash_points.py``.)
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from federation.deploy.local import LocalSites
from federation.runtime.store import Store

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]


def _fresh_store(home: Path) -> Path:
    db = home / "coordinator.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    return db


def _site_task_count(home: Path) -> int:
    db = home / "endpoints" / "local" / "tasks.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as c:
        return int(c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])


@pytest.mark.crash
def _site_tasks(home: Path) -> dict[str, str]:
    """The local endpoint's tasks: config key by task id (probes share one key)."""
    with sqlite3.connect(home / "endpoints" / "local" / "tasks.db") as c:
        return {t: k for t, k in c.execute("SELECT task_id, config_key FROM tasks")}


def _last_key(home: Path) -> str:
    with sqlite3.connect(home / "endpoints" / "local" / "tasks.db") as c:
        row = c.execute("SELECT config_key FROM tasks ORDER BY received_at DESC LIMIT 1")
        return str(row.fetchone()[0])


def test_sigkill_inside_submit_before_shipping(local_federation: Any) -> None:
    home = local_federation.home
    LocalSites(home=home, sites=["local"]).up()
    db = _fresh_store(home)
    child = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "crash_in_submit.py"),
            str(home),
            "before_ship",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
        check=False,
    )
    assert child.returncode == -9, (child.returncode, child.stderr[-2000:])
    assert "SHIPPING" in child.stdout and "NOT KILLED" not in child.stdout
    site_tasks = int(child.stdout.split("SITE_TASKS ", 1)[1].split()[0])
    rows = Store(db).tasks()
    assert len(rows) == 1 and rows[0]["compute_task_id"] is None  # recorded, not acked
    before, probe_key = _site_tasks(home), _last_key(home)  # the child's last was a probe
    tid = rows[0]["id"]

    local = LocalSites(home=home, sites=["local"])
    coord = local.connect(durable=True, telemetry=False)
    try:
        r = coord.get_result(tid, timeout_s=240)
        assert r.status == "completed" and r.value == 25, r.error
        assert any("shipped again" in n for n in coord.task(tid).notes)
        ends = Counter(e.kind for e in coord.events.history() if e.task_id == tid)
        assert ends["task.completed"] == 1 and ends["task.failed"] == 0
        assert _site_task_count(home) >= site_tasks + 1
        work = [t for t, k in _site_tasks(home).items() if t not in before and k != probe_key]
        assert work == [Store(db).task(tid)["compute_task_id"]], "received twice, or never"
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
    # a second restart reports nothing new: the end was recorded once, durably
    again = LocalSites(home=home, sites=["local"])
    coord2 = again.connect(durable=True, telemetry=False)
    try:
        ends = Counter(e.kind for e in coord2.events.history() if e.task_id == tid)
        assert ends["task.completed"] == 1 and ends["task.failed"] == 0
    finally:
        coord2.close()
        if again.service is not None:
            again.service.close()
