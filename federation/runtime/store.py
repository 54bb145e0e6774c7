"""Durable coordinator state: tasks and events in SQLite (WAL), written before acknowledging.

A coordinator killed at any point and restarted with the same store re-attaches to every
in-flight task (through its Globus Compute task id and task group) and continues the event
log where it stopped, so callers resuming from a cursor miss nothing and no completion is
reported twice. Hedged tasks keep their copies in ``task_copies`` (site, partition, the
candidate, compute task id, state), so a restart re-attaches to every copy still racing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from federation.core.errors import FederationError
from federation.core.sqlite import Migration, columns, connect, migrate
from federation.runtime.events import Event
from federation.security.held import HELD_SCHEMA

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    kind TEXT NOT NULL,
    envelope TEXT NOT NULL,
    decision TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    site TEXT NOT NULL,
    endpoint_id TEXT,
    compute_task_id TEXT,
    state TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT,
    slurm_job_id TEXT,
    error TEXT,
    remote_traceback TEXT,
    value_json TEXT
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state);
CREATE TABLE IF NOT EXISTS task_copies (
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    site TEXT NOT NULL,
    partition TEXT NOT NULL,
    candidate TEXT NOT NULL,
    compute_task_id TEXT,
    state TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    ended_at TEXT,
    error TEXT,
    PRIMARY KEY (task_id, idx)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    task_id TEXT NOT NULL,
    site TEXT,
    at TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS transfers (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    backend TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at TEXT NOT NULL,
    completed_at TEXT,
    globus_task_id TEXT,
    submission_id TEXT,
    bytes_transferred INTEGER NOT NULL DEFAULT 0,
    files INTEGER NOT NULL DEFAULT 0,
    files_skipped INTEGER NOT NULL DEFAULT 0,
    checksum_verified INTEGER,
    error TEXT,
    history TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS groups (
    id TEXT PRIMARY KEY,
    objective TEXT NOT NULL,
    distinct_sites INTEGER NOT NULL,
    children TEXT NOT NULL,
    replacements TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""

_OWNER = "TEXT NOT NULL DEFAULT 'local'"  # the caller who created the record
_COLUMNS_ADDED = {
    "tasks": {
        "milestones": "TEXT",  # JSON: federation.runtime.milestones.Milestones
        # JSON: federation.runtime.results.ResultRef (a result spilled to storage)
        "value_ref": "TEXT",
        "accounting": "TEXT",  # JSON: federation.runtime.provenance.Accounting
        "attempts": "TEXT",  # JSON list: earlier attempts (site, failure, Slurm job id)
        "owner": _OWNER,
    },
    "task_copies": {"owner": _OWNER},
    "events": {"owner": _OWNER, "owner_seq": "INTEGER"},
    "transfers": {"owner": _OWNER},
    "groups": {"owner": _OWNER},
}
"""Columns added after a table's first release; older files get them on open (records
written before owners existed belong to ``local``, the in-process user)."""

TERMINAL = ("completed", "failed")


class StoreError(FederationError):
    """The state database refused a write (locked by another process, disk full, I/O)."""

    def __init__(self, path: Path, cause: sqlite3.OperationalError) -> None:
        self.path = path
        text = str(cause)
        if "locked" in text or "busy" in text:
            hint = "another process holds a write lock on it; stop that process and retry"
        elif "full" in text:
            hint = f"its file system is full; free space under {path.parent} and retry"
        else:
            hint = f"check the file and its file system ({path})"
        super().__init__(f"state database {path} refused a write ({text}): {hint}")


def _adopt_unversioned(db: sqlite3.Connection) -> None:
    """Migration 2: the columns added after each table's first release, where a file from
    before schema versions lacks them; then each owner's event cursor (``owner_seq``)."""
    for table, added in _COLUMNS_ADDED.items():
        have = columns(db, table)
        for col, sql_type in added.items():
            if col not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {sql_type}")
    db.execute("CREATE INDEX IF NOT EXISTS events_owner ON events(owner, seq)")
    # events from before owners: each owner's cursor counts its events in order
    db.execute(
        "UPDATE events SET owner_seq = (SELECT COUNT(*) FROM events AS e "
        "WHERE e.owner = events.owner AND e.seq <= events.seq) WHERE owner_seq IS NULL"
    )


def _shipping_intents(db: sqlite3.Connection) -> None:
    """Migration 4: what a restart asks the site about. ``ship_state`` is ``submitting``
    from just before a task (or copy) is handed to its site until its Globus Compute id is
    recorded (``acked``); ``spec`` is the task itself (serialized), so a restarted
    coordinator can ship again what never reached the site, and retry what failed."""
    for table, added in (
        ("tasks", {"ship_state": "TEXT", "spec": "TEXT"}),
        ("task_copies", {"ship_state": "TEXT"}),
    ):
        have = columns(db, table)
        for col, sql_type in added.items():
            if col not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {sql_type}")


_HOOKS = """
CREATE TABLE IF NOT EXISTS hooks (
    id INTEGER PRIMARY KEY,
    hook TEXT NOT NULL,
    ids TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""
"""Migration 5: hooks registered for tasks or groups, re-registered after a restart."""

_EVENTS_BY_RECORD = "CREATE INDEX IF NOT EXISTS events_record ON events(task_id, seq);"
"""Migration 6: one record's history read back (the bus keeps only open records')."""


def _task_notes(db: sqlite3.Connection) -> None:
    """Migration 7: a task's notes (why it was retried, shipped again, ...) kept with its
    end, so they outlive the handle a finished task no longer holds in memory."""
    if "notes" not in columns(db, "tasks"):
        db.execute("ALTER TABLE tasks ADD COLUMN notes TEXT")


def _workspace_columns(db: sqlite3.Connection) -> None:
    """Migration 8: a task's workspace files (``outputs``, JSON: path, size, sha256 per file
    and the count left out; :mod:`federation.core.workspace`) and the caller's named
    ``workflow`` whose workspace it ran in (NULL: the caller's own)."""
    have = columns(db, "tasks")
    for col in ("outputs", "workflow"):
        if col not in have:
            db.execute(f"ALTER TABLE tasks ADD COLUMN {col} TEXT")


MIGRATIONS: tuple[Migration, ...] = (
    _SCHEMA,
    _adopt_unversioned,
    HELD_SCHEMA,
    _shipping_intents,
    _HOOKS,
    _EVENTS_BY_RECORD,
    _task_notes,
    _workspace_columns,
)
"""The state store's schema, version by version (``PRAGMA user_version``): append, never
edit a released step."""


class Store:
    """One SQLite file; safe to share between threads of one process."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db = connect(self.path)
        migrate(self._db, MIGRATIONS, name=f"the coordinator's state store {self.path}")
        self._lock = threading.RLock()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; a locked or full database raises :class:`StoreError`."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    # SQLite may have rolled back already (SQLITE_FULL does): never mask
                    # the real error with "cannot rollback - no transaction is active"
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as e:
                raise StoreError(self.path, e) from e

    # --- meta ---------------------------------------------------------------------------
    def task_group_id(self) -> uuid.UUID:
        """The coordinator's Globus Compute task group, stable across restarts."""
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key='task_group_id'").fetchone()
            if row:
                return uuid.UUID(row[0])
            tg = uuid.uuid4()
            db.execute("INSERT INTO meta VALUES ('task_group_id', ?)", (str(tg),))
            return tg

    # --- events ---------------------------------------------------------------------------
    def append_event(self, ev: Event) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO events (seq, kind, task_id, site, at, detail, owner, owner_seq) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    ev.seq,
                    ev.kind,
                    ev.task_id,
                    ev.site,
                    ev.at.isoformat(),
                    json.dumps(ev.detail, default=str),
                    ev.owner,
                    ev.owner_seq,
                ),
            )

    def events(
        self, after_seq: int = 0, *, owner: str | None = None, record_id: str | None = None
    ) -> list[Event]:
        """Events after ``after_seq`` in order: all, one ``owner``'s (``after_seq`` is then
        their own cursor), or one record's."""
        args: tuple[Any, ...]
        if owner is not None:
            where, args = "WHERE owner=? AND owner_seq>? ORDER BY seq", (owner, after_seq)
        elif record_id is not None:
            where, args = "WHERE task_id=? AND seq>? ORDER BY seq", (record_id, after_seq)
        else:
            where, args = "WHERE seq>? ORDER BY seq", (after_seq,)
        return self._events(where, args)

    def event_tail(self, n: int) -> list[Event]:
        """The latest ``n`` events, in order."""
        return self._events("WHERE seq > (SELECT COALESCE(MAX(seq), 0) FROM events) - ?", (n,))

    def owner_cursors(self) -> dict[str, int]:
        """Each owner's cursor: how many events their own log has."""
        with self._lock:
            rows = self._db.execute("SELECT owner, MAX(owner_seq) FROM events GROUP BY owner")
            return {owner: int(last or 0) for owner, last in rows.fetchall()}

    def record_owner(self, record_id: str) -> str | None:
        """Who owns a task, group or transfer id, by its events or its task row."""
        with self._lock:
            row = (
                self._db.execute(
                    "SELECT owner FROM events WHERE task_id=? LIMIT 1", (record_id,)
                ).fetchone()
                or self._db.execute("SELECT owner FROM tasks WHERE id=?", (record_id,)).fetchone()
            )
        return row[0] if row else None

    def _events(self, where: str, args: tuple[Any, ...]) -> list[Event]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, kind, task_id, site, at, detail, owner, owner_seq FROM events "
                + where,
                args,
            ).fetchall()
        return [
            Event(
                seq=r[0],
                kind=r[1],
                task_id=r[2],
                site=r[3],
                at=datetime.fromisoformat(r[4]),
                detail=json.loads(r[5]),
                owner=r[6],
                owner_seq=r[7],
            )
            for r in rows
        ]

    # --- tasks ----------------------------------------------------------------------------
    def insert_task(self, row: dict[str, Any], copies: Sequence[dict[str, Any]] = ()) -> None:
        """Insert a task row and, in the same transaction, its hedged copies (if any)."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._tx() as db:
            db.execute(f"INSERT INTO tasks ({cols}) VALUES ({marks})", tuple(row.values()))
            for c in copies:
                _insert_copy(db, row["id"], c)

    def insert_hook(self, hook_json: str, ids: Sequence[str]) -> int:
        """Record a hook registered for these task or group ids; its row id."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO hooks (hook, ids, created_at) VALUES (?, ?, ?)",
                (hook_json, json.dumps(sorted(ids)), datetime.now(UTC).isoformat()),
            )
            return int(cur.lastrowid or 0)

    def update_hook_ids(self, row_id: int, ids: Sequence[str]) -> None:
        with self._tx() as db:
            db.execute("UPDATE hooks SET ids=? WHERE id=?", (json.dumps(sorted(ids)), row_id))

    def hooks(self) -> list[tuple[int, str, list[str]]]:
        """(row id, hook JSON, task or group ids) of every recorded hook."""
        with self._lock:
            rows = self._db.execute("SELECT id, hook, ids FROM hooks ORDER BY id").fetchall()
        return [(int(i), str(h), list(json.loads(ids))) for i, h, ids in rows]

    def update_task(self, task_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE tasks SET {sets} WHERE id=?", (*fields.values(), task_id))

    def insert_task_copy(self, task_id: str, copy: dict[str, Any]) -> None:
        """Record one more copy of a task already stored (a watching policy added it)."""
        with self._tx() as db:
            _insert_copy(db, task_id, copy)

    def update_task_copy(self, task_id: str, idx: int, **fields: Any) -> None:
        """Update one hedged copy of a task (its compute task id, state, end)."""
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE task_copies SET {sets} WHERE task_id=? AND idx=?",
                (*fields.values(), task_id, idx),
            )

    def task_copies(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """Hedged copies (all tasks', or one task's), by task and copy index."""
        where, args = ("WHERE task_id=?", (task_id,)) if task_id is not None else ("", ())
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM task_copies {where} ORDER BY task_id, idx", args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def task(self, task_id: str) -> dict[str, Any] | None:
        rows = self._select("WHERE id=?", (task_id,))
        return rows[0] if rows else None

    def task_summaries(self) -> list[dict[str, Any]]:
        """Every task's id, label, state, site and owner, in submission order (a listing
        without reading each task's whole row)."""
        with self._lock:
            cur = self._db.execute(
                "SELECT id, label, state, site, owner FROM tasks ORDER BY submitted_at"
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def unaccounted_tasks(self, since: str) -> list[dict[str, Any]]:
        """Tasks that ended (at or after ``since``, an ISO time) in a Slurm job and have no
        accounting recorded: id, site, owner, slurm_job_id and attempts, by their end
        (what a restart hands the accountant, :mod:`federation.runtime.accounting`)."""
        with self._lock:
            cur = self._db.execute(
                "SELECT id, site, owner, slurm_job_id, attempts FROM tasks WHERE state IN "
                "(?, ?) AND accounting IS NULL AND slurm_job_id IS NOT NULL "
                "AND completed_at >= ? ORDER BY completed_at",
                (*TERMINAL, since),
            )
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def tasks(self, *, open_only: bool = False) -> list[dict[str, Any]]:
        if open_only:
            return self._select("WHERE state NOT IN (?, ?)", TERMINAL)
        return self._select("", ())

    def _select(self, where: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM tasks {where} ORDER BY submitted_at", args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    # --- transfers (move_data) -------------------------------------------------------------
    def insert_transfer(self, row: dict[str, Any]) -> None:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._tx() as db:
            db.execute(f"INSERT INTO transfers ({cols}) VALUES ({marks})", tuple(row.values()))

    def update_transfer(self, transfer_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._tx() as db:
            db.execute(f"UPDATE transfers SET {sets} WHERE id=?", (*fields.values(), transfer_id))

    def transfers(
        self, *, open_only: bool = False, transfer_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Transfer rows by submission time (open ones only, or the one with ``transfer_id``)."""
        where = "WHERE state IN ('queued', 'active')" if open_only else ""
        args: tuple[str, ...] = ()
        if transfer_id is not None:
            where, args = "WHERE id=?", (transfer_id,)
        with self._lock:
            cur = self._db.execute(f"SELECT * FROM transfers {where} ORDER BY submitted_at", args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    # --- groups (submit_group) ---------------------------------------------------------------
    def upsert_group(self, row: dict[str, Any]) -> None:
        """Insert or replace a group row (children and replacements as JSON text)."""
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._tx() as db:
            sql = f"INSERT OR REPLACE INTO groups ({cols}) VALUES ({marks})"
            db.execute(sql, tuple(row.values()))

    def group(self, group_id: str) -> dict[str, Any] | None:
        with self._lock:
            cur = self._db.execute("SELECT * FROM groups WHERE id = ?", (group_id,))
            names = [d[0] for d in cur.description]
            row = cur.fetchone()
            return None if row is None else dict(zip(names, row, strict=True))

    def groups(self) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute("SELECT * FROM groups ORDER BY created_at")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _insert_copy(db: sqlite3.Connection, task_id: str, copy: dict[str, Any]) -> None:
    """A copy belongs to whoever owns its task."""
    (owner,) = db.execute("SELECT owner FROM tasks WHERE id=?", (task_id,)).fetchone()
    c = {"task_id": task_id, **copy, "owner": owner}
    cols = ", ".join(c)
    marks = ", ".join("?" for _ in c)
    db.execute(f"INSERT INTO task_copies ({cols}) VALUES ({marks})", tuple(c.values()))
