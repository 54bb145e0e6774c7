"""A task as the store keeps it: the spec itself, so a restarted coordinator can ship again
what never reached its site and retry what failed before the crash.

Shell tasks are kept as their fields (JSON); a Python task's function, arguments and
keyword arguments as the Globus Compute SDK serializes them for shipping (the same bytes a
site would receive), so whatever could be shipped can be kept.
"""

from __future__ import annotations

import json
from typing import Any

from globus_compute_sdk.serialize import ComputeSerializer

from federation.core.tasks import PythonTask, ShellTask, TaskSpec


def dump_spec(task: TaskSpec) -> str:
    if isinstance(task, ShellTask):
        return json.dumps({"kind": "shell", **task.model_dump()})
    serde = ComputeSerializer()
    return json.dumps(
        {
            "kind": "python",
            "name": task.name,
            "fn": serde.serialize(task.fn),
            "args": serde.serialize(tuple(task.args)),
            "kwargs": serde.serialize(dict(task.kwargs)),
        }
    )


def load_spec(text: str | None) -> TaskSpec | None:
    """The task back from :func:`dump_spec`; None for a record written before specs were
    kept (or one that no longer deserializes here: the reason is logged by the caller)."""
    if not text:
        return None
    data: dict[str, Any] = json.loads(text)
    kind = data.pop("kind")
    if kind == "shell":
        return ShellTask(**data)
    serde = ComputeSerializer()
    return PythonTask(
        serde.deserialize(data["fn"]),
        tuple(serde.deserialize(data["args"])),
        dict(serde.deserialize(data["kwargs"])),
        name=data.get("name", ""),
    )
