"""Finding one task's Slurm job on a site, where the Globus Compute service tells nothing.

The real service reports no start and has no task cancel. So every task shipped to a cloud
site carries a tag in its ``user_endpoint_config`` (``job_tag``); the site's template names
the batch job ``fed.<tag>``, and two small shell functions, run on the login node through
the endpoint's probe profile, read ``squeue`` for the tagged jobs (a copy's start) and
withdraw one (a marker the task checks before it runs, then ``scancel`` of its pending job).
Tags are lowercase hex, so they need no shell quoting.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

from federation.core.model import Frozen

JOB_NAME_PREFIX = "fed."
MARKER_DIR = ".federation-jobs/cancelled"
"""Under the user's home on the site, which its login and compute nodes share."""
MARKER_KEEP_DAYS = 7
STARTED_STATES = frozenset(
    {"RUNNING", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
)
"""Slurm states of a job that has started (its task may have run)."""

_TAG = re.compile(r"^[0-9a-f]{8,40}$")


class TaggedJob(Frozen):
    """One tagged job as ``squeue`` lists it."""

    tag: str
    job_id: str
    state: str

    @property
    def started(self) -> bool:
        return self.state in STARTED_STATES


def new_tag() -> str:
    return uuid.uuid4().hex[:20]


def _check(tag: str) -> str:
    if not _TAG.match(tag):
        raise ValueError(f"not a job tag: {tag!r}")
    return tag


def job_name(tag: str) -> str:
    return JOB_NAME_PREFIX + _check(tag)


def marker(tag: str) -> str:
    """The marker's path relative to the home folder (``~/...`` for Python)."""
    return f"~/{MARKER_DIR}/{_check(tag)}"


def guarded_command(command: str, tag: str) -> str:
    """A shell task's command, which first stops if its copy was withdrawn."""
    path = f'"$HOME/{MARKER_DIR}/{_check(tag)}"'
    return (
        f"if [ -e {path} ]; then echo 'cancelled before it started: the coordinator "
        f"withdrew this copy' >&2; exit 125; fi\n{command}"
    )


def squeue_command(tags: Iterable[str]) -> str:
    """List the tagged jobs: one ``fed.<tag>|<job id>|<state>`` line each."""
    names = ",".join(job_name(t) for t in sorted(set(tags)))
    return f"squeue --noheader --name={names} --format='%j|%i|%T'"


def cancel_command(tag: str) -> str:
    """Withdraw one copy: leave the marker, ``scancel`` its job if still pending, and print
    ``state:<STATE>`` (the job's state before, empty when it is not queued yet or gone)."""
    name = job_name(tag)
    d = f'"$HOME/{MARKER_DIR}"'
    return "\n".join(
        [
            f"mkdir -p {d} && touch {d}/{tag}",
            f"find {d} -type f -mtime +{MARKER_KEEP_DAYS} -delete 2>/dev/null || true",
            f"state=$(squeue --noheader --name={name} --format=%T | head -n 1)",
            f'if [ "$state" = PENDING ]; then scancel --state=PENDING --name={name}; fi',
            'echo "state:$state"',
        ]
    )


def parse_squeue(stdout: str) -> dict[str, TaggedJob]:
    """Tagged jobs by tag, from :func:`squeue_command`'s output (other lines ignored)."""
    out: dict[str, TaggedJob] = {}
    for line in stdout.splitlines():
        parts = line.strip().strip("'").split("|")
        if len(parts) != 3 or not parts[0].startswith(JOB_NAME_PREFIX):
            continue
        tag = parts[0][len(JOB_NAME_PREFIX) :]
        if _TAG.match(tag):
            out[tag] = TaggedJob(tag=tag, job_id=parts[1].strip(), state=parts[2].strip())
    return out


def parse_cancel(stdout: str) -> str | None:
    """The job's state before the cancel ('' when not queued or gone), None if unreadable."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("state:"):
            return line[len("state:") :].strip()
    return None
