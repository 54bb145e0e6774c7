"""Scheduler accounting for a task's result manifest: ``sacct`` for its Slurm jobs.

The query runs where the jobs ran: :func:`functions.accounting.sacct_jobs` is shipped to the
site's endpoint (its probe profile, on the login node) like the probes are, and its raw text
is parsed here with :mod:`federation.parsing.sacct`. Accounting is best effort: a site
without ``sacct`` or ``slurmdbd`` gives an :class:`Accounting` with ``error`` set, never an
exception.
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from federation.core.errors import ParseError
from federation.core.model import Frozen
from federation.parsing.hostlist import expand_hostlist
from federation.parsing.sacct import parse_sacct_parsable
from federation.parsing.table import parse_delimited
from functions.accounting import sacct_jobs


class JobAccounting(Frozen):
    """One Slurm job (allocation) a task ran in, as the scheduler's accounting has it."""

    job_id: str
    job_name: str | None = None
    state: str
    partition: str | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    queue_wait_s: float | None = Field(default=None, ge=0)
    elapsed_s: int | None = None
    node_list: str | None = None
    nodes: tuple[str, ...] = ()
    alloc_tres: dict[str, str] = Field(default_factory=dict)
    exit_code: str | None = None


class Accounting(Frozen):
    """What ``sacct`` said about a task's jobs, and where and when it was asked."""

    site: str
    jobs: tuple[JobAccounting, ...] = ()
    fetched_at: datetime
    source: str = "sacct"
    error: str | None = None

    @property
    def complete(self) -> bool:
        """Every job found has ended (nothing more to learn by asking again)."""
        return bool(self.jobs) and all(j.end_time is not None for j in self.jobs)


@runtime_checkable
class FunctionSite(Protocol):
    """A site that can run a function on its login node (``ComputeSite`` can)."""

    def executor(self, uec: dict[str, Any]) -> Any: ...


def parse_accounting(site: str, raw: dict[str, Any], started: bool = False) -> Accounting:
    """The output of :func:`functions.accounting.sacct_jobs` -> :class:`Accounting`.

    Slurm reuses job ids (a controller that lost its state, a counter that wrapped), so
    sacct can return several jobs under one id; the latest submitted is the task's (its
    batch job is the newest holder of the id when the task ends). ``started``: the task is
    known to have run, so a record still saying "pending" is stale (slurmdbd is updated
    asynchronously) and is left out until it catches up.
    """
    now = datetime.now(UTC)
    host = raw.get("hostname") or "?"
    source = f"sacct on {host}"
    if raw.get("error"):
        return Accounting(site=site, fetched_at=now, source=source, error=str(raw["error"]))
    if raw.get("rc") != 0:
        err = str(raw.get("stderr") or "").strip().splitlines()
        why = err[-1] if err else f"exit code {raw.get('rc')}"
        return Accounting(site=site, fetched_at=now, source=source, error=f"sacct failed: {why}")
    text = str(raw.get("stdout") or "")
    offset = float(raw.get("utc_offset_s") or 0)
    try:
        records = parse_sacct_parsable(text, utc_offset_s=offset)
        table = parse_delimited(text, "|")
    except ParseError as e:
        return Accounting(site=site, fetched_at=now, source=source, error=str(e))
    nodelists = {d.get("JobID", ""): d.get("NodeList") for d in table.dicts()}
    jobs = []
    for r in records:
        if r.is_step:
            continue
        nl = nodelists.get(r.job_id)
        nl = nl if nl and nl not in ("None assigned", "(null)") else None
        wait = None
        if r.submit_time is not None and r.start_time is not None:
            wait = max(0.0, (r.start_time - r.submit_time).total_seconds())
        jobs.append(
            JobAccounting(
                job_id=r.job_id,
                job_name=r.job_name,
                state=r.state,
                partition=r.partition,
                submit_time=r.submit_time,
                start_time=r.start_time,
                end_time=r.end_time,
                queue_wait_s=wait,
                elapsed_s=r.elapsed_s,
                node_list=nl,
                nodes=tuple(expand_hostlist(nl)) if nl else (),
                alloc_tres=r.alloc_tres,
                exit_code=r.exit_code,
            )
        )
    latest: dict[str, JobAccounting] = {}
    for j in jobs:
        if started and j.state == "pending":
            continue  # a stale record (or an older job with this id): ours has started
        prev = latest.get(j.job_id)
        if prev is None or (j.submit_time or now) >= (prev.submit_time or now):
            latest[j.job_id] = j
    jobs = list(latest.values())
    error = None if jobs else "sacct knows none of these jobs (yet)"
    return Accounting(site=site, jobs=tuple(jobs), fetched_at=now, source=source, error=error)


def fetch_accounting(
    site: str,
    backend: object,
    job_ids: list[str],
    timeout_s: float = 30.0,
    started: bool = False,
) -> Accounting:
    """Ask ``site`` (through its endpoint) what its accounting knows about ``job_ids``."""
    now = datetime.now(UTC)
    if not job_ids:
        return Accounting(site=site, fetched_at=now, error="no Slurm job id was recorded")
    if not isinstance(backend, FunctionSite):
        return Accounting(
            site=site, fetched_at=now, error="this site cannot run functions on its login node"
        )
    try:
        fut: Future[dict[str, Any]] = backend.executor({"profile": "probe"}).submit(
            sacct_jobs, list(job_ids)
        )
        raw = fut.result(timeout=timeout_s)
    except Exception as e:  # the endpoint is down, or the query timed out
        return Accounting(
            site=site, fetched_at=now, error=f"accounting query failed: {type(e).__name__}: {e}"
        )
    return parse_accounting(site, raw, started)
