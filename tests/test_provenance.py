"""Result provenance from the scheduler's accounting (sacct through the site's endpoint)."""

from __future__ import annotations

from typing import Any

import pytest

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.runtime.provenance import fetch_accounting, parse_accounting
from functions.workloads import report_allocation

SACCT_TEXT = (
    "JobID|JobName|State|Partition|Submit|Start|End|Elapsed|NodeList|AllocTRES|ExitCode\n"
    "4242|parsl.block-0|RUNNING|cpu|2026-01-05T10:00:00|2026-01-05T10:00:07|Unknown|00:01:10|"
    "cn[01-02]|billing=8,cpu=8,mem=8G,node=2|0:0\n"
    "4243|parsl.block-1|PENDING|cpu|2026-01-05T10:00:01|Unknown|Unknown|00:00:00|"
    "None assigned||0:0\n"
)


def test_parse_accounting_reads_times_nodes_and_wait() -> None:
    raw = {"hostname": "login1", "utc_offset_s": 3600, "rc": 0, "stdout": SACCT_TEXT}
    acct = parse_accounting("delta", raw)
    assert acct.error is None and acct.source == "sacct on login1"
    run, pend = acct.jobs
    assert (run.job_id, run.state, run.partition) == ("4242", "running", "cpu")
    assert (
        run.submit_time is not None and run.submit_time.isoformat() == "2026-01-05T09:00:00+00:00"
    )
    assert run.queue_wait_s == 7.0 and run.end_time is None
    assert run.nodes == ("cn01", "cn02") and run.node_list == "cn[01-02]"
    assert run.alloc_tres["cpu"] == "8"
    assert pend.start_time is None and pend.queue_wait_s is None and pend.nodes == ()
    assert not acct.complete


def test_accounting_failures_are_reported_not_raised() -> None:
    no_sacct = parse_accounting("x", {"error": "sacct is not on PATH on this host"})
    assert no_sacct.error == "sacct is not on PATH on this host" and no_sacct.jobs == ()
    refused = parse_accounting(
        "x", {"rc": 1, "stderr": "sacct: error: Problem talking to the database"}
    )
    assert refused.error == "sacct failed: sacct: error: Problem talking to the database"
    assert "no Slurm job id" in (fetch_accounting("x", object(), []).error or "")
    cannot = fetch_accounting("x", object(), ["1"])
    assert cannot.error == "this site cannot run functions on its login node"


def test_a_reused_job_id_resolves_to_the_latest_job() -> None:
    # a controller that lost its state hands out ids again: sacct shows both holders
    text = (
        "JobID|JobName|State|Partition|Submit|Start|End|Elapsed|NodeList|AllocTRES|ExitCode\n"
        "201|old|PENDING||2026-01-05T09:00:00|Unknown|Unknown|00:00:04|n01||0:0\n"
        "201|parsl.block-0|COMPLETED|debug|2026-01-05T10:00:00|2026-01-05T10:00:02|"
        "2026-01-05T10:00:09|00:00:07|n01|cpu=1|0:0\n"
    )
    acct = parse_accounting("local", {"hostname": "h", "rc": 0, "stdout": text})
    (job,) = acct.jobs
    assert (job.job_name, job.state, job.partition) == ("parsl.block-0", "completed", "debug")
    assert job.queue_wait_s == 2.0


def test_a_stale_pending_record_is_left_out_once_the_task_has_started() -> None:
    text = (
        "JobID|JobName|State|Partition|Submit|Start|End|Elapsed|NodeList|AllocTRES|ExitCode\n"
        "272|allocation|PENDING||2026-01-05T09:00:00|Unknown|Unknown|00:00:03|n01||0:0\n"
    )
    raw = {"hostname": "h", "rc": 0, "stdout": text}
    assert parse_accounting("local", raw).jobs[0].state == "pending"  # as sacct says
    stale = parse_accounting("local", raw, started=True)
    assert stale.jobs == () and stale.error == "sacct knows none of these jobs (yet)"


@pytest.mark.slurm
def test_manifest_carries_the_batch_jobs_accounting(coord: Any) -> None:
    env = ResourceEnvelope(sites=("local",), cpus_min=1, mem_gb_min=1, walltime_s=300)
    h = coord.submit_task(PythonTask(report_allocation, (0.2,)), env)
    r = coord.get_result(h, timeout_s=180)
    assert r.status == "completed", r.error
    job = r.value["slurm_job_id"]
    assert r.slurm_job_id == job and r.slurm_job_ids == (job,)
    # slurmdbd learns of a job's start and end asynchronously (and, after a controller
    # restart, may still hold an older job under the same id): the accountant asks after
    # the task ended, in the background, and again on later looks until the record is
    # complete; task.accounted says when it is in (get_result never asks the site)
    acct = coord.accountant.wait(h, timeout_s=240)
    assert acct is not None and acct.error is None and acct.complete, acct
    r = coord.get_result(h)
    assert r.accounting == acct
    (rec,) = acct.jobs
    assert rec.job_id == job and rec.partition == r.value["partition"]
    assert rec.state in ("completed", "cancelled", "timeout")
    assert rec.submit_time is not None and rec.start_time is not None
    assert rec.start_time >= rec.submit_time
    assert rec.queue_wait_s == (rec.start_time - rec.submit_time).total_seconds()
    assert r.value["node"] in rec.nodes
    # the same record is kept with the task (durable coordinators store it)
    assert coord.get_result(h).accounting == acct
