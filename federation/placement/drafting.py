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
from federation.core.errors import BadEnvelopeError
from federation.core.model import Frozen
from federation.core.spec import SiteSpec
from federation.placement.candidates import shape_in, validate_envelope
from federation.placement.stated import Stated, apply_stated, read_stated

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
    stated: dict[str, str] = Field(default_factory=dict)
    """The bounds the description states, each with the words it was read from."""
    drafted_by: str = "rules"
    """``rules``, or who proposed the envelope (``sampling: MODEL`` over MCP)."""


class Proposal(Frozen):
    """An envelope proposed elsewhere (the MCP client's model), to validate like a draft."""

    envelope: ResourceEnvelope
    workload_class: WorkloadClass = "generic"
    source: str = Field(default="proposal", min_length=1, max_length=200)


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
    (
        "inference",
        re.compile(
            r"\b(infer\w*|predict\w*|embed\w*|serving|llm|score|generat\w*\s+(?:text|tokens?|"
            r"images?|completions?|responses?|captions?|samples?))\b",
            re.I,
        ),
    ),
    (
        "cpu-prep",
        re.compile(
            r"\b(prep\w*|tokeni[sz]\w*|convert|clean\w*|csv|parquet|shard\w*|etl|index\w*)\b", re.I
        ),
    ),
)
_GPU_CLASSES = ("ddp-training", "inference")


def classify(
    description: str, hints: TaskHints, stated: Stated | None = None
) -> tuple[WorkloadClass, float, str]:
    """The workload class, how sure we are, and why. A description that says it needs no
    GPU is never put in a GPU class by its other words."""
    if hints.workload_class:
        return hints.workload_class, 0.9, "given as a hint"
    no_gpu = stated is not None and (stated.cpu_only or (stated.gpus and stated.gpus.hi == 0))
    for cls, pattern in _KEYWORDS:
        if no_gpu and cls in _GPU_CLASSES:
            continue
        if m := pattern.search(description):
            return cls, 0.6, f"description mentions {m.group(0)!r}"
    return "generic", 0.3, "no recognizable workload keywords; generic bounds"


_DEFAULT_WALLTIME: dict[WorkloadClass, int] = {
    "cpu-prep": 3600,
    "inference": 1800,
    "ddp-training": 4 * 3600,
    "mpi": 4 * 3600,
    "generic": 3600,
}


class RuleDrafter:
    """Bounds from what the description states (:mod:`federation.placement.stated`), and
    for what it does not state, deterministic defaults of its workload class."""

    def propose(self, description: str, hints: TaskHints) -> tuple[ResourceEnvelope, WorkloadClass]:
        stated = read_stated(description)
        cls, confidence, why = classify(description, hints, stated)
        data = hints.input_size_gb
        if data is None and stated.data_gb is not None:
            data = stated.data_gb.hi or stated.data_gb.lo
        b, r = _class_defaults(cls, hints, data or 0.0)
        r["workload_class"] = why
        known = apply_stated(b, r, stated)
        if hints.gpus is not None and cls != "ddp-training":
            b["gpus_min"] = b["gpus_max"] = hints.gpus
            r["gpus"] = f"{hints.gpus} GPUs given as a hint"
        if hints.gpus is not None:
            known.add("gpus")
        if hints.known_runtime_s:
            wall = int(min(48 * 3600, max(600, math.ceil(hints.known_runtime_s * 2 / 60) * 60)))
            said = f"; the description says {r['walltime_s']}" if "walltime_s" in known else ""
            r["walltime_s"] = f"2x the known runtime of {hints.known_runtime_s:.0f} s{said}"
            b["walltime_s"] = wall
            known.add("walltime_s")
        elif "walltime_s" not in known:
            b["walltime_s"] = _DEFAULT_WALLTIME[cls]
            r["walltime_s"] = f"default for {cls}; give known_runtime_s to tighten it"
        if hints.input_size_gb or hints.model_size_gb:
            known.add("mem_gb")
        if hints.gpu_types:
            b["gpu_types"] = hints.gpu_types
            b["gpus_min"] = max(1, int(b.get("gpus_min") or 0))  # type: ignore[call-overload]
        if hints.arch:
            b["arch"] = hints.arch
        if b.get("gpus_max") is not None and b["gpus_max"] < b.get("gpus_min", 0):  # type: ignore[operator]
            b["gpus_max"] = b["gpus_min"]
        missing = [x for x in _MAIN_BOUNDS if x not in known]
        if missing:
            r["unstated"] = (
                f"nothing said about {', '.join(missing)}: {cls} defaults, confidence lowered"
            )
        confidence = round(confidence + (0.95 - confidence) * (1 - len(missing) / 4), 2)
        return ResourceEnvelope(rationale=r, confidence=confidence, **b), cls  # type: ignore[arg-type]


_MAIN_BOUNDS = ("cpus", "gpus", "mem_gb", "walltime_s")
"""The bounds every task has: how many of them the text states sets the confidence."""


def _class_defaults(
    cls: WorkloadClass, hints: TaskHints, data: float
) -> tuple[dict[str, object], dict[str, str]]:
    model = hints.model_size_gb
    r: dict[str, str] = {}
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
    if hints.nodes and cls != "mpi":
        b["nodes"] = hints.nodes
        r["nodes"] = f"{hints.nodes} nodes given as a hint"
    return b, r


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
    proposal: Proposal | None = None,
) -> EnvelopeDraft:
    """Propose an envelope for ``description`` and validate it against ``sites``.

    A ``proposal`` (a model's, over MCP sampling) is validated the same way and returned
    when it is valid for these sites, with the places it disagrees with the quantities the
    description states; one that names what no site has (a GPU type, a site) is set aside
    for the rules' draft, whose rationale says why. A rules draft that asks for what no site
    has (a GPU type nobody offers, more GPUs than a node holds) is kept as the description
    said it and flagged by its validation, with the nearest feasible envelope."""
    hints = hints or TaskHints()
    stated = read_stated(description).bounds()
    if proposal is not None:
        try:
            validation = validate(proposal.envelope, sites)
        except BadEnvelopeError as e:
            d = draft_envelope(description, sites, hints, drafter)
            why = f"rules: {proposal.source}'s envelope was set aside ({e})"
            return d.model_copy(update={"rationale": d.rationale | {"drafted_by": why}})
        env = proposal.envelope
        rationale = dict(env.rationale)
        rules_env, _ = RuleDrafter().propose(description, hints)
        if differ := _disagreements(env, rules_env, stated):
            rationale["differs_from_description"] = differ
        return EnvelopeDraft(
            envelope=env,
            workload_class=proposal.workload_class,
            rationale=rationale,
            confidence=env.confidence * (0.8 if differ else 1.0),
            validation=validation,
            stated=stated,
            drafted_by=proposal.source,
        )
    chosen = drafter or RuleDrafter()
    envelope, cls = chosen.propose(description, hints)
    return EnvelopeDraft(
        envelope=envelope,
        workload_class=cls,
        rationale=envelope.rationale,
        confidence=envelope.confidence,
        validation=_flagged(envelope, sites),
        stated=stated,
        drafted_by="rules" if isinstance(chosen, RuleDrafter) else type(chosen).__name__,
    )


def _flagged(envelope: ResourceEnvelope, sites: Sequence[SiteSpec]) -> EnvelopeValidation:
    """:func:`validate`, but a GPU type no site has is a bound to relax, not an error."""
    known = set().union(*(s.gpu_types for s in sites)) if sites else set()
    unknown = [t for t in envelope.gpu_types if t not in known]
    if not unknown:
        return validate(envelope, sites)
    kept = tuple(t for t in envelope.gpu_types if t in known)
    relaxed = envelope.model_copy(update={"gpu_types": kept})
    v = validate(relaxed, sites)
    why = f"no {', '.join(unknown)} GPUs here (the federation has: {', '.join(sorted(known))})"
    return EnvelopeValidation(
        feasible=(),
        rejected={f"{s.name}/{p.name}": why for s in sites for p in s.partitions},
        unsatisfiable_bound="gpu_types",
        nearest=relaxed if v.feasible else v.nearest,
    )


def _disagreements(env: ResourceEnvelope, rules: ResourceEnvelope, stated: dict[str, str]) -> str:
    """Where ``env`` differs from what the description states (as the rules read it)."""
    out = []
    for bound, fields in (
        ("cpus", ("cpus_min", "cpus_max")),
        ("gpus", ("gpus_min", "gpus_max")),
        ("gpu_types", ("gpu_types",)),
        ("gpu_mem_gb", ("gpu_mem_gb_min",)),
        ("nodes", ("nodes",)),
        ("mem_gb", ("mem_gb_min", "mem_gb_max")),
        ("walltime_s", ("walltime_s",)),
    ):
        if bound not in stated:
            continue
        want = [getattr(rules, f) for f in fields]
        got = [getattr(env, f) for f in fields]
        if want != got:
            said = "/".join(str(w) for w in want)
            out.append(f"{bound}: the description says {stated[bound]!r} ({said})")
    return "; ".join(out)
