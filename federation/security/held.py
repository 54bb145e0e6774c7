"""Tasks held for an operator's decision (the ``unresolved`` policy outcome).

A held task is placed but not shipped. Its row keeps everything needed to ship it later,
in a table of the coordinator's own SQLite file when it has a store (so a held task
survives a restart), else in memory: the task (a shell command as JSON, a Python task
serialized as Globus Compute serializes it), the envelope, the decision and the policy
outcome that held it.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from federation.core.envelope import ResourceEnvelope
from federation.core.model import Frozen
from federation.core.sqlite import SchemaError, columns, connect
from federation.core.tasks import PythonTask, ShellTask, TaskSpec
from federation.placement.candidates import PlacementDecision
from federation.security.policy import PolicyOutcome

HeldState = Literal["held", "approved", "rejected"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS policy_held (
    task_id TEXT PRIMARY KEY,
    caller TEXT NOT NULL,
    label TEXT NOT NULL,
    task_blob TEXT NOT NULL,
    envelope TEXT NOT NULL,
    decision TEXT NOT NULL,
    code_hash TEXT NOT NULL,
    outcome TEXT NOT NULL,
    held_at TEXT NOT NULL,
    state TEXT NOT NULL,
    resolved_at TEXT,
    resolved_by TEXT,
    reason TEXT
);
"""
HELD_SCHEMA = _SCHEMA
"""The held-task table: a migration of the coordinator's state store, whose file it shares
(:data:`federation.runtime.store.MIGRATIONS`); created here only for an in-memory table."""


class HeldTask(Frozen):
    """A task waiting for an operator (or decided by one)."""

    task_id: str
    caller: str
    label: str
    envelope: ResourceEnvelope
    decision: PlacementDecision
    code_hash: str
    outcome: PolicyOutcome
    held_at: datetime
    state: HeldState = "held"
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    reason: str | None = None

    @property
    def why(self) -> str:
        return self.outcome.summary()


def encode_task(task: TaskSpec) -> str:
    """The task as text that :func:`decode_task` turns back into it."""
    if isinstance(task, ShellTask):
        return json.dumps({"shell": task.model_dump()})
    from globus_compute_sdk.serialize import ComputeSerializer

    serde = ComputeSerializer()
    return json.dumps(
        {
            "python": {
                "fn": serde.serialize(task.fn),
                "args": serde.serialize(task.args),
                "kwargs": serde.serialize(task.kwargs),
                "name": task.name,
            }
        }
    )


def decode_task(blob: str) -> TaskSpec:
    data = json.loads(blob)
    if "shell" in data:
        return ShellTask.model_validate(data["shell"])
    from globus_compute_sdk.serialize import ComputeSerializer

    serde = ComputeSerializer()
    p = data["python"]
    return PythonTask(
        fn=serde.deserialize(p["fn"]),
        args=tuple(serde.deserialize(p["args"])),
        kwargs=dict(serde.deserialize(p["kwargs"])),
        name=p["name"],
    )


class HeldTasks:
    """The held-task table (in ``path``, a SQLite file shared with the store, or memory)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self._db = connect(path, wal=False)
        if path is None:
            self._db.executescript(_SCHEMA)
        elif "task_id" not in columns(self._db, "policy_held"):
            raise SchemaError(
                f"{path} has no held-task table: it is not a coordinator state store "
                "(open it with federation.runtime.store.Store first)"
            )
        self._lock = threading.Lock()

    def hold(
        self,
        *,
        task_id: str,
        caller: str,
        label: str,
        task: TaskSpec,
        envelope: ResourceEnvelope,
        decision: PlacementDecision,
        code_hash: str,
        outcome: PolicyOutcome,
    ) -> HeldTask:
        now = datetime.now(UTC)
        with self._lock:
            self._db.execute(
                "INSERT INTO policy_held (task_id, caller, label, task_blob, envelope, decision,"
                " code_hash, outcome, held_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'held')",
                (
                    task_id,
                    caller,
                    label,
                    encode_task(task),
                    envelope.model_dump_json(),
                    decision.model_dump_json(),
                    code_hash,
                    outcome.model_dump_json(),
                    now.isoformat(),
                ),
            )
        held = self.get(task_id)
        assert held is not None
        return held

    def resolve(self, task_id: str, state: HeldState, actor: str, reason: str | None) -> bool:
        """Mark a held task approved or rejected; False if it is not (or no longer) held."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE policy_held SET state = ?, resolved_at = ?, resolved_by = ?, reason = ? "
                "WHERE task_id = ? AND state = 'held'",
                (state, datetime.now(UTC).isoformat(), actor, reason, task_id),
            )
            return cur.rowcount > 0

    def get(self, task_id: str) -> HeldTask | None:
        rows = self._select("WHERE task_id = ?", (task_id,))
        return rows[0] if rows else None

    def task(self, task_id: str) -> TaskSpec | None:
        with self._lock:
            row = self._db.execute(
                "SELECT task_blob FROM policy_held WHERE task_id = ?", (task_id,)
            ).fetchone()
        return decode_task(row[0]) if row else None

    def pending(self) -> list[HeldTask]:
        return self._select("WHERE state = 'held'", ())

    def all(self) -> list[HeldTask]:
        return self._select("", ())

    def _select(self, where: str, args: tuple[Any, ...]) -> list[HeldTask]:
        cols = (
            "task_id, caller, label, envelope, decision, code_hash, outcome, held_at, state, "
            "resolved_at, resolved_by, reason"
        )
        with self._lock:
            rows = self._db.execute(
                f"SELECT {cols} FROM policy_held {where} ORDER BY held_at", args
            ).fetchall()
        return [
            HeldTask(
                task_id=r[0],
                caller=r[1],
                label=r[2],
                envelope=ResourceEnvelope.model_validate_json(r[3]),
                decision=PlacementDecision.model_validate_json(r[4]),
                code_hash=r[5],
                outcome=PolicyOutcome.model_validate_json(r[6]),
                held_at=datetime.fromisoformat(r[7]),
                state=r[8],
                resolved_at=datetime.fromisoformat(r[9]) if r[9] else None,
                resolved_by=r[10],
                reason=r[11],
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()
