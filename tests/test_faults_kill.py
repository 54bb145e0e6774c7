"""The coordinator SIGKILLed in the middle of a group re-placement and of a transfer.

Each fault is injected in a child process (a durable coordinator that kills itself at a
precise point, through a hook set in that process only); this process then restarts the
coordinator over the same state database and checks that nothing was lost or done twice.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from slurm_scene import fill_delta_cpu, held_blocks, wait_until_quiet

from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from federation.runtime.groups import REPLACED
from federation.runtime.store import Store
from federation.transfer.local import CHUNK_BYTES

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ROOT / "tests" / "helpers"
TAG = "fed-test-kill-fill"
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _fresh_db(home: Path) -> Path:
    db = home / "coordinator.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    return db


def _run_until_killed(argv: list[str], timeout_s: float) -> list[str]:
    """Run a crash helper to its SIGKILL; its stdout lines."""
    child = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=CHILD_ENV
    )
    try:
        out, _ = child.communicate(timeout=timeout_s)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert child.returncode == -signal.SIGKILL, (child.returncode, out)
    return out.splitlines()


def _line(lines: list[str], word: str) -> list[str]:
    found = [ln.split()[1:] for ln in lines if ln.startswith(word + " ")]
    assert len(found) == 1, (word, lines)
    return found[0]


# --- killed during a group re-placement --------------------------------------------------------
@pytest.mark.slurm
@pytest.mark.crash
@pytest.mark.parametrize("point", ["after_cancel", "after_submit"])
def test_sigkill_during_a_group_replacement_loses_and_repeats_no_child(
    local_federation: Any, tmp_path: Path, point: str
) -> None:
    home = local_federation.home
    local = LocalSites(home=home)
    local.up()
    db = _fresh_db(home)
    runs = tmp_path / "runs.txt"  # each child appends a line when (and each time) it runs
    coord: Coordinator | None = None
    try:
        # Delta's CPU nodes are full, with more waiting: the child placed there queues, and
        # the other sites are quiet, so it is the only child that waits
        wait_until_quiet(local.slurm, ("local", "vista", "delta"))
        earlier = held_blocks(local.slurm, "delta")
        fill_delta_cpu(local.slurm, TAG)
        lines = _run_until_killed(
            [str(HELPERS / "crash_in_replace.py"), str(home), str(runs), point], timeout_s=420
        )
        assert f"KILLING {point}" in lines, lines
        ids = _line(lines, "SUBMITTED")
        (gid,) = _line(lines, "GROUP")
        placed = dict(p.split("=") for p in _line(lines, "PLACED"))
        assert sorted(placed.values()) == ["delta", "local", "vista"]
        moved = next(name for name, site in placed.items() if site == "delta")
        old_id = ids[int(moved[1:]) - 1]
        assert _line(lines, "MOVING") == [old_id], (moved, lines)  # the queued child moved
        # killed mid-move: the queued placement is cancelled in the store, the round open
        store = Store(db)
        (row,) = [r for r in store.groups() if r["id"] == gid]
        assert row["state"] == "running"
        old_row = store.task(old_id)
        assert old_row is not None and (old_row["state"], old_row["error"]) == ("failed", REPLACED)
        store.close()

        coord = local.connect(durable=True, telemetry=False, probe_timeout_s=120)
        g = coord.groups.get(gid)
        assert [c.name for c in g.children] == ["c1", "c2", "c3"]
        assert g.wait(240), g.state()
        child = next(c for c in g.children if c.name == moved)
        hist = coord.events.history()
        assert [e.seq for e in hist] == list(range(1, len(hist) + 1))  # none lost, none twice
        per = Counter((e.task_id, e.kind) for e in hist)
        for tid in g.task_ids():  # every placement ended exactly once
            assert per[(tid, "task.queued")] == 1, tid
            assert per[(tid, "task.completed")] + per[(tid, "task.failed")] == 1, tid
        assert per[(gid, "group.submitted")] == 1
        assert per[(gid, "group.round_terminal")] == 1
        terminal = next(e for e in hist if e.kind == "group.round_terminal")
        ends = [e.seq for e in hist if e.task_id in g.task_ids() and e.kind.startswith("task.")]
        assert terminal.seq > max(ends) and terminal.detail["state"] == g.state()
        assert Store(db).groups()[-1]["state"] == "terminal"
        ran = Counter(line.split()[0] for line in runs.read_text().splitlines())
        group_events = [e for e in hist if e.task_id == gid]
        # killed after the cancel, the restart finishes the move (placed again elsewhere);
        # killed after the new submit, the replacement the killed coordinator submitted is
        # the child's: either way the child runs once, on its new site
        old, new = child.attempts
        assert old.id == old_id and old.error == REPLACED
        assert new.site in ("local", "vista") and new.state == "completed"
        assert g.state() == {"c1": "completed", "c2": "completed", "c3": "completed"}
        assert g.replacements == [{"child": moved, "from": "delta", "to": new.site}]
        (rep,) = [e for e in group_events if e.kind == "group.child_replaced"]
        assert rep.detail["new_task"] == new.id and rep.detail["recovered"] is True
        assert not [e for e in group_events if e.kind == "group.exception"]
        assert ran == {"c1": 1, "c2": 1, "c3": 1}
        (moved_run,) = [ln for ln in runs.read_text().splitlines() if ln.startswith(moved)]
        assert moved_run.split()[1] == new.site
        # the cancelled placement left nothing behind in Delta's queue
        q = local.slurm.run("delta", ["squeue", "-h", "-o", "%i %j %T"])
        left = [ln for ln in q.stdout.splitlines() if ln.strip() and ln.split()[0] not in earlier]
        assert all(ln.split()[1] == TAG for ln in left), q.stdout
    finally:
        local.slurm.run("delta", ["scancel", f"--name={TAG}"])
        if coord is not None:
            coord.close()
        if local.service is not None:
            local.service.close()


# --- killed during a transfer ------------------------------------------------------------------
FILE_BYTES = 96 << 20
"""Each source file's size: over the copy's 64 MiB progress step, so one is reported
half-copied."""


def _sparse_files(folder: Path, n: int) -> dict[str, str]:
    """``n`` sparse files with a few random MiB each; their sha256 by name."""
    folder.mkdir(parents=True)
    sums = {}
    for i in range(n):
        path = folder / f"part{i}.bin"
        with path.open("wb") as f:
            f.truncate(FILE_BYTES)
            for k in range(3):
                f.seek(k * (FILE_BYTES // 3))
                f.write(os.urandom(CHUNK_BYTES))
        sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".part-" in p.name)


@pytest.mark.crash
@pytest.mark.parametrize("into", ["a new folder", "an existing folder"])
def test_sigkill_during_a_transfer_then_recover_copies_exactly_once(
    tmp_path: Path, into: str
) -> None:
    home = tmp_path / "fed"
    sums = _sparse_files(home / "storage" / "anvil" / "ds", 3)
    dest = home / "storage" / "delta" / "ds"
    if into == "an existing folder":
        dest.mkdir(parents=True)
    lines = _run_until_killed(
        [str(HELPERS / "crash_in_transfer.py"), str(home), "anvil", "ds", "delta", "ds"],
        timeout_s=300,
    )
    copied, done = (int(x) for x in _line(lines, "KILLING"))
    assert done == 1 and FILE_BYTES < copied < 2 * FILE_BYTES
    db = home / "coordinator.db"
    store = Store(db)
    (row,) = store.transfers()
    tid = row["id"]
    assert row["state"] == "active" and row["bytes_transferred"] == copied  # what it reported
    store.close()
    assert _leftovers(home / "storage" / "delta")  # a half-written temporary, nothing in place
    if into == "a new folder":
        assert not dest.exists()

    again = Coordinator([], store=Store(db))
    try:
        assert again.recover() == []  # no compute tasks; the copy resumes alongside
        h = again.get_transfer(tid)
        assert h.wait(300), h.state
        assert (h.state, h.error, h.checksum_verified) == ("succeeded", None, True)
        assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dest.iterdir()} == sums
        assert _leftovers(home / "storage") == []
        assert [x["what"] for x in h.history] == ["recovered"]
        if into == "an existing folder":  # the file in place before the kill was not redone
            assert (h.files, h.files_skipped) == (2, 1)
            assert h.bytes_transferred == 2 * FILE_BYTES
        else:  # a folder is assembled aside and renamed whole: it is copied again, once
            assert (h.files, h.files_skipped) == (3, 0)
        hist = again.events.history()
        assert [e.seq for e in hist] == list(range(1, len(hist) + 1))
        kinds = Counter(e.kind for e in hist if e.task_id == tid)
        assert (kinds["transfer.submitted"], kinds["transfer.completed"]) == (1, 1)
        assert kinds["transfer.failed"] == 0
        notes = [e.detail.get("note", "") for e in hist if e.kind == "transfer.progress"]
        assert any(n.startswith("recovered: re-running the interrupted copy") for n in notes)
    finally:
        again.close()
    # a second restart finds nothing open: the transfer is not run or reported again
    third = Coordinator([], store=Store(db))
    try:
        assert third.recover() == [] and third.transfers.handles() == []
        assert third.get_transfer(tid).state == "succeeded"
        done_events = [e for e in third.events.history() if e.kind == "transfer.completed"]
        assert [e.task_id for e in done_events] == [tid]
    finally:
        third.close()
