"""Resource envelopes (bounds a task can run within) and granted shapes (one point in them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from federation.core.errors import BadEnvelopeError
from federation.core.model import Frozen
from federation.core.workspace import WorkspacePath

Arch = Literal["x86_64", "aarch64"]

MAX_WALLTIME_S = 30 * 24 * 3600  # nothing sensible asks for more than 30 days
_NAME_RE = r"^[A-Za-z0-9_.-]{1,64}$"
_CLASS_RE = r"^(?:[a-z][a-z0-9]*:)?[A-Za-z0-9_.-]{1,64}$"


class StageIn(Frozen):
    """Data a task reads that lives in one site's storage; placing the task on another
    site means moving it first (``move_data``), and placement counts that time."""

    site: str = Field(min_length=1)
    path: WorkspacePath = Field(
        min_length=1,
        description="relative to your workspace on that site (as a result's `outputs` name it)",
    )
    size_bytes: int = Field(ge=0, le=10**18)


class ResourceEnvelope(Frozen):
    """Bounds, not a guess: any shape inside them is acceptable for the task.

    Constructing an envelope with min > max, negative or absurd values raises
    :class:`BadEnvelopeError` (also a ``ValueError``) naming the bound.
    """

    cpus_min: int = Field(default=1, ge=1, le=100_000)
    cpus_max: int | None = Field(default=None, ge=1, le=100_000)
    gpus_min: int = Field(default=0, ge=0, le=1024)
    gpus_max: int | None = Field(default=None, ge=0, le=1024)
    mem_gb_min: float = Field(default=1.0, gt=0, le=100_000)
    mem_gb_max: float | None = Field(default=None, gt=0, le=100_000)
    nodes: int = Field(default=1, ge=1, le=10_000)
    walltime_s: int = Field(default=3600, ge=60, le=MAX_WALLTIME_S)
    gpu_types: tuple[str, ...] = ()
    """Acceptable GPU types (lowercase, e.g. ``a100``); empty means any."""
    gpu_mem_gb_min: float | None = Field(default=None, gt=0)
    arch: tuple[Arch, ...] = ()
    """Acceptable architectures; empty means any."""
    sites: tuple[str, ...] = ()
    """Sites the task may run on; empty means any."""
    partitions: tuple[str, ...] = ()
    """Partitions the task may run on (``site:partition`` or ``partition``; a node class
    whose name or Slurm partition it is); empty means any."""
    node_classes: tuple[Annotated[str, Field(pattern=_CLASS_RE)], ...] = ()
    """Node classes the task may run in (``site:class`` or ``class``); empty means any."""
    qos: tuple[Annotated[str, Field(pattern=_NAME_RE)], ...] = ()
    """QOS the task may run under (a class's ``qos``); empty means any."""
    stage_in: tuple[StageIn, ...] = ()
    """Input data and where it lives; placement adds its transfer time on other sites."""
    account: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    rationale: dict[str, str] = Field(default_factory=dict)
    confidence: float = Field(default=1.0, ge=0, le=1)

    def __init__(self, **data: object) -> None:
        try:
            super().__init__(**data)
        except ValueError as e:
            raise BadEnvelopeError(f"invalid resource envelope: {e}") from e

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ResourceEnvelope:
        for lo, hi in (
            ("cpus_min", "cpus_max"),
            ("gpus_min", "gpus_max"),
            ("mem_gb_min", "mem_gb_max"),
        ):
            lo_v, hi_v = getattr(self, lo), getattr(self, hi)
            if hi_v is not None and lo_v > hi_v:
                raise ValueError(f"{lo}={lo_v} is larger than {hi}={hi_v}; swap or widen them")
        if self.gpu_types and self.gpus_min == 0:
            raise ValueError("gpu_types given but gpus_min=0; set gpus_min >= 1 or drop gpu_types")
        if any(t != t.lower() or not t.isalnum() for t in self.gpu_types):
            raise ValueError(f"gpu_types must be lowercase names like 'a100', got {self.gpu_types}")
        return self


class Shape(Frozen):
    """A concrete allocation: what is asked of one site's Slurm for one task."""

    site: str
    partition: str
    nodes: int = Field(ge=1)
    cpus: int = Field(ge=1, description="CPUs per node (--cpus-per-task, one task per node)")
    mem_gb: int = Field(ge=1, description="memory per node")
    gpus: int = Field(ge=0, description="GPUs per node")
    gpu_type: str | None = None
    walltime_s: int = Field(ge=60)
    account: str | None = None

    def describe(self) -> str:
        gpu = f", {self.gpus}x {self.gpu_type}" if self.gpus else ""
        return (
            f"{self.site}/{self.partition}: {self.nodes} node(s) x {self.cpus} CPU, "
            f"{self.mem_gb} GB{gpu}, {format_walltime(self.walltime_s)}"
        )


def format_walltime(seconds: int) -> str:
    """Seconds -> Slurm ``HH:MM:SS`` (hours may exceed 24)."""
    if seconds < 0:
        raise ValueError(f"walltime must be >= 0 s, got {seconds}")
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


_BOUNDS = (
    ("cpus", "cpus_min", "cpus_max", ""),
    ("gpus", "gpus_min", "gpus_max", ""),
    ("mem_gb", "mem_gb_min", "mem_gb_max", " GB"),
)


def envelope_rows(env: ResourceEnvelope) -> list[tuple[str, str]]:
    """(bound, value) pairs of an envelope, ranges joined (``cpus: 16-64``)."""
    rows = []
    for name, lo, hi, unit in _BOUNDS:
        lo_v, hi_v = getattr(env, lo), getattr(env, hi)
        same = hi_v is None or hi_v == lo_v
        rows.append((name, f"{lo_v:g}{unit}" if same else f"{lo_v:g}-{hi_v:g}{unit}"))
    rows.append(("nodes", str(env.nodes)))
    rows.append(("walltime_s", f"{env.walltime_s} s ({env.walltime_s / 3600:.2g} h)"))
    for name in (
        "gpu_types",
        "gpu_mem_gb_min",
        "arch",
        "sites",
        "partitions",
        "node_classes",
        "qos",
        "account",
    ):
        v = getattr(env, name)
        if v:
            rows.append(
                (
                    name,
                    ", ".join(v)
                    if isinstance(v, tuple)
                    else f"{v:g}"
                    if isinstance(v, float)
                    else str(v),
                )
            )
    return rows
