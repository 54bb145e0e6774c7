"""A task's own guard against running after it was cancelled (shipped by source).

The Globus Compute service has no task cancel, so the coordinator withdraws a queued copy on
the site itself: it leaves a marker file in the user's home (shared by the login and compute
nodes on every site) and ``scancel``s the copy's tagged Slurm job. The endpoint's engine
(parsl) then finds the job gone and fails the task itself (the job is MISSING); should an
engine queue a fresh block for the task instead, the task finds the marker when that block
starts and stops before running anything of the scientist's.
"""

from typing import Any


def unless_cancelled(marker: str, fn_payload: str, args: Any, kwargs: Any) -> Any:
    """Run the serialized function unless ``marker`` (``~``-relative path) exists."""
    import os

    from globus_compute_sdk.serialize import ComputeSerializer

    if os.path.exists(os.path.expanduser(marker)):
        raise RuntimeError(
            "cancelled before it started: the coordinator withdrew this copy "
            "(marker " + marker + ")"
        )
    fn = ComputeSerializer().deserialize(fn_payload)
    return fn(*args, **kwargs)
