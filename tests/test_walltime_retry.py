"""A task killed at its walltime is retried with a longer one, never beyond a partition's limit."""

from __future__ import annotations

import threading

import pytest
from inprocess import inprocess_coordinator

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.runtime.retries import grown_walltime_s

_runs: list[int] = []
_lock = threading.Lock()


def _killed_once() -> int:
    """Killed at its limit the first time (as Slurm reports it), done the second."""
    with _lock:
        _runs.append(1)
        first = len(_runs) == 1
    if first:
        raise RuntimeError("slurmstepd: error: *** JOB 42 CANCELLED DUE TO TIME LIMIT ***")
    return 7


def _always_killed() -> int:
    raise RuntimeError("slurmstepd: error: *** JOB 43 CANCELLED DUE TO TIME LIMIT ***")


@pytest.mark.parametrize(
    ("old", "ran", "limit", "new"),
    [
        (600, None, 86400, 1200),  # start unknown: twice the old walltime
        (600, 610.0, 86400, 1260),  # it ran 610 s: twice that, in whole minutes
        (600, 1000.0, 86400, 2040),
        (3600, 3650.0, 5400, 5400),  # capped at the longest partition limit
        (5400, 5460.0, 5400, None),  # already there: cannot grow
        (61, None, 86400, 180),  # whole minutes, Slurm's unit
    ],
)
def test_the_walltime_grows_from_what_the_task_ran_up_to_the_limit(
    old: int, ran: float | None, limit: int, new: int | None
) -> None:
    assert grown_walltime_s(old, ran, limit) == new


def test_a_task_killed_at_its_limit_runs_again_with_twice_the_walltime() -> None:
    _runs.clear()
    coord = inprocess_coordinator(("local",))
    try:
        h = coord.submit_task(PythonTask(_killed_once), ResourceEnvelope(walltime_s=600))
        assert coord.result_value(h, timeout_s=30) == 7
        assert h.site == "local"  # a walltime kill is no reason to leave the site
        assert h.decision.chosen.shape.walltime_s == 1200 and h.envelope.walltime_s == 1200
        assert [a["failure"] for a in h.attempts] == ["walltime"]
        (retried,) = [e for e in coord.history(h.id) if e.kind == "task.retried"]
        assert retried.detail["walltime_s"] == 1200
        assert any("walltime 600 s -> 1200 s" in n for n in h.notes)
    finally:
        coord.close()


def test_a_task_at_the_longest_limit_fails_saying_what_to_do() -> None:
    coord = inprocess_coordinator(("local",))
    longest = max(p.max_walltime_s for p in coord.backends["local"].spec.partitions)
    try:
        h = coord.submit_task(PythonTask(_always_killed), ResourceEnvelope(walltime_s=longest))
        assert h.wait(30) and h.state == "failed"
        assert "TIME LIMIT" in (h.error or "") and "not retried" in (h.error or "")
        assert "checkpoint" in (h.error or "")
        assert "task.retried" not in [e.kind for e in coord.history(h.id)]
    finally:
        coord.close()


@pytest.mark.slurm
def test_a_real_job_killed_at_its_limit_is_retried_longer_and_completes(
    local_federation: object,
) -> None:
    """On the local Slurm cluster: a shell task that needs ~80 s, given a 1-minute limit,
    is killed by Slurm at its limit; the retry asks for more and completes there."""
    from federation.core.tasks import ShellTask
    from federation.deploy.local import LocalSites

    local = LocalSites(home=local_federation.home, sites=["local"])  # type: ignore[attr-defined]
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    try:
        h = coord.submit_task(
            ShellTask(command="sleep 80; echo done"),
            ResourceEnvelope(sites=("local",), walltime_s=60),
        )
        assert h.wait(420), f"still {h.state} after 420 s: {h.notes}"
        assert h.state == "completed", f"{h.error} / {h.notes}"
        assert [a["failure"] for a in h.attempts] == ["walltime"], h.attempts
        assert h.decision.chosen.shape.walltime_s >= 180  # ran >= 60 s: at least twice that
        assert any("retried with walltime 60 s ->" in n for n in h.notes), h.notes
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
