"""Versioned migrations of the coordinator's SQLite files (``PRAGMA user_version``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from federation.core.sqlite import SchemaError, connect, migrate
from federation.runtime import store as store_module
from federation.runtime.store import Store
from federation.security.audit import AuditLog
from federation.security.held import HeldTasks
from federation.security.tokens import TokenStore


def _version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def test_each_migration_runs_once_in_order(tmp_path: Path) -> None:
    ran: list[int] = []
    steps = [
        "CREATE TABLE t (a INTEGER);\nINSERT INTO t VALUES (1);",
        lambda db: ran.append(2) or db.execute("ALTER TABLE t ADD COLUMN b TEXT"),
    ]
    db = connect(tmp_path / "x.db")
    assert migrate(db, steps, name="x") == 2
    assert migrate(db, steps, name="x") == 2  # nothing again
    assert ran == [2] and db.execute("SELECT a, b FROM t").fetchall() == [(1, None)]
    steps.append("INSERT INTO t VALUES (3, 'three')")
    assert migrate(db, steps, name="x") == 3
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 2


def test_a_failed_migration_leaves_the_file_at_the_last_good_version(tmp_path: Path) -> None:
    db = connect(tmp_path / "x.db")
    steps = [
        "CREATE TABLE t (a INTEGER)",
        "INSERT INTO t VALUES (1);\nINSERT INTO nope VALUES (2);",
    ]
    with pytest.raises(sqlite3.OperationalError, match="nope"):
        migrate(db, steps, name="x")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 0  # rolled back whole


def test_a_file_from_a_newer_federation_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.db"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(store_module.MIGRATIONS) + 1}")
    with pytest.raises(SchemaError, match="newer than this federation knows"):
        Store(path)


def test_a_store_from_before_versions_is_adopted(tmp_path: Path) -> None:
    """A file written before schema versions (first-release tables, no owner columns)
    gets the later columns and the per-owner event cursor, and keeps its rows."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(store_module._SCHEMA)
        db.execute(
            "INSERT INTO events (seq, kind, task_id, site, at, detail) "
            "VALUES (1, 'task.queued', 't1', 'local', '2026-01-01T00:00:00+00:00', '{}')"
        )
    s = Store(path)
    try:
        (ev,) = s.events()
        assert (ev.seq, ev.owner, ev.owner_seq) == (1, "local", 1)
    finally:
        s.close()
    assert _version(path) == len(store_module.MIGRATIONS)


def test_every_coordinator_file_is_versioned(tmp_path: Path) -> None:
    Store(tmp_path / "coordinator.db").close()
    HeldTasks(tmp_path / "coordinator.db").close()  # shares the store's file and version
    AuditLog(tmp_path / "audit.db")
    TokenStore(tmp_path / "tokens.db")
    for name in ("coordinator.db", "audit.db", "tokens.db"):
        assert _version(tmp_path / name) >= 1, name
    with pytest.raises(SchemaError, match="not a coordinator state store"):
        HeldTasks(tmp_path / "audit.db")


def test_an_audit_log_from_before_charges_gains_them_and_keeps_its_rows(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from federation.security import audit as audit_module
    from federation.security.audit import AuditRecord

    path = tmp_path / "audit.db"
    db = connect(path)
    migrate(db, audit_module.MIGRATIONS[:1], name="old audit")  # version 1: core-hours only
    db.execute(
        "INSERT INTO audit (at, caller, label, task_kind, what, core_hours, decision, rules, "
        "message) VALUES ('2026-01-01T00:00:00+00:00', 'alice', '', 'shell', 'true', 2.0, "
        "'allowed', '', '')"
    )
    db.close()
    log = AuditLog(path)
    new = AuditRecord(
        at=datetime.now(UTC),
        caller="bob",
        task_kind="shell",
        what="true",
        charge=3.0,
        charge_unit="gpu-hours",
        decision="allowed",
    )
    log.append(new)
    old, mine = log.records()
    assert (old.core_hours, old.charge, old.charge_unit) == (2.0, None, None)
    assert (mine.charge, mine.charge_unit) == (3.0, "gpu-hours")
    assert _version(path) == len(audit_module.MIGRATIONS) == 2
    log.close()
