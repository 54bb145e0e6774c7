"""draft_envelope: from a task description to a typed, validated resource envelope.

A :class:`Drafter` proposes an envelope (deterministic rules here; an agent or a model can
plug in its own); whatever is proposed is validated the same way against the federation's
site facts: which sites and partitions can satisfy it, which bound cannot be met, and the
nearest envelope that can.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import Field

from federation.core.envelope import ResourceEnvelope
from federation.core.model import Frozen
from federation.core.spec import SiteSpec
from federation.placement.candidates import shape_in, validate_envelope

WorkloadClass = Literal["cpu-prep", "inference", "ddp-training", "mpi", "generic"]


class TaskHints(Frozen):
    """What the caller knows about the task beyond its free-text description."""

    workload_class: WorkloadClass | None = None
    input_size_gb: float | None = Field(default=None, ge=0, le=1_000_000)
    framework: str | None = Field(default=None, max_length=64)
    known_runtime_s: float | None = Field(default=None, gt=0)
    """A previous run's duration at the envelope's minimum shape, if known."""
    model_size_gb: float | None = Field(default=None, gt=0, le=10_000)
    gpus: int | None = Field(default=None, ge=0, le=64)
    nodes: int | None = Field(default=None, ge=1, le=10_000)
    gpu_types: tuple[str, ...] = ()
    arch: tuple[Literal["x86_64", "aarch64"], ...] = ()


class EnvelopeValidation(Frozen):
    """The envelope measured against the federation."""

    feasible: tuple[str, ...]
    """``site/partition`` pairs that can host the envelope's minimum shape."""
    rejected: dict[str, str]
    unsatisfiable_bound: str | None = None
    """When nothing is feasible: the bound that no site meets."""
    nearest: ResourceEnvelope | None = None
    """When nothing is feasible: the closest envelope that some site can host."""


class EnvelopeDraft(Frozen):
    """A proposed envelope with its rationale, confidence and validation."""

    envelope: ResourceEnvelope
    workload_class: WorkloadClass
    rationale: dict[str, str]
    confidence: float = Field(ge=0, le=1)
    validation: EnvelopeValidation


class Drafter(Protocol):
    """Anything that proposes an envelope (rules, an agent, a model)."""

    def propose(
        self, description: str, hints: TaskHints
    ) -> tuple[ResourceEnvelope, WorkloadClass]: ...


_KEYWORDS: tuple[tuple[WorkloadClass, re.Pattern[str]], ...] = (
    (
        "ddp-training",
        re.compile(r"\b(ddp|distributed|multi-?gpu|train(ing)?|fine-?tun\w*|pretrain\w*)\b", re.I),
    ),
    ("mpi", re.compile(r"\b(mpi|ranks?|mpirun|srun|multi-?node|halo|stencil)\b", re.I)),
    ("inference", re.compile(r"\b(infer\w*|predict\w*|embed\w*|generate|serving|score)\b", re.I)),
    (
        "cpu-prep",
        re.compile(
            r"\b(prep\w*|tokeni[sz]\w*|convert|clean\w*|csv|parquet|shard\w*|etl|index\w*)\b", re.I
        ),
    ),
)


def classify(description: str, hints: TaskHints) -> tuple[WorkloadClass, float, str]:
    """The workload class, how sure we are, and why."""
    if hints.workload_class:
        return hints.workload_class, 0.9, "given as a hint"
    for cls, pattern in _KEYWORDS:
        if m := pattern.search(description):
            return cls, 0.6, f"description mentions {m.group(0)!r}"
    return "generic", 0.3, "no recognizable workload keywords; generic bounds"


class RuleDrafter:
    """Deterministic bounds for common workload classes."""

    def propose(self, description: str, hints: TaskHints) -> tuple[ResourceEnvelope, WorkloadClass]:
        cls, confidence, why = classify(description, hints)
        data = hints.input_size_gb or 0.0
        model = hints.model_size_gb
        r: dict[str, str] = {"workload_class": why}
        b: dict[str, object] = {}
        if cls == "cpu-prep":
            b.update(
                cpus_min=4,
                cpus_max=32,
                gpus_min=0,
                gpus_max=0,
                mem_gb_min=max(8.0, 2 * data),
                mem_gb_max=max(32.0, 4 * data),
            )
            r["cpus"] = "data preparation parallelizes over files; 4-32 cores"
            r["mem_gb"] = "2-4x the input size held in memory, at least 8 GB"
        elif cls == "inference":
            b.update(
                gpus_min=1,
                gpus_max=1,
                cpus_min=8,
                cpus_max=16,
                mem_gb_min=max(32.0, 2 * (model or 0)),
                mem_gb_max=max(64.0, 4 * (model or 0)),
            )
            r["gpus"] = "single-GPU inference"
            r["cpus"] = "8-16 cores feed one GPU's data loader"
            if model:
                b["gpu_mem_gb_min"] = math.ceil(model * 1.2)
                r["gpu_mem_gb"] = f"model of {model} GB plus 20% for activations"
        elif cls == "ddp-training":
            g = hints.gpus or 4
            b.update(
                gpus_min=min(2, g),
                gpus_max=g,
                cpus_min=16,
                cpus_max=64,
                mem_gb_min=64.0,
                mem_gb_max=256.0,
            )
            r["gpus"] = (
                f"data-parallel training scales with GPUs; {min(2, g)}-{g} per node, "
                "the shape is chosen by predicted completion"
            )
            if model:
                b["gpu_mem_gb_min"] = math.ceil(model * 1.5)
                r["gpu_mem_gb"] = f"model of {model} GB with optimizer state per GPU"
        elif cls == "mpi":
            b.update(
                cpus_min=64,
                cpus_max=128,
                gpus_min=0,
                gpus_max=0,
                mem_gb_min=64.0,
                nodes=hints.nodes or 2,
            )
            r["nodes"] = f"{hints.nodes or 2} nodes of MPI ranks"
        else:
            b.update(cpus_min=1, cpus_max=8, mem_gb_min=4.0, mem_gb_max=16.0)
            r["cpus"] = "generic task: small CPU shape"
        if hints.gpus is not None and cls not in ("ddp-training",):
            b["gpus_min"] = b["gpus_max"] = hints.gpus
            r["gpus"] = f"{hints.gpus} GPUs given as a hint"
        if hints.known_runtime_s:
            wall = int(min(48 * 3600, max(600, math.ceil(hints.known_runtime_s * 2 / 60) * 60)))
            r["walltime_s"] = f"2x the known runtime of {hints.known_runtime_s:.0f} s"
        else:
            wall = {
                "cpu-prep": 3600,
                "inference": 1800,
                "ddp-training": 4 * 3600,
                "mpi": 4 * 3600,
                "generic": 3600,
            }[cls]
            r["walltime_s"] = f"default for {cls}; give known_runtime_s to tighten it"
        b["walltime_s"] = wall
        if hints.gpu_types:
            b["gpu_types"] = hints.gpu_types
        if hints.arch:
            b["arch"] = hints.arch
        return ResourceEnvelope(rationale=r, confidence=confidence, **b), cls  # type: ignore[arg-type]


def validate(envelope: ResourceEnvelope, sites: Sequence[SiteSpec]) -> EnvelopeValidation:
    """Which site/partitions can host ``envelope``; if none, the bound to relax and how."""
    validate_envelope(envelope, sites)
    feasible, rejected = _feasibility(envelope, sites)
    if feasible:
        return EnvelopeValidation(feasible=tuple(feasible), rejected=rejected)
    bound, nearest = _nearest(envelope, sites)
    return EnvelopeValidation(
        feasible=(), rejected=rejected, unsatisfiable_bound=bound, nearest=nearest
    )


def _feasibility(
    env: ResourceEnvelope, sites: Sequence[SiteSpec]
) -> tuple[list[str], dict[str, str]]:
    feasible, rejected = [], {}
    for s in sites:
        for p in s.partitions:
            res = shape_in(env, s, p)
            if isinstance(res, str):
                rejected[f"{s.name}/{p.name}"] = res
            else:
                feasible.append(f"{s.name}/{p.name}")
    return feasible, rejected


def _nearest(
    env: ResourceEnvelope, sites: Sequence[SiteSpec]
) -> tuple[str, ResourceEnvelope | None]:
    """Relax one bound at a time, in the order least likely to matter to the user."""
    parts = [(s, p) for s in sites for p in s.partitions]
    gpu_parts = [p for _, p in parts if p.gpus_per_node]
    relaxations: list[tuple[str, dict[str, object]]] = []
    if env.gpu_types:
        relaxations.append(("gpu_types", {"gpu_types": ()}))
    if env.gpu_mem_gb_min:
        relaxations.append(("gpu_mem_gb_min", {"gpu_mem_gb_min": None}))
    if env.gpus_min and gpu_parts:
        most = max(p.gpus_per_node for p in gpu_parts)
        relaxations.append(
            (
                "gpus_min",
                {"gpus_min": min(env.gpus_min, most), "gpus_max": min(env.gpus_max or most, most)},
            )
        )
    relaxations.append(
        (
            "mem_gb_min",
            {"mem_gb_min": float(min(env.mem_gb_min, max(p.mem_gb_per_node for _, p in parts)))},
        )
    )
    relaxations.append(
        ("walltime_s", {"walltime_s": min(env.walltime_s, max(p.max_walltime_s for _, p in parts))})
    )
    relaxations.append(
        ("cpus_min", {"cpus_min": min(env.cpus_min, max(p.cpus_per_node for _, p in parts))})
    )
    relaxations.append(("arch", {"arch": ()}))
    relaxations.append(("sites", {"sites": (), "partitions": ()}))
    for bound, change in relaxations:
        data = env.model_dump() | change
        if data.get("gpus_max") is not None and data["gpus_max"] < data["gpus_min"]:
            data["gpus_max"] = data["gpus_min"]
        if not data.get("gpus_min"):
            data["gpu_types"] = ()
        cand = ResourceEnvelope(**data)
        if _feasibility(cand, sites)[0]:
            return bound, cand
    return "several bounds", None


def draft_envelope(
    description: str,
    sites: Sequence[SiteSpec],
    hints: TaskHints | None = None,
    drafter: Drafter | None = None,
) -> EnvelopeDraft:
    """Propose an envelope for ``description`` and validate it against ``sites``."""
    hints = hints or TaskHints()
    envelope, cls = (drafter or RuleDrafter()).propose(description, hints)
    return EnvelopeDraft(
        envelope=envelope,
        workload_class=cls,
        rationale=envelope.rationale,
        confidence=envelope.confidence,
        validation=validate(envelope, sites),
    )
