"""Workload functions shipped to endpoints. Each is self-contained (imports inside), since
Globus Compute serializes functions by source or by value."""

from __future__ import annotations

from typing import Any


def report_allocation(work_s: float = 0.5) -> dict[str, Any]:
    """Report the Slurm allocation this task runs in, after ``work_s`` seconds of work."""
    import os
    import socket
    import time

    t0 = time.time()
    x = 0
    while time.time() - t0 < work_s:
        x += 1
    env = os.environ
    gpus = env.get("CUDA_VISIBLE_DEVICES") or env.get("SLURM_JOB_GPUS") or ""
    mem_mb = env.get("SLURM_MEM_PER_NODE")
    return {
        "host": socket.gethostname(),
        "slurm_job_id": env.get("SLURM_JOB_ID"),
        "cluster": env.get("SLURM_CLUSTER_NAME"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "node": env.get("SLURMD_NODENAME"),
        "cpus": int(env.get("SLURM_CPUS_PER_TASK") or env.get("SLURM_CPUS_ON_NODE") or 0),
        "mem_gb": round(int(mem_mb) / 1024, 1) if mem_mb else None,
        "gpus": len([g for g in gpus.split(",") if g.strip()]),
        "gpu_ids": gpus,
        "work_iterations": x,
    }


def fail_with(message: str) -> None:
    """Raise inside the job: shows how a remote failure and its traceback come back."""
    raise RuntimeError(message)


def square(x: int) -> int:
    """The smallest useful task: for round-trip tests and dispatch benchmarks."""
    return x * x
