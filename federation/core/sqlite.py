"""SQLite files the coordinator keeps, opened one way and migrated by version.

Every SQLite file the coordinator side writes (its state store with held tasks, telemetry,
the audit log, the token store) is opened through :func:`connect` and brought up to date by
:func:`migrate`: an ordered list of migrations per file, the number applied kept in
``PRAGMA user_version``, each applied once, in its own transaction, in order. A file newer
than the code (a version above the migrations known) is refused with the reason, instead of
being written by code that does not know its schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from federation.core.errors import FederationError

Migration = str | Callable[[sqlite3.Connection], None]
"""SQL (one or more statements), or a function given the connection inside the
migration's transaction."""


class SchemaError(FederationError):
    """A database file written by a newer version of federation."""


def connect(
    path: Path | str | None, *, wal: bool = True, timeout_s: float = 10.0
) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), shareable between
    threads that serialize their use; ``None`` or ``":memory:"`` for an in-memory one.
    Files get write-ahead logging (readers never block the writer)."""
    target = ":memory:" if path in (None, ":memory:") else str(path)
    if target != ":memory:":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=timeout_s)
    if wal and target != ":memory:":
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    return db


def migrate(db: sqlite3.Connection, migrations: Sequence[Migration], *, name: str) -> int:
    """Apply the migrations this file has not had yet; returns the version it is now at.

    ``name`` names the file's role in errors ("the coordinator's state store").
    """
    have = int(db.execute("PRAGMA user_version").fetchone()[0])
    if have > len(migrations):
        raise SchemaError(
            f"{name} is at schema version {have}, newer than this federation knows "
            f"({len(migrations)}): upgrade federation, or point it at another file"
        )
    for version in range(have + 1, len(migrations) + 1):
        step = migrations[version - 1]
        db.execute("BEGIN IMMEDIATE")
        try:
            # another process may have migrated it meanwhile: read again under the lock
            if int(db.execute("PRAGMA user_version").fetchone()[0]) >= version:
                db.execute("COMMIT")
                continue
            if isinstance(step, str):
                for stmt in _statements(step):
                    db.execute(stmt)
            else:
                step(db)
            db.execute(f"PRAGMA user_version = {version:d}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return len(migrations)


def _statements(sql: str) -> list[str]:
    """Split a script into statements (``executescript`` would commit our transaction)."""
    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def columns(db: sqlite3.Connection, table: str) -> set[str]:
    """The columns ``table`` has (for a migration that adopts files from before versions)."""
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
