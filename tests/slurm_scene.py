"""Setting the scene on the local federation's Slurm clusters, and the two paths to them.

``fill_delta_cpu`` fills Delta's CPU partition (with more waiting) so a child placed there
queues; ``wait_until_quiet`` waits for the other sites' queues to be empty first (blocks a
previous test left idle are released after a few seconds), so the only child that waits is
the one on Delta, whichever tests ran before.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

BOTH_PATHS = pytest.mark.parametrize("local", ["embedded", "cloud"], indirect=True)
"""Run a module's tests on both paths to the sites (``pytestmark = [..., BOTH_PATHS]``):
``embedded``, the offline service's shortcuts; ``cloud``, what real endpoints offer, through
the strict stand-in of the Globus Compute service (:data:`federation.deploy.local.PATHS`)."""

FILLERS = 4
"""Jobs of a whole CPU node each: two run on Delta's two CPU nodes, two wait behind them."""


def fill_delta_cpu(slurm: Any, tag: str) -> None:
    for _ in range(FILLERS):
        res = slurm.run(
            "delta",
            [
                "sbatch",
                "--parsable",
                f"--job-name={tag}",
                "--partition=cpu",
                "--cpus-per-task=128",
                "--mem=8G",
                "--time=00:30:00",
                "--output=/dev/null",
                "--wrap=sleep 600",
            ],
        )
        assert res.returncode == 0, res.stderr
    # the controller schedules them before the group is placed
    until(
        "Delta's controller scheduled the fillers", lambda: scheduled(slurm, "delta", tag), 30, 0.1
    )


def scheduled(slurm: Any, site: str, name: str) -> bool:
    """``site``'s controller has looked at every job named ``name`` since it was submitted:
    one at least runs, and none waits with no reason yet (Slurm's ``None``: not considered
    by a scheduling pass). A full partition's waiting jobs then say ``Resources`` or
    ``Priority``, so a snapshot taken now sees the queue as it will stay."""
    res = slurm.run(site, ["squeue", "-h", f"--name={name}", "-o", "%T %r"])
    assert res.returncode == 0, res.stderr
    jobs = [ln.split(None, 1) for ln in res.stdout.splitlines() if ln.strip()]
    running = [j for j in jobs if j[0] == "RUNNING"]
    unconsidered = [j for j in jobs if j[0] == "PENDING" and j[1:] == ["None"]]
    return bool(running) and not unconsidered


def until(what: str, check: Any, timeout_s: float, every_s: float = 0.5) -> None:
    """Wait until ``check()`` is true; fail saying ``what`` did not happen in time."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(every_s)


def queued_jobs(slurm: Any, site: str) -> list[str]:
    res = slurm.run(site, ["squeue", "-h", "-o", "%i %j %T"])
    assert res.returncode == 0, res.stderr
    return [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]


def active_jobs(slurm: Any, site: str) -> list[str]:
    """Jobs queued or running on ``site``, but for the blocks a withdrawal held (a withdrawn
    copy's block: it uses nothing, never starts, and is cancelled when its user endpoint
    process ends)."""
    res = slurm.run(site, ["squeue", "-h", "-o", "%i %j %T %r"])
    assert res.returncode == 0, res.stderr
    out = []
    for ln in res.stdout.splitlines():
        parts = ln.split()
        held = parts[1:] and parts[1].startswith("fed.") and parts[2:] == ["PENDING", "JobHeldUser"]
        if parts and not held:
            out.append(" ".join(parts[:3]))
    return out


def held_blocks(slurm: Any, site: str) -> set[str]:
    """Job ids of the ``fed.*`` blocks held on ``site`` now (withdrawn copies' blocks an
    earlier test left: they never start, and go when their user endpoint process ends, or
    stay if that process was killed). A test that checks its own jobs left the queue takes
    these first and ignores them, and only them."""
    res = slurm.run(site, ["squeue", "-h", "-o", "%i %j %T %r"])
    assert res.returncode == 0, res.stderr
    out = set()
    for ln in res.stdout.splitlines():
        parts = ln.split()
        if parts[1:2] and parts[1].startswith("fed.") and parts[2:] == ["PENDING", "JobHeldUser"]:
            out.add(parts[0])
    return out


def wait_until_quiet(slurm: Any, sites: tuple[str, ...], timeout_s: float = 180.0) -> None:
    """Wait until no job is queued or running on ``sites`` (but for held withdrawn copies);
    fail saying what is left. The default covers a user endpoint process's idle lifetime
    on the local sites (24 heartbeats of 5 s, ``endpoint/manager.py`` ``LOCAL_LIFETIMES``):
    an earlier test's blocks were seen to stay until their process ended (two blocks of
    the hedging test's free site, 2 min 13 s after submission, with no task left in them),
    so a 90 s wait failed the next test."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while True:
        left = {s: jobs for s in sites if (jobs := active_jobs(slurm, s))}
        if not left:
            _note_wait(sites, time.monotonic() - t0)
            return
        if time.monotonic() > deadline:
            held = {s: _endpoint_open_tasks(slurm, s) for s in left}
            raise AssertionError(
                f"jobs left on {sorted(left)} after {timeout_s:.0f} s (an earlier test's "
                f"blocks were not released): {left}; tasks the endpoints still hold: {held}"
            )
        time.sleep(1.0)


def _note_wait(sites: tuple[str, ...], waited_s: float) -> None:
    """Where the suite's time goes: each wait for quiet queues, appended to
    ``$FEDERATION_QUIET_LOG`` when set (``--durations`` counts it inside the test)."""
    where = os.environ.get("FEDERATION_QUIET_LOG")
    if where and waited_s >= 1.0:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(where, "a") as f:
            f.write(f"{waited_s:.1f} {','.join(sites)} {test}\n")


def _endpoint_open_tasks(slurm: Any, site: str) -> list[tuple[Any, ...]]:
    """What ``site``'s endpoint daemon has not finished (which test's work holds a block)."""
    db = Path(slurm.home) / "endpoints" / site / "tasks.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT task_id, status, config_key, job_id, block_id, received_at FROM tasks "
            "WHERE completed_at IS NULL ORDER BY received_at DESC LIMIT 10"
        )
        return [tuple(r) for r in rows]
