"""Drafts honour what the description states (issue 35, item 1).

Each description states some of its shape in its own words; the draft has those bounds
(whatever the workload class would default to), quotes the words in its rationale and lists
them in ``stated``, and its confidence is lower the less the text states. Words that look
like quantities but are not ('3 MB CSV', 'ResNet-50', 'Python 3.11', '2D', 'top 5', a year)
change nothing. An impossible request is drafted as said and flagged by its validation.
"""

from __future__ import annotations

from typing import Any

import pytest

from federation.core.spec import load_sites
from federation.placement.drafting import TaskHints, draft_envelope
from federation.placement.stated import number, read_stated

SITES = load_sites()
H = 3600

# description -> the envelope fields it states (every other field is the class's default)
HONOURED: list[tuple[str, dict[str, Any]]] = [
    (
        "sbatch-style: --mem=64G --time=01:00:00 -N 2 --gpus=2",
        {"mem_gb_min": 64.0, "walltime_s": H, "nodes": 2, "gpus_min": 2},
    ),
    ("GPU not required, 8 cores", {"gpus_max": 0, "cpus_min": 8}),
    (
        "train for 10 epochs on 8 cores with 2 GB of memory per core",
        {"cpus_min": 8, "mem_gb_min": 16.0},
    ),
    ("a 4-GPU job of 2.5h", {"gpus_min": 4, "walltime_s": 9000}),
    ("1 TB RAM, 2 hrs", {"mem_gb_min": 1024.0, "walltime_s": 2 * H}),
    (
        "CPU only: generate a 3 MB CSV, 1 core, 2 minutes",
        {"cpus_min": 1, "cpus_max": 1, "gpus_min": 0, "gpus_max": 0, "walltime_s": 120},
    ),
    (
        "Train a ResNet on 4 A100 GPUs for 6 hours",
        {"gpus_min": 4, "gpus_max": 4, "gpu_types": ("a100",), "walltime_s": 6 * H},
    ),
    (
        "fine-tune a llama on 4x A100 80GB for 1.5 hours",
        {"gpus_min": 4, "gpu_types": ("a100",), "gpu_mem_gb_min": 80, "walltime_s": 5400},
    ),
    ("batch inference on two H100s, 30 min", {"gpus_min": 2, "gpu_types": ("h100",)}),
    ("run on an H100 for half an hour", {"gpus_min": 1, "gpus_max": 1, "walltime_s": 1800}),
    ("embed the corpus on a GH200 for 90 minutes", {"gpu_types": ("gh200",), "walltime_s": 5400}),
    ("A100x4 for twenty-four hours", {"gpus_min": 4, "walltime_s": 24 * H}),
    (
        "inference with 96 GB GPU memory, 512 MiB RAM, 30 min",
        {"gpu_mem_gb_min": 96, "mem_gb_min": 0.5, "mem_gb_max": 0.5, "walltime_s": 1800},
    ),
    ("score the model, at least 40 GB VRAM, one GPU", {"gpus_min": 1, "gpu_mem_gb_min": 40}),
    (
        "two nodes with 64 cores each and 128 GB of RAM, 90 seconds",
        {"nodes": 2, "cpus_min": 64, "cpus_max": 64, "mem_gb_min": 128.0, "walltime_s": 90},
    ),
    (
        "MPI stencil on 4 nodes, 256 MPI ranks, 12 h",
        {"nodes": 4, "cpus_min": 64, "walltime_s": 43200},
    ),
    (
        "needs 8 GPUs across 2 nodes, walltime 04:00:00",
        {"nodes": 2, "gpus_min": 4, "walltime_s": 4 * H},
    ),
    ("no GPU, a dozen threads, a day", {"gpus_max": 0, "cpus_min": 12, "walltime_s": 24 * H}),
    (
        "8 CPUs, 64GB memory, 2 min, without GPUs",
        {"cpus_min": 8, "mem_gb_min": 64.0, "mem_gb_max": 64.0, "gpus_max": 0, "walltime_s": 120},
    ),
    (
        "1h30m on a single node with 16 cores, mem=32G",
        {"nodes": 1, "cpus_min": 16, "mem_gb_min": 32.0, "walltime_s": 5400},
    ),
    (
        "tokenize with 8-16 cores for up to 3 hours, checkpoint every 10 minutes",
        {"cpus_min": 8, "cpus_max": 16, "walltime_s": 3 * H},
    ),
    ("single core, python script, 5 min", {"cpus_min": 1, "cpus_max": 1, "walltime_s": 300}),
    (
        "train on three nodes, four GPUs per node, 2 days",
        {"nodes": 3, "gpus_min": 4, "walltime_s": 48 * H},
    ),
    (
        "a simulation that needs at least 200 GB of RAM and 32 cores",
        {"mem_gb_min": 200.0, "mem_gb_max": None, "cpus_min": 32},
    ),
    ("render frames on 2 GPUs, 6 h", {"gpus_min": 2, "gpus_max": 2, "walltime_s": 6 * H}),
]


@pytest.mark.parametrize(("text", "want"), HONOURED, ids=[t for t, _ in HONOURED])
def test_stated_quantities_win_over_class_defaults(text: str, want: dict[str, Any]) -> None:
    d = draft_envelope(text, SITES)
    got = {k: getattr(d.envelope, k) for k in want}
    assert got == want, d.rationale
    assert d.stated and d.drafted_by == "rules"
    for bound, words in d.stated.items():  # each bound quotes the words it came from
        assert words.lower() in text.lower()
        key = {"gpu_types": "gpu_types"}.get(bound, bound)
        assert words in d.rationale[key], (bound, d.rationale)


def test_the_two_drafts_of_the_issue() -> None:
    d = draft_envelope("CPU only: generate a 3 MB CSV, 1 core, 2 minutes", SITES)
    assert d.workload_class == "cpu-prep"  # not single-GPU inference because of 'generate'
    assert d.rationale["gpus"] == "none: 'CPU only'"
    assert d.rationale["walltime_s"] == "120 s from '2 minutes'"
    assert "'3 MB CSV' is the data's size, not memory" in d.rationale["not_read"]
    assert d.envelope.mem_gb_min == 8.0  # the class's floor, not 3 MB
    assert "delta/cpu" in d.validation.feasible
    t = draft_envelope("Train a ResNet on 4 A100 GPUs for 6 hours", SITES)
    assert set(t.validation.feasible) == {  # 4 A100s per node, 6 h (not Perlmutter's debug)
        "anvil/gpu",
        "delta/gpuA100x4",
        "perlmutter/gpu",
        "perlmutter/gpu_hbm80g",
        "perlmutter/gpu_shared",
    }
    assert t.stated == {"gpus": "4 A100 GPUs", "gpu_types": "4 A100 GPUs", "walltime_s": "6 hours"}


@pytest.mark.parametrize(
    "text",
    [
        "fine-tune ResNet-50 in Python 3.11 on 2D images and report the top 5 classes",
        "clean the 2024 survey data, a 3 MB CSV",
        "train a model on the 1990s archive of 20 GB of images",
        "run the A100 benchmark suite",  # a type, but no count, memory or duration
    ],
)
def test_no_false_reads(text: str) -> None:
    s = read_stated(text)
    assert (s.cpus, s.gpus, s.nodes, s.mem_gb, s.walltime_s, s.gpu_mem_gb) == (None,) * 6, s
    assert not s.cpu_only


def test_numbers_in_words() -> None:
    words = {"four": 4, "twelve": 12, "twenty": 20, "twenty-four": 24, "a dozen": 12}
    words |= {"a couple of": 2, "single": 1, "an": 1, "8": 8, "1.5": 1.5, "two dozen": 24}
    assert {w: number(w) for w in words} == words


def test_confidence_drops_where_the_text_says_nothing() -> None:
    everything = draft_envelope("train on 4 GPUs, 32 cores, 128 GB RAM, 2 hours", SITES)
    some = draft_envelope("train on 4 GPUs for 2 hours", SITES)
    nothing = draft_envelope("train a model", SITES)
    assert everything.confidence > some.confidence > nothing.confidence == 0.6
    assert "unstated" not in everything.rationale
    assert "cpus, mem_gb" in some.rationale["unstated"]
    assert draft_envelope("do the thing", SITES).confidence == 0.3


def test_impossible_requests_are_drafted_as_said_and_flagged() -> None:
    d = draft_envelope("train on 8 H100 GPUs on one node for 4 hours", SITES)
    assert (d.envelope.gpus_min, d.envelope.gpu_types) == (8, ("h100",))  # as said
    assert d.validation.feasible == () and d.validation.unsatisfiable_bound == "gpus_min"
    assert d.validation.nearest is not None and d.validation.nearest.gpus_min == 4
    v = draft_envelope("inference on 2 V100s", SITES)  # a type the federation lacks
    assert v.envelope.gpu_types == ("v100",)
    assert v.validation.unsatisfiable_bound == "gpu_types"
    assert "no v100 GPUs here" in v.validation.rejected["delta/gpuA100x4"]
    assert v.validation.nearest is not None and v.validation.nearest.gpu_types == ()
    w = draft_envelope("a long run: 60 days on 4 cores", SITES)
    assert w.envelope.walltime_s == 30 * 24 * H  # the envelope's most, said so
    assert "the envelope's most" in w.rationale["walltime_s"]
    assert w.validation.unsatisfiable_bound == "walltime_s"


def test_hints_still_win_and_the_text_is_quoted_beside_them() -> None:
    d = draft_envelope("train for 2 hours on 2 GPUs", SITES, TaskHints(known_runtime_s=600))
    assert d.envelope.walltime_s == 1200
    assert "the description says 7200 s from '2 hours'" in d.rationale["walltime_s"]
