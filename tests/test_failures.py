"""Failure classification: what may be retried elsewhere, and what may not."""

from __future__ import annotations

import pytest

from federation.core.failures import classify


@pytest.mark.parametrize(
    ("message", "tb", "cls", "retryable"),
    [
        ("RuntimeError: input file has 0 rows", "Traceback ... fail_with", "user_error", False),
        (
            "ENDPOINT_LOST",
            "endpoint local restarted while this task was queued",
            "endpoint_lost",
            True,
        ),
        (
            "slurmstepd: error: *** JOB 42 CANCELLED AT 10:00 DUE TO TIME LIMIT ***",
            "",
            "walltime",
            True,
        ),
        ("job 7 state OUT_OF_MEMORY", "", "out_of_memory", False),
        ("MemoryError", "Traceback ... MemoryError", "out_of_memory", False),
        ("NODE_FAIL", "", "node_failure", True),
        ("job was PREEMPTED", "", "preemption", True),
        ("re-placed by its group", "", "cancelled", False),
        # the engine's words when every block's sbatch was refused by a per-user job limit
        # (Slurm 22.05 on the local Vista, QOS MaxSubmitJobsPerUser): placed again
        (
            "BadStateException: Failed to start block 0: Cannot launch job parsl.htex.block-0: "
            "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
            "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or "
            "time limits)",
            "",
            "job_limit",
            True,
        ),
    ],
)
def test_classify(message: str, tb: str, cls: str, retryable: bool) -> None:
    f = classify(message, tb)
    assert (f.cls, f.retryable) == (cls, retryable)
    assert f.message == message
