"""Why a task failed, and whether running it again elsewhere can help.

Infrastructure failures (the batch job hit its walltime, the node failed, the job was
preempted, the endpoint was lost) are retryable on another feasible site; user errors (an
exception raised by the task's own code) and out-of-memory (the envelope is too small; the
same shape fails again) are not.
"""

from __future__ import annotations

import re
from typing import Literal

from federation.core.model import Frozen

FailureClass = Literal[
    "job_limit",
    "walltime",
    "out_of_memory",
    "node_failure",
    "preemption",
    "endpoint_lost",
    "cancelled",
    "result_stream_lost",
    "user_error",
]

_RULES: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        "endpoint_lost",
        re.compile(
            r"ENDPOINT_LOST|endpoint \S+ restarted|no longer knows this "
            r"task|ManagerLost|lost contact with the endpoint",
            re.I,
        ),
    ),
    # the SDK's result stream died: not the task's failure (it may still run at the site),
    # and not retried elsewhere, which could run it twice; the coordinator re-attaches first
    ("result_stream_lost", re.compile(r"SDK thread quit unexpectedly")),
    # the site refused the batch job (sbatch): the user's per-partition job limit, or the
    # account's: the task never ran; placed again (the engine fails its tasks with
    # BadStateException after refused blocks, quoting sbatch's words)
    (
        "job_limit",
        re.compile(
            r"QOSMax\w*PerUser\w*|AssocMax\w*Limit|QOSMaxSubmitJob|"
            r"Job violates accounting/QOS policy",
            re.I,
        ),
    ),
    ("walltime", re.compile(r"TIMEOUT|DUE TO TIME LIMIT|walltime|time limit", re.I)),
    ("cancelled", re.compile(r"cancelled by request|re-placed by its group|task cancelled")),
    ("out_of_memory", re.compile(r"OUT_OF_MEMORY|\bOOM\b|MemoryError|oom-kill", re.I)),
    ("preemption", re.compile(r"PREEMPT", re.I)),
    (
        "node_failure",
        re.compile(
            r"NODE_FAIL|node failure|WorkerLost|BadStateException|"
            r"workers? failed to register|SubmitException",
            re.I,
        ),
    ),
)

RETRYABLE: frozenset[str] = frozenset(
    {"job_limit", "walltime", "node_failure", "preemption", "endpoint_lost"}
)


class Failure(Frozen):
    """A classified failure."""

    cls: FailureClass
    retryable: bool
    message: str


def classify(message: str, remote_traceback: str = "") -> Failure:
    """Classify by the scheduler's and engine's own words; anything else is the user's code."""
    text = f"{message}\n{remote_traceback}"
    for cls, pattern in _RULES:
        if pattern.search(text):
            return Failure(cls=cls, retryable=cls in RETRYABLE, message=message)
    return Failure(cls="user_error", retryable=False, message=message)
