"""A prior for how fast a task runs on hardware it has not run on yet, from datasheets.

Before the coordinator has run a workload on some hardware, it needs a guess of how fast
that workload runs there relative to where it has run (or to the reference, when it has run
nowhere yet); without one, every site looks alike and ties are broken by accident, so the
coordinator may never try the fastest hardware. :func:`speed_prior` gives that guess per
shape; :class:`~federation.placement.runtime_model.TaskRuntimeModel` uses it only until the workload
has run on the shape's (site, partition), and then its own observations.

GPUs: the device's memory bandwidth from the vendor's datasheet (deep-learning training and
inference are mostly memory bound), relative to an A100 40 GB. It is a prior, not a
measurement: it orders the devices the usual way (A40 < A100 < H100 < GH200) but need not
get the ratios right for any one workload. CPUs and unknown GPU types: no prior (1.0): no
single datasheet figure ranks these sites' processors for every CPU workload, so their
speeds are left to be learned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from federation.core.envelope import Shape
from federation.core.spec import SiteSpec

SpeedFn = Callable[[Shape], float]
"""Relative speed of the hardware a shape lands on (1.0 = the reference)."""

GPU_MEMORY_BANDWIDTH_GBPS: dict[str, float] = {
    "l4": 300.0,  # NVIDIA L4 24 GB GDDR6
    "a40": 696.0,  # NVIDIA A40 48 GB GDDR6
    "a100": 1555.0,  # NVIDIA A100 40 GB HBM2 (SXM4)
    "h100": 3350.0,  # NVIDIA H100 80 GB HBM3 (SXM5)
    "gh200": 4000.0,  # NVIDIA GH200 Grace Hopper, 96 GB HBM3
}
REFERENCE_GPU = "a100"


def gpu_speed(gpu_type: str | None) -> float:
    """Relative speed of one GPU of ``gpu_type`` (1.0 when unknown or ``None``)."""
    bw = GPU_MEMORY_BANDWIDTH_GBPS.get(gpu_type or "")
    return 1.0 if bw is None else bw / GPU_MEMORY_BANDWIDTH_GBPS[REFERENCE_GPU]


def speed_prior(specs: Iterable[SiteSpec]) -> SpeedFn:
    """The datasheet prior for shapes on ``specs``' partitions (1.0 off them, and for CPUs)."""
    gpu_types = {(s.name, p.name): p.gpu_type for s in specs for p in s.partitions}

    def speed(shape: Shape) -> float:
        if not shape.gpus:
            return 1.0
        return gpu_speed(gpu_types.get((shape.site, shape.partition)))

    return speed
