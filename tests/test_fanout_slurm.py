"""Fan-outs on the real local clusters, both paths: a shape's blocks grow with its tasks,
and a task whose batch job the site refuses is placed again, not failed.

Speed itself is measured by ``bench/fanout.py``; these tests check behaviour: tasks of one
shape ran in several Slurm jobs at once, and a refused ``sbatch`` became a retry.
"""

from __future__ import annotations

from typing import Any

import pytest
from slurm_scene import BOTH_PATHS, queued_jobs, until, wait_until_quiet

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import ShellTask

pytestmark = [pytest.mark.slurm, BOTH_PATHS]

HELD = "fed-test-quota"


@pytest.mark.paths("cloud")
def test_tasks_of_one_shape_run_in_several_jobs_at_once(local: Any) -> None:
    """8 tasks of one shape (1 CPU, 3 s each) on the local site's 16 idle CPUs: the shape's
    engine grows its blocks with its outstanding tasks (before: one block, one task after
    another). Each task prints its Slurm job and its start and end times. On the cloud
    path only: the blocks are the endpoint's engine's, whichever path the tasks came by."""
    coord = local.connect(telemetry=False, policy="earliest-start")
    try:
        wait_until_quiet(local.slurm, ("local",))
        env = ResourceEnvelope(sites=("local",), partitions=("local:debug",), walltime_s=600)
        cmd = 'echo "$SLURM_JOB_ID $(date +%s.%N)"; sleep 3; date +%s.%N'
        snap = coord.inspect_federation()  # a burst placed from one snapshot
        handles = [coord.submit_task(ShellTask(command=cmd), env, snapshot=snap) for _ in range(8)]
        shapes = {h.decision.chosen.shape for h in handles}
        assert len(shapes) == 1  # one shape: one user_endpoint_config, one engine
        spans: list[tuple[str, float, float]] = []
        for h in handles:
            r = coord.get_result(h, timeout_s=240)
            assert r.status == "completed", r.error
            assert r.stdout is not None
            first, last = r.stdout.strip().splitlines()
            job, start = first.split()
            spans.append((job, float(start), float(last)))
        jobs = {job for job, _, _ in spans}
        assert len(jobs) >= 4, spans  # blocks grew with the work
        # the most tasks running at one moment: several (one block ran them one by one)
        most = max(sum(1 for _, a, b in spans if a <= t < b) for _, t, _ in spans)
        assert most >= 4, spans
    finally:
        coord.close()


def _waiting_jobs(slurm: Any, site: str, partition: str, n: int, how: str) -> list[str]:
    """``n`` jobs of ours in ``site``'s ``partition`` that use no node: ``--hold`` (held:
    not a queue ahead of anyone, but counted against the user's submit limit) or
    ``--begin=now+1hour`` (pending, so a queue the placement sees)."""
    ids = []
    for _ in range(n):
        res = slurm.run(
            site,
            [
                "sbatch",
                "--parsable",
                how,
                f"--job-name={HELD}",
                f"--partition={partition}",
                "--time=00:10:00",
                "--output=/dev/null",
                "--wrap=true",
            ],
        )
        assert res.returncode == 0, res.stderr
        ids.append(res.stdout.strip().split(";")[0])
    return ids


@pytest.mark.paths("cloud")
def test_a_task_whose_sbatch_the_site_refuses_is_placed_again(local: Any) -> None:
    """Vista's gh-dev allows 3 submitted jobs per user; with 3 held there, the task's block
    is refused by sbatch (QOSMaxSubmitJobPerUserLimit). The engine fails the task with the
    site's words; the coordinator classes it ``job_limit`` and places it again elsewhere:
    it completes on the local site, its first attempt on Vista recorded. (Four jobs waiting
    for their begin time on the local site make Vista's queue the shorter one for the first
    placement.) On the cloud path only: the refusal is the engine's, and a remote failure's
    words reach the coordinator on both paths (``test_failure_arrives_as_event_with_remote_
    traceback``)."""
    slurm = local.slurm
    coord = local.connect(telemetry=False, policy="shortest-queue")
    try:
        wait_until_quiet(slurm, ("vista", "local"))
        _waiting_jobs(slurm, "vista", "gh-dev", 3, "--hold")
        _waiting_jobs(slurm, "local", "gpu", 4, "--begin=now+3600")
        env = ResourceEnvelope(
            sites=("vista", "local"),
            partitions=("vista:gh-dev", "local:gpu"),  # 1-GPU tasks: gh-dev is Vista's
            gpus_min=1,
            walltime_s=600,
        )
        h = coord.submit_task(ShellTask(command="echo placed-again"), env)
        assert h.site == "vista"
        r = coord.get_result(h, timeout_s=300)
        assert r.status == "completed", (r.error, h.notes)
        assert r.site == "local" and r.stdout is not None and "placed-again" in r.stdout
        (first,) = h.attempts
        assert first["site"] == "vista", h.attempts
        assert first["failure"] == "job_limit", first
    finally:
        for site in ("vista", "local"):
            slurm.run(site, ["scancel", f"--name={HELD}"])
        until(
            "the held test jobs are gone",
            lambda: not any(HELD in j for s in ("vista", "local") for j in queued_jobs(slurm, s)),
            60,
        )
        coord.close()
