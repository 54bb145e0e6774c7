"""The stand-in web service's memory of task groups, and the results it makes up itself.

:class:`TaskMemory` is the service's record of which task belongs to which endpoint and
task group, in SQLite, so a strict service (the cloud path) re-attaches a restarted client
to its task group as the real service does. The ``*_result`` functions build the failed
results the service itself reports (endpoint lost, cancelled before delivery, result over
the service's limit).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from globus_compute_common.messagepack.message_types import Result

from federation.sites.cloud import PAYLOAD_LIMIT_BYTES


class TaskMemory:
    """The service's memory of task groups: (task, endpoint, group) rows in SQLite."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, endpoint_id TEXT "
            "NOT NULL, task_group_id TEXT NOT NULL, submitted_at REAL NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS by_group ON tasks(task_group_id)")
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(tasks)")}
        if "message" not in cols:  # the task as queued for its endpoint, until it took it
            self._db.execute("ALTER TABLE tasks ADD COLUMN message TEXT")
        self._lock = threading.Lock()

    def remember(
        self,
        task_id: str,
        endpoint_id: str,
        task_group_id: str,
        message: dict[str, Any] | None = None,
    ) -> None:
        """Record a task; with ``message`` (what is forwarded to its endpoint), kept until
        :meth:`delivered`, so a restarted service still delivers it (the real service's
        queue for an endpoint is durable)."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?)",
                (
                    task_id,
                    endpoint_id,
                    task_group_id,
                    time.time(),
                    json.dumps(message) if message is not None else None,
                ),
            )

    def delivered(self, task_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE tasks SET message=NULL WHERE task_id=?", (task_id,))

    def undelivered(self, task_id: str) -> dict[str, Any] | None:
        """The message of a task its endpoint has not taken yet (None once it has)."""
        with self._lock:
            row = self._db.execute("SELECT message FROM tasks WHERE task_id=?", (task_id,))
            found = row.fetchone()
        return json.loads(found[0]) if found and found[0] else None

    def forget(self, task_ids: list[str]) -> None:
        """Forget tasks whose results the service released (past the abandonment window):
        a restarted service does not re-learn them, as the real service has them no more."""
        with self._lock, self._db:
            self._db.executemany("DELETE FROM tasks WHERE task_id=?", [(t,) for t in task_ids])

    def group(self, task_group_id: str) -> list[tuple[str, str]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT task_id, endpoint_id FROM tasks WHERE task_group_id=? "
                "ORDER BY submitted_at",
                (task_group_id,),
            ).fetchall()
        return [(str(t), str(e)) for t, e in rows]


def lost_result(task_id: str, message: str) -> Result:
    return Result(
        task_id=uuid.UUID(task_id),
        data=message,
        error_details={"code": "ENDPOINT_LOST", "user_message": message},
    )


def cancelled_result(task_id: str) -> Result:
    return Result(
        task_id=uuid.UUID(task_id),
        data="task cancelled",
        error_details={"code": "CANCELLED", "user_message": "task cancelled"},
    )


def too_large_result(task_id: str, size: int) -> Result:
    """A result over the service's limit, refused as the SDK words it
    (``MaxResultSizeExceeded``): the worker's own check stops at 10 MiB, the service's
    documented limit is 10 MB."""
    message = (
        f"MaxResultSizeExceeded: Task result of {size}B exceeded current limit of "
        f"{PAYLOAD_LIMIT_BYTES}B"
    )
    return Result(
        task_id=uuid.UUID(task_id),
        data=message,
        error_details={"code": "MaxResultSizeExceeded", "user_message": message},
    )
