"""draft_envelope: rules per workload class, validation, nearest feasible alternative."""

from __future__ import annotations

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import BadEnvelopeError
from federation.core.spec import load_sites
from federation.placement.drafting import RuleDrafter, TaskHints, classify, draft_envelope, validate

SITES = load_sites()


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("fine-tune a ResNet with DDP on 4 GPUs", "ddp-training"),
        ("run batched inference of the embedding model", "inference"),
        ("tokenize and shard the parquet corpus", "cpu-prep"),
        ("MPI stencil solver on 2 nodes", "mpi"),
        ("do the thing", "generic"),
    ],
)
def test_classify_from_text(text: str, cls: str) -> None:
    got, conf, why = classify(text, TaskHints())
    assert got == cls
    assert conf == (0.3 if cls == "generic" else 0.6)
    assert why


def test_hint_overrides_text_with_higher_confidence() -> None:
    assert classify("train a model", TaskHints(workload_class="inference"))[:2] == (
        "inference",
        0.9,
    )


def test_cpu_prep_bounds_scale_with_input() -> None:
    d = draft_envelope("prepare csv files", SITES, TaskHints(input_size_gb=20))
    e = d.envelope
    assert (e.cpus_min, e.cpus_max, e.gpus_min, e.gpus_max) == (4, 32, 0, 0)
    assert (e.mem_gb_min, e.mem_gb_max) == (40.0, 80.0)
    assert "delta/cpu" in d.validation.feasible and "vista/gg" in d.validation.feasible
    assert "mem_gb" in d.rationale


def test_inference_with_model_size_sets_gpu_memory() -> None:
    d = draft_envelope("serve predictions", SITES, TaskHints(model_size_gb=60))
    assert d.envelope.gpus_min == d.envelope.gpus_max == 1
    assert d.envelope.gpu_mem_gb_min == 72
    # 80 GB+ GPUs: anvil ai (h100 80G), deltaai (gh200 120G), vista (gh200 96G); but the
    # 120 GB host-memory floor (2x the model) rules out Vista's 116 GB nodes; Perlmutter's
    # 80 GB A100 nodes (hbm80g) hold it
    assert set(d.validation.feasible) == {"anvil/ai", "deltaai/ghx4", "perlmutter/gpu_hbm80g"}
    assert "40 GB per GPU < 72" in d.validation.rejected["delta/gpuA100x4"]
    assert d.validation.rejected["vista/gh"] == "116 GB per node < 120.0 GB needed"


def test_ddp_training_range_and_walltime_from_known_runtime() -> None:
    d = draft_envelope("DDP training", SITES, TaskHints(known_runtime_s=1000, gpus=4))
    e = d.envelope
    assert (e.gpus_min, e.gpus_max) == (2, 4)
    assert e.walltime_s == 2040  # 2x 1000 s, rounded up to whole minutes
    # the class from a keyword (0.6), raised by the two bounds the hints give (of four)
    assert d.confidence == 0.77
    assert "cpus, mem_gb" in d.rationale["unstated"]


def test_unsatisfiable_bound_and_nearest_alternative() -> None:
    env = ResourceEnvelope(gpus_min=8, gpu_types=("h100",))
    v = validate(env, SITES)
    assert v.feasible == ()
    # dropping the type alone is not enough (nobody has 8 per node); keeping H100 and
    # asking for the 4 a node has is the nearest feasible envelope
    assert v.unsatisfiable_bound == "gpus_min"
    assert v.nearest is not None
    assert (v.nearest.gpus_min, v.nearest.gpu_types) == (4, ("h100",))
    assert validate(v.nearest, SITES).feasible == ("anvil/ai",)


def test_gpu_count_relaxed_when_type_is_free() -> None:
    v = validate(ResourceEnvelope(gpus_min=8), SITES)
    assert v.unsatisfiable_bound == "gpus_min"
    assert v.nearest is not None and v.nearest.gpus_min == 4


def test_walltime_beyond_every_partition() -> None:
    v = validate(ResourceEnvelope(walltime_s=10 * 24 * 3600), SITES)
    assert v.unsatisfiable_bound == "walltime_s"
    assert v.nearest is not None and v.nearest.walltime_s == 172800


def test_unknown_gpu_type_is_an_error_not_an_empty_result() -> None:
    with pytest.raises(BadEnvelopeError, match="unknown GPU type"):
        validate(ResourceEnvelope(gpus_min=1, gpu_types=("b200",)), SITES)


class _AgentDrafter:
    """A drafter standing in for an agent's proposal: validated the same way."""

    def propose(self, description: str, hints: TaskHints) -> tuple[ResourceEnvelope, str]:
        return ResourceEnvelope(
            gpus_min=2, gpu_types=("a40",), rationale={"gpus": "agent"}
        ), "generic"


def test_custom_drafter_is_validated_the_same_way() -> None:
    d = draft_envelope("anything", SITES, drafter=_AgentDrafter())  # type: ignore[arg-type]
    assert d.validation.feasible == ("delta/gpuA40x4",)
    assert d.rationale == {"gpus": "agent"}


def test_rule_drafter_is_deterministic() -> None:
    a = RuleDrafter().propose("train", TaskHints())
    b = RuleDrafter().propose("train", TaskHints())
    assert a == b
