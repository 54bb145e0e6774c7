"""Functions that remote callers may run *by name*, with JSON-schema'd arguments.

A caller of the HTTP service or the MCP server never sends code: it names an entry of this
catalog and passes plain JSON arguments, which are checked against the entry's pydantic
model before anything is submitted. The function itself is importable from
:mod:`functions` (so the endpoint's workers can import it too) and is shipped by the
coordinator exactly as an in-process caller's function would be.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from federation.core.errors import FederationError
from federation.core.model import Frozen
from federation.core.tasks import PythonTask
from functions import workloads


class CatalogError(FederationError, ValueError):
    """A catalog name that does not exist, or arguments that do not fit its schema."""

    def __init__(self, message: str, errors: Sequence[Mapping[str, Any]] = ()) -> None:
        self.errors = [dict(e) for e in errors]
        super().__init__(message)


class UnknownFunctionError(CatalogError, KeyError):
    """A function name that is not in the catalog; the message lists the catalog."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        super().__init__(
            f"unknown function {name!r}; the catalog has: {', '.join(self.known) or '(none)'}. "
            "Only catalog functions can be run by name (list them with GET /v1/functions or "
            "the list_functions tool); send a shell `command` otherwise."
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class FunctionInfo(Frozen):
    """What a caller needs to call a catalog function: its name, purpose and arguments."""

    name: str
    description: str
    parameters: tuple[str, ...] = Field(description="parameter names, in positional order")
    args_schema: dict[str, Any] = Field(description="JSON schema of the keyword arguments")
    returns: str = Field(description="what the function returns")


@dataclass(frozen=True)
class CatalogEntry:
    """One runnable function: the callable, its argument model and a description."""

    name: str
    fn: Callable[..., Any]
    args_model: type[BaseModel]
    description: str
    returns: str

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.fn).parameters)

    def info(self) -> FunctionInfo:
        return FunctionInfo(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            args_schema=self.args_model.model_json_schema(),
            returns=self.returns,
        )

    def bind(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> PythonTask:
        """Check ``args``/``kwargs`` (plain JSON) against the schema; a task ready to submit.

        Raises :class:`CatalogError` naming each argument that is wrong.
        """
        kwargs = dict(kwargs or {})
        params = self.parameters
        if len(args) > len(params):
            raise CatalogError(
                f"{self.name}() takes at most {len(params)} positional argument(s) "
                f"({', '.join(params) or 'none'}), got {len(args)}"
            )
        data: dict[str, Any] = {}
        for pname, value in zip(params, args, strict=False):
            data[pname] = value
        twice = sorted(set(data) & set(kwargs))
        if twice:
            raise CatalogError(
                f"{self.name}() got argument(s) {twice} both positionally and by keyword"
            )
        data.update(kwargs)
        try:
            checked = self.args_model.model_validate(data)
        except ValidationError as e:
            errors = [
                {"loc": ".".join(str(p) for p in err["loc"]) or "(arguments)", "msg": err["msg"]}
                for err in e.errors(include_url=False, include_input=False)
            ]
            detail = "; ".join(f"{x['loc']}: {x['msg']}" for x in errors)
            raise CatalogError(
                f"bad arguments for {self.name}(): {detail}. Expected: {_signature_line(self)}",
                errors,
            ) from e
        return PythonTask(self.fn, (), checked.model_dump(mode="json"), name=self.name)


def _signature_line(entry: CatalogEntry) -> str:
    schema = entry.args_model.model_json_schema()
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    parts = []
    for pname in entry.parameters:
        typ = props.get(pname, {}).get("type", "any")
        parts.append(f"{pname}: {typ}" + ("" if pname in required else " (optional)"))
    return f"{entry.name}({', '.join(parts)})"


class Catalog:
    """Name -> :class:`CatalogEntry`; the only functions the service runs."""

    def __init__(self, entries: Sequence[CatalogEntry] = ()) -> None:
        self._entries: dict[str, CatalogEntry] = {}
        for e in entries:
            self.register(e)

    def register(self, entry: CatalogEntry) -> None:
        """Add ``entry``; its argument model must name exactly the function's parameters."""
        params = set(entry.parameters)
        fields = set(entry.args_model.model_fields)
        if params != fields:
            raise ValueError(
                f"catalog entry {entry.name!r}: argument model fields {sorted(fields)} do not "
                f"match the function's parameters {sorted(params)}"
            )
        if entry.name in self._entries:
            raise ValueError(f"catalog entry {entry.name!r} registered twice")
        self._entries[entry.name] = entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> CatalogEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownFunctionError(name, self.names()) from None

    def bind(
        self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> PythonTask:
        """The task for ``name(*args, **kwargs)``, arguments checked (see ``CatalogEntry.bind``)."""
        return self.get(name).bind(args, kwargs)

    def describe(self) -> list[FunctionInfo]:
        return [self._entries[n].info() for n in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self._entries[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._entries)


# --- the default catalog --------------------------------------------------------------------


class ReportAllocationArgs(Frozen):
    work_s: float = Field(
        default=0.5, ge=0, le=3600, description="seconds of busy work before reporting"
    )


class SquareArgs(Frozen):
    x: int = Field(ge=-(10**9), le=10**9, description="the number to square")


class FailWithArgs(Frozen):
    message: str = Field(max_length=10_000, description="the RuntimeError message to raise")


def default_catalog() -> Catalog:
    """The functions in :mod:`functions.workloads` that are safe to run by name."""
    return Catalog(
        [
            CatalogEntry(
                name="report_allocation",
                fn=workloads.report_allocation,
                args_model=ReportAllocationArgs,
                description=(
                    "Busy-work for work_s seconds inside the Slurm allocation, then report what "
                    "the job sees: cluster, partition, node, CPUs, memory, GPUs, Slurm job id."
                ),
                returns="object with host, slurm_job_id, cluster, partition, node, cpus, "
                "mem_gb, gpus, gpu_ids, work_iterations",
            ),
            CatalogEntry(
                name="square",
                fn=workloads.square,
                args_model=SquareArgs,
                description="Return x * x: the smallest round trip through a site.",
                returns="integer",
            ),
            CatalogEntry(
                name="fail_with",
                fn=workloads.fail_with,
                args_model=FailWithArgs,
                description=(
                    "Raise RuntimeError(message) inside the job: shows how a remote failure "
                    "and its traceback come back."
                ),
                returns="never returns; the task fails with the remote traceback",
            ),
        ]
    )
