"""The audit log: an append-only SQLite table of who ran what where, and what policy said.

One row per policy decision: a task allowed and shipped, denied, held (``unresolved``), and
later ``approved`` or ``rejected`` by an operator; and one row each time an operator reads,
waits on or cancels another caller's work (``operator_access``). SQLite triggers refuse
``UPDATE`` and ``DELETE`` on the table, so a row once written stays as written. No
credential is ever recorded: callers appear by name, never by token.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field

from federation.core.model import Frozen
from federation.core.paths import federation_home
from federation.core.sqlite import Migration, connect, migrate

AuditDecision = Literal[
    "allowed", "denied", "unresolved", "approved", "rejected", "operator_access"
]
RecordKind = Literal["shell", "python", "group", "transfer", "events", "tasks"]
"""What a row is about: a task (shell or Python), or, for ``operator_access``, a group, a
transfer, another caller's events or their task list."""
SHIPPED: tuple[AuditDecision, ...] = ("allowed", "approved")
MAX_WHAT_CHARS = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    caller TEXT NOT NULL,
    task_id TEXT,
    label TEXT NOT NULL,
    task_kind TEXT NOT NULL,
    what TEXT NOT NULL,
    site TEXT,
    partition TEXT,
    shape TEXT,
    nodes INTEGER,
    cpus INTEGER,
    gpus INTEGER,
    walltime_s INTEGER,
    node_hours REAL,
    core_hours REAL,
    decision TEXT NOT NULL,
    rules TEXT NOT NULL,
    message TEXT NOT NULL,
    actor TEXT
);
CREATE INDEX IF NOT EXISTS audit_caller_at ON audit(caller, at);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"""

_COLUMNS = (
    "at",
    "caller",
    "task_id",
    "label",
    "task_kind",
    "what",
    "site",
    "partition",
    "shape",
    "nodes",
    "cpus",
    "gpus",
    "walltime_s",
    "node_hours",
    "core_hours",
    "charge",
    "charge_unit",
    "decision",
    "rules",
    "message",
    "actor",
)


class AuditRecord(Frozen):
    """One decision: who (caller), what (command or function), where (site, shape), verdict."""

    seq: int | None = None
    at: datetime
    caller: str
    task_id: str | None = None
    label: str = ""
    task_kind: RecordKind
    what: str = Field(max_length=MAX_WHAT_CHARS + 20)
    """The command (truncated) or the function's name."""
    site: str | None = None
    partition: str | None = None
    shape: str | None = None
    nodes: int | None = None
    cpus: int | None = None
    """CPUs per node."""
    gpus: int | None = None
    """GPUs in total (all nodes)."""
    walltime_s: int | None = None
    node_hours: float | None = None
    core_hours: float | None = None
    """CPUs x nodes x walltime (kept for the records before charges were per site)."""
    charge: float | None = None
    """What the site bills for the shape's walltime, in ``charge_unit``: its own unit
    (core-hours, gpu-hours, node-hours), minimum charge and SU rate included."""
    charge_unit: str | None = None
    decision: AuditDecision
    rules: tuple[str, ...] = ()
    """The policy rules that decided (empty when nothing objected)."""
    message: str = ""
    actor: str | None = None
    """Who approved or rejected (operator decisions only)."""


_CHARGES = """
ALTER TABLE audit ADD COLUMN charge REAL;
ALTER TABLE audit ADD COLUMN charge_unit TEXT;
"""

MIGRATIONS: tuple[Migration, ...] = (_SCHEMA, _CHARGES)
"""The audit log's schema, version by version (``PRAGMA user_version``)."""


def default_audit_db(home: Path | None = None) -> Path:

    return (home or federation_home()) / "audit.db"


class AuditLog:
    """Append and read audit records (one SQLite file, or in memory; thread-safe)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path not in (None, ":memory:") else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = connect(self.path)
        migrate(self._db, MIGRATIONS, name=f"the audit log {self.path or 'in memory'}")
        if self.path is not None:
            self.path.chmod(0o600)
        self._lock = threading.Lock()

    def append(self, rec: AuditRecord) -> AuditRecord:
        """Write ``rec`` (its ``seq`` is assigned here) and return it with the seq."""
        row = rec.model_dump(exclude={"seq"})
        row["at"] = rec.at.isoformat()
        row["rules"] = ",".join(rec.rules)
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            cur = self._db.execute(
                f"INSERT INTO audit ({', '.join(_COLUMNS)}) VALUES ({marks})",
                tuple(row[c] for c in _COLUMNS),
            )
            seq = cur.lastrowid
        return rec.model_copy(update={"seq": seq})

    def records(
        self,
        *,
        caller: str | None = None,
        task_id: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        """Records in the order written (the newest ``limit`` of them, when given)."""
        where, args = [], []
        if caller is not None:
            where.append("caller = ?")
            args.append(caller)
        if task_id is not None:
            where.append("task_id = ?")
            args.append(task_id)
        if since is not None:
            where.append("at >= ?")
            args.append(since.astimezone(UTC).isoformat())
        sql = "SELECT seq, " + ", ".join(_COLUMNS) + " FROM audit"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        out = []
        for r in reversed(rows):
            data = dict(zip(("seq", *_COLUMNS), r, strict=True))
            data["at"] = datetime.fromisoformat(data["at"])
            data["rules"] = tuple(x for x in data["rules"].split(",") if x)
            out.append(AuditRecord.model_validate(data))
        return out

    def access(
        self, actor: str, owner: str, kind: RecordKind, record_id: str | None, action: str
    ) -> AuditRecord:
        """Record that operator ``actor`` did ``action`` (read, wait, cancel, events) on
        ``owner``'s record ``record_id``."""
        what = f"{action} {kind} {record_id}" if record_id else f"{action} {kind}"
        return self.append(
            AuditRecord(
                at=datetime.now(UTC),
                caller=owner,
                task_id=record_id,
                task_kind=kind,
                what=what[:MAX_WHAT_CHARS],
                decision="operator_access",
                message=f"operator {actor}: {action} of {owner}'s {kind}",
                actor=actor,
            )
        )

    def node_hours_since(self, caller: str, since: datetime) -> float:
        """Node-hours of ``caller``'s tasks shipped (allowed or approved) since ``since``."""
        marks = ", ".join("?" for _ in SHIPPED)
        with self._lock:
            (total,) = self._db.execute(
                "SELECT COALESCE(SUM(node_hours), 0) FROM audit "
                f"WHERE caller = ? AND at >= ? AND decision IN ({marks})",
                (caller, since.astimezone(UTC).isoformat(), *SHIPPED),
            ).fetchone()
        return float(total)

    def node_hours_last_day(self, caller: str, now: datetime | None = None) -> float:
        """Node-hours shipped for ``caller`` in the 24 hours before ``now``."""
        return self.node_hours_since(caller, (now or datetime.now(UTC)) - timedelta(days=1))

    def close(self) -> None:
        with self._lock:
            self._db.close()
