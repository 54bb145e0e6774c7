"""Task persistence: how a task handle and its hedged copies are written to, and read back
from, the store's rows (``tasks``, ``task_copies``)."""

from __future__ import annotations

import json
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from federation.core.envelope import ResourceEnvelope
from federation.core.json_values import json_value
from federation.core.tasks import TaskSpec
from federation.core.workspace import OutputFile
from federation.placement.candidates import Candidate, PlacementDecision
from federation.runtime.events import DEFAULT_OWNER, EventBus
from federation.runtime.handles import TaskCopy, TaskHandle
from federation.runtime.milestones import Milestones
from federation.runtime.provenance import Accounting
from federation.runtime.results import ResultRef
from federation.runtime.specs import dump_spec, load_spec

if TYPE_CHECKING:
    from federation.runtime.store import Store

TERMINAL = ("completed", "failed")


def task_row(h: TaskHandle, task: TaskSpec) -> dict[str, Any]:
    return {
        "id": h.id,
        "label": h.label,
        "kind": "shell" if h.is_shell else "python",
        "envelope": h.envelope.model_dump_json(),
        "decision": h.decision.model_dump_json(),
        "code_hash": h.code_hash,
        "site": h.site,
        "endpoint_id": None,
        "compute_task_id": None,
        "state": "queued",
        "submitted_at": h.submitted_at.isoformat(),
        "milestones": h.wants.model_dump_json() if h.wants else None,
        "owner": h.caller,
        "workflow": h.workflow,
        "spec": dump_spec(task),
    }


def end_fields(h: TaskHandle) -> dict[str, Any]:
    """The columns a task's end (completed or failed) updates."""
    assert h.completed_at is not None
    return {
        "state": h.state,
        "completed_at": h.completed_at.isoformat(),
        "error": h.error,
        "remote_traceback": h.remote_traceback,
        "value_json": value_json(h),
        "value_ref": h.value_ref.model_dump_json() if h.value_ref else None,
        "outputs": json.dumps(
            {"files": [o.model_dump() for o in h.outputs], "more": h.outputs_more}
        )
        if h.outputs or h.outputs_more
        else None,
        "attempts": json.dumps(h.attempts, default=str),
        "notes": json.dumps(h.notes) if h.notes else None,
    }


def copy_row(c: TaskCopy) -> dict[str, Any]:
    return {
        "idx": c.index,
        "site": c.site,
        "partition": c.partition,
        "candidate": c.candidate.model_dump_json(),
        "compute_task_id": c.compute_task_id,
        "state": c.state,
        "submitted_at": c.submitted_at.isoformat(),
        "ended_at": None,
        "error": None,
    }


def copy_fields(c: TaskCopy) -> dict[str, Any]:
    """The columns a copy's change of state updates."""
    return {
        "state": c.state,
        "compute_task_id": c.compute_task_id,
        "ended_at": c.ended_at.isoformat() if c.ended_at else None,
        "error": c.error,
    }


def copy_from_row(row: dict[str, Any]) -> TaskCopy:
    return TaskCopy(
        index=row["idx"],
        candidate=Candidate.model_validate_json(row["candidate"]),
        state=row["state"],
        submitted_at=datetime.fromisoformat(row["submitted_at"]),
        ended_at=datetime.fromisoformat(row["ended_at"]) if row["ended_at"] else None,
        error=row["error"],
        _recovered_compute_id=row["compute_task_id"],
    )


def value_json(h: TaskHandle) -> str | None:
    v = h.value
    if v is None:
        return None
    if h.is_shell:
        v = {
            "stdout": getattr(v, "stdout", ""),
            "stderr": getattr(v, "stderr", ""),
            "returncode": getattr(v, "returncode", None),
        }
    value, is_json, text = json_value(v)
    return json.dumps({"value": value} if is_json else {"repr": text})


def finished_handle(store: Store, task_id: str, bus: EventBus) -> TaskHandle | None:
    """A finished task read back from the store (with its copies); None when the store
    has no such task or it is still open (an open task's handle lives in memory)."""
    row = store.task(task_id)
    if row is None or row["state"] not in TERMINAL:
        return None
    h = handle_from_row(row, bus, own=False)
    h.copies = [copy_from_row(r) for r in store.task_copies(task_id)]
    return h


def handle_from_row(row: dict[str, Any], bus: EventBus, *, own: bool = True) -> TaskHandle:
    h = TaskHandle(
        id=row["id"],
        label=row["label"],
        envelope=ResourceEnvelope.model_validate_json(row["envelope"]),
        decision=PlacementDecision.model_validate_json(row["decision"]),
        code_hash=row["code_hash"],
        is_shell=row["kind"] == "shell",
        bus=bus,
        state=row["state"],
        submitted_at=datetime.fromisoformat(row["submitted_at"]),
        started_at=datetime.fromisoformat(row["started_at"]) if row["started_at"] else None,
        completed_at=(datetime.fromisoformat(row["completed_at"]) if row["completed_at"] else None),
        slurm_job_id=row["slurm_job_id"],
        error=row["error"],
        remote_traceback=row["remote_traceback"] or "",
        caller=row.get("owner") or DEFAULT_OWNER,
        workflow=row.get("workflow"),
    )
    if own:  # a handle the coordinator takes back into memory (a restart)
        bus.set_owner(h.id, h.caller)
    if row.get("spec") and row["state"] not in ("completed", "failed"):
        h.task = load_spec(row["spec"])  # to ship again or retry after a restart
    if row.get("milestones"):
        h.wants = Milestones.model_validate_json(row["milestones"])
    if row.get("value_ref"):
        h.value_ref = ResultRef.model_validate_json(row["value_ref"])
    if row.get("outputs"):
        listed = json.loads(row["outputs"])
        h.outputs = tuple(OutputFile.model_validate(o) for o in listed.get("files", ()))
        h.outputs_more = int(listed.get("more") or 0)
    if row.get("attempts"):
        h.attempts = list(json.loads(row["attempts"]))
    if row.get("notes"):
        h.notes = list(json.loads(row["notes"]))
    if row.get("accounting"):
        h.accounting = Accounting.model_validate_json(row["accounting"])
    if row["value_json"]:
        stored = json.loads(row["value_json"])
        value = stored.get("value", stored.get("repr"))
        if h.is_shell and isinstance(value, dict):
            value = SimpleNamespace(**value)
        h.value = value
    return h
