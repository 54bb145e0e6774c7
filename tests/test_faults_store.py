"""Fault injection: the coordinator's state database is full or locked.

What the user sees: ``submit_task`` raises :class:`StoreError` saying which file, what
happened and what to do; nothing was shipped to a site, no event was emitted and no handle
was kept. Once the fault clears the same coordinator submits and completes normally.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import EventBus
from federation.runtime.store import Store, StoreError
from functions.workloads import square

pytestmark = pytest.mark.slurm

ENV = ResourceEnvelope(sites=("local",), walltime_s=300)


@pytest.fixture(scope="module")
def sites(local: LocalSites) -> Iterator[tuple[LocalSites, Coordinator]]:
    """The real local sites and a (non-durable) coordinator whose backends tests reuse."""
    base = local.connect(telemetry=False, probe_timeout_s=60)
    try:
        yield local, base
    finally:
        base.close()
        if local.service is not None:
            local.service.close()


def _durable(base: Coordinator, local: LocalSites, path: Path) -> Coordinator:
    store = Store(path)
    coord = Coordinator(  # the local site only: probing every site is not the point
        [base.backends["local"]], store=store, bus=EventBus(store), probe_timeout_s=60
    )
    assert local.service is not None
    local.service.on_started(coord.notify_started)
    return coord


def _shipped(local: LocalSites, coord: Coordinator) -> int:
    """Tasks the service holds in ``coord``'s task group (its probes travel in a group of
    their own, and a probe round behind the callers may land at any time)."""
    assert local.service is not None
    groups = {str(getattr(b, "task_group_id", "")) for b in coord.backends.values()}
    return sum(1 for t in local.service._tasks.values() if t.task_group_id in groups)


def _assert_nothing_happened(coord: Coordinator, local: LocalSites, shipped_before: int) -> None:
    assert _shipped(local, coord) == shipped_before, "a task was shipped despite the store error"
    assert coord.handles() == [], "a handle was kept for a task that was never recorded"
    assert coord.events.history() == [], "an event was emitted for an unrecorded task"
    assert coord.store is not None and coord.store.tasks() == []


def _assert_recovers(coord: Coordinator) -> None:
    h = coord.submit_task(PythonTask(square, (12,)), ENV)
    assert coord.result_value(h, timeout_s=180) == 144
    assert coord.store is not None
    rows = coord.store.tasks()
    assert [(r["id"], r["state"]) for r in rows] == [(h.id, "completed")]
    kinds = [e.kind for e in coord.events.history()]
    assert kinds.count("task.completed") == 1 and kinds[0] == "task.queued"


def test_locked_database_refuses_submit_and_ships_nothing(
    sites: tuple[LocalSites, Coordinator], tmp_path: Path
) -> None:
    local, base = sites
    coord = _durable(base, local, tmp_path / "coordinator.db")
    assert coord.store is not None
    coord.store._db.execute("PRAGMA busy_timeout=300")  # fail fast instead of after 5 s
    snap = coord.inspect_federation()
    before = _shipped(local, coord)
    other = sqlite3.connect(tmp_path / "coordinator.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with pytest.raises(StoreError, match="locked") as err:
            coord.submit_task(PythonTask(square, (3,)), ENV, snapshot=snap)
        assert "another process holds a write lock" in str(err.value)
        assert str(tmp_path / "coordinator.db") in str(err.value)
        _assert_nothing_happened(coord, local, before)
    finally:
        other.execute("ROLLBACK")
        other.close()
    _assert_recovers(coord)


def test_full_database_refuses_submit_and_ships_nothing(
    sites: tuple[LocalSites, Coordinator], tmp_path: Path
) -> None:
    """SQLite's own limit on the file's size: the same SQLITE_FULL a full disk gives."""
    local, base = sites
    coord = _durable(base, local, tmp_path / "coordinator.db")
    assert coord.store is not None
    db = coord.store._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    snap = coord.inspect_federation()
    before = _shipped(local, coord)
    big = PythonTask(square, (3,), name="x" * 20_000)  # needs new pages
    with pytest.raises(StoreError, match="full") as err:
        coord.submit_task(big, ENV, snapshot=snap)
    assert "free space" in str(err.value)
    assert "cannot rollback" not in str(err.value)  # the real cause is not masked
    _assert_nothing_happened(coord, local, before)
    db.execute("PRAGMA max_page_count=1073741823")
    _assert_recovers(coord)


@contextlib.contextmanager
def _tiny_filesystem(where: Path, size_kb: int) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount(8) here: the disk-full case is covered by max_page_count")
    proc = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs ({proc.stderr.strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with contextlib.suppress(OSError), open(filler, "wb") as f:  # ENOSPC, maybe at close
        while True:
            f.write(chunk)
            f.flush()
    return filler


def test_full_disk_refuses_submit_and_ships_nothing(
    sites: tuple[LocalSites, Coordinator], tmp_path: Path
) -> None:
    """A real full file system under the database (a 512 KiB tmpfs)."""
    local, base = sites
    with _tiny_filesystem(tmp_path / f"fs-{uuid.uuid4().hex[:6]}", 512) as fs:
        coord = _durable(base, local, fs / "coordinator.db")
        snap = coord.inspect_federation()
        before = _shipped(local, coord)
        filler = _fill(fs)
        big = PythonTask(square, (3,), name="y" * 64_000)
        with pytest.raises(StoreError, match="full") as err:
            coord.submit_task(big, ENV, snapshot=snap)
        assert str(fs) in str(err.value)
        _assert_nothing_happened(coord, local, before)
        filler.unlink()
        _assert_recovers(coord)
        assert coord.store is not None
        coord.store.close()
