"""A task's own claim on its tag, before anything of the scientist's runs (shipped by source).

The Globus Compute service has no task cancel and says nothing of a task's start, so each
task shipped to a cloud site claims its tag first: it creates ``~/.federation-jobs/claims/
<tag>`` atomically, holding its Slurm job id and Globus Compute task id. The coordinator
reads the claims to learn starts; a withdrawal claims the same name first, and a task that
finds its tag claimed stops here (``federation.sites.jobtags``).
"""

from typing import Any


def claim_then_run(claim: str, fn_payload: str, args: Any, kwargs: Any) -> Any:
    """Claim ``claim`` (a ``~``-relative path) atomically, then run the serialized function;
    raise without running it when the claim exists (the copy was withdrawn)."""
    import os

    from globus_compute_sdk.serialize import ComputeSerializer

    path = os.path.expanduser(claim)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise RuntimeError(
            "withdrawn before it started: the coordinator withdrew this copy (claim " + claim + ")"
        ) from None
    with os.fdopen(fd, "w") as f:
        job = os.environ.get("SLURM_JOB_ID") or "none"
        task = os.environ.get("GC_TASK_UUID") or "none"
        f.write(job + " " + task + "\n")
    fn = ComputeSerializer().deserialize(fn_payload)
    return fn(*args, **kwargs)
