"""The crash-point suite: a durable coordinator SIGKILLed at each named point of a task's
life (``federation.runtime.crashpoints``), then restarted; every task completes **exactly
once**.

Each run of a task appends its Slurm job id to its own runs file, so the file's lines count
executions on the site (and name the one job that ran it). After the restart the test
checks the task completed, ran once, its lifecycle events came once each in order
(queued, started, an end), and no record is left open. The other points of the suite
(a group's re-placement, a transfer, a run killed mid-flight) are in
``tests/test_faults_kill.py`` and ``tests/test_recovery.py``, marked ``crash`` too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_scene import held_blocks, until

from federation.deploy.local import LocalSites
from federation.runtime.crashpoints import POINTS
from federation.runtime.store import Store

pytestmark = [pytest.mark.slurm, pytest.mark.crash]
ROOT = Path(__file__).resolve().parents[1]
LIFE = ("task.queued", "task.started", "task.retried", "task.completed", "task.failed")

CASES = [
    ("placed", "embedded"),
    ("recorded", "embedded"),
    ("shipping", "embedded"),
    ("accepted", "embedded"),
    ("accepted", "cloud"),
    ("started", "embedded"),
    ("result", "embedded"),
    ("retry", "embedded"),
    ("hedge.cancel", "embedded"),
]


def _fresh_store(home: Path) -> Path:
    db = home / "coordinator.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    return db


def _word(out: str, word: str) -> str | None:
    for line in out.splitlines():
        if line.startswith(word + " "):
            return line.split(" ", 1)[1].strip()
    return None


def _ours(fed: Any, before: set[str]) -> list[str]:
    """Delta's jobs but the scene's fillers and the held blocks earlier tests left."""
    out = fed.run("delta", ["squeue", "-h", "-o", "%i %j %T"]).stdout.splitlines()
    return [j for j in out if j.strip() and "fed-crash-" not in j and j.split()[0] not in before]


def _release(fed: Any) -> None:
    fed.run("delta", ["scancel", "--name=fed-crash-fill"])
    fed.run("local", ["scancel", "--name=fed-crash-hold"])


def test_every_case_names_a_known_point() -> None:
    assert {p for p, _ in CASES} <= set(POINTS)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("point", "path"), CASES, ids=[f"{p}-{q}" for p, q in CASES])
def test_killed_at_a_point_then_restarted_runs_the_task_exactly_once(
    local_federation: Any, tmp_path: Path, point: str, path: str, request: Any
) -> None:
    home = local_federation.home
    LocalSites(home=home).up()
    db = _fresh_store(home)
    runs = tmp_path / "runs"
    runs.mkdir()
    earlier = held_blocks(local_federation, "delta")
    scenario = {"retry": "retry", "hedge.cancel": "hedge"}.get(point, "once")
    child = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "helpers" / "crash_at.py"),
            str(home),
            str(runs),
            scenario,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "FEDERATION_PATH": path,
            "FEDERATION_CRASH_AT": point,
        },
        timeout=600,
        check=False,
    )
    if scenario == "hedge":  # the fillers and holders stay until the restart is checked
        request.addfinalizer(lambda: _release(local_federation))
    assert child.returncode == -9, (child.returncode, child.stdout, child.stderr[-3000:])
    assert f"CRASH {point}" in child.stdout and "NO CRASH" not in child.stdout, child.stdout
    token = _word(child.stdout, "TOKEN")
    assert token is not None
    rows = Store(db).tasks()
    if point == "placed":  # nothing was recorded, nothing shipped: the caller got no id
        assert rows == [] and not (runs / token).exists()
        return
    assert len(rows) == 1, rows
    tid = rows[0]["id"]
    local = LocalSites(home=home, path=path)
    coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120)
    try:
        r = coord.get_result(tid, timeout_s=400)
        assert r.status == "completed", (r.error, coord.task(tid).notes)
        jobs = (runs / token).read_text().split()
        assert len(jobs) == 1, f"ran {len(jobs)} times (Slurm jobs {jobs})"
        hist = coord.events.history()
        # the cursor a waiting agent reads goes on across the crash: no gap, no repeat
        assert [e.seq for e in hist] == list(range(1, len(hist) + 1))
        mine = [e for e in hist if e.task_id == tid]
        assert len({(e.kind, e.site, e.at) for e in mine}) == len(mine)
        kinds = [e.kind for e in mine if e.kind in LIFE]
        if point == "retry":
            assert kinds[0] == "task.queued" and kinds[-2:] == ["task.started", "task.completed"]
            assert kinds.count("task.retried") == 1 and kinds.count("task.completed") == 1
            assert "task.failed" not in kinds
        else:
            assert kinds == ["task.queued", "task.started", "task.completed"], kinds
        assert all(row["state"] in ("completed", "failed") for row in coord.store.tasks())
        assert all(c["state"] != "queued" for c in coord.store.task_copies())
        if scenario == "hedge":  # the losing copy's batch job left Delta's queue
            copies = {c["site"]: c["state"] for c in coord.store.task_copies(tid)}
            assert copies == {"delta": "cancelled", "local": "won"}, copies
            until("the Delta copy's job is gone", lambda: not _ours(local_federation, earlier), 60)
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
