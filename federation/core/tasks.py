"""What a task is: a Python callable (in-process users) or a shell command (anyone)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from federation.core.errors import SerializationError
from federation.core.model import Frozen


@dataclass(frozen=True)
class PythonTask:
    """A Python function and its arguments, shipped by value (dill, source or code)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or getattr(self.fn, "__name__", "function")


class ShellTask(Frozen):
    """A shell command run in the job (through the SDK's ``ShellFunction``)."""

    command: str = Field(min_length=1, max_length=100_000, pattern=r"\S")
    """Not blank (``pattern``: at least one character that is not white space)."""
    name: str = ""
    snippet_lines: int = Field(default=1000, ge=1)

    @property
    def label(self) -> str:
        return self.name or self.command.split()[0]


TaskSpec = PythonTask | ShellTask


def check_serializable(task: TaskSpec) -> str:
    """Serialize the task as the SDK will; return its content hash.

    Raises :class:`SerializationError` naming the part that cannot be shipped.
    """
    from globus_compute_sdk.serialize import ComputeSerializer

    serde = ComputeSerializer()
    if isinstance(task, ShellTask):
        return hashlib.sha256(task.command.encode()).hexdigest()
    try:
        code = serde.serialize(task.fn)
    except Exception as e:
        raise SerializationError(
            f"function {task.label!r} cannot be serialized ({type(e).__name__}: {e}); "
            "define it at module level or in a notebook cell, without open files, locks "
            "or sockets in its closure"
        ) from e
    for i, arg in enumerate(task.args):
        _check_value(serde, arg, f"positional argument {i}")
    for k, v in task.kwargs.items():
        _check_value(serde, v, f"keyword argument {k!r}")
    return hashlib.sha256(code.encode()).hexdigest()


def _check_value(serde: Any, value: Any, what: str) -> None:
    try:
        serde.serialize(value)
    except Exception as e:
        raise SerializationError(
            f"{what} ({type(value).__name__}) cannot be serialized ({type(e).__name__}: {e}); "
            "pass plain data (numbers, strings, lists, dicts, arrays) or a path to it"
        ) from e
