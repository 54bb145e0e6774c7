"""A task killed at its walltime is retried with a longer one, never beyond a partition's limit."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from inprocess import inprocess_coordinator

from federation.core.envelope import ResourceEnvelope
from federation.core.failures import Failure
from federation.core.tasks import PythonTask
from federation.runtime import retries
from federation.runtime.provenance import Accounting, JobAccounting
from federation.runtime.retries import grown_walltime_s

SITE = "local"
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
        assert f"needs more than {longest} s" in (h.error or "")
        assert "checkpoint" in (h.error or "")
        assert "task.retried" not in [e.kind for e in coord.history(h.id)]
    finally:
        coord.close()


def test_the_retry_is_capped_at_the_longest_partition_limit() -> None:
    _runs.clear()
    coord = inprocess_coordinator(("local",))
    longest = max(p.max_walltime_s for p in coord.backends["local"].spec.partitions)
    try:
        env = ResourceEnvelope(walltime_s=longest - 600)
        h = coord.submit_task(PythonTask(_killed_once), env)
        assert coord.result_value(h, timeout_s=30) == 7
        assert h.decision.chosen.shape.walltime_s == longest
        assert any(f"{longest - 600} s -> {longest} s" in n for n in h.notes), h.notes
    finally:
        coord.close()


def test_a_task_killed_again_once_the_budget_is_spent_fails_saying_so() -> None:
    coord = inprocess_coordinator(("local",))
    try:
        h = coord.submit_task(PythonTask(_always_killed), ResourceEnvelope(walltime_s=600))
        assert h.wait(30) and h.state == "failed"
        assert [a["failure"] for a in h.attempts] == ["walltime"]
        assert h.shape.walltime_s == 1200  # the retry had grown it
        assert "retry budget" in (h.error or "") and "longer walltime_s" in (h.error or "")
    finally:
        coord.close()


def _acct(state: str, elapsed_s: int | None) -> Accounting:
    now = datetime.now(UTC)
    job = JobAccounting(job_id="77", state=state, elapsed_s=elapsed_s)
    return Accounting(site="local", jobs=(job,), fetched_at=now)


@pytest.mark.parametrize(
    ("cls", "state", "want_cls", "want_ran"),
    [
        ("endpoint_lost", "TIMEOUT", "walltime", 65.0),  # the engine's word for a killed job
        ("endpoint_lost", "NODE_FAIL", "endpoint_lost", None),  # really lost: unchanged
        ("walltime", "TIMEOUT", "walltime", 65.0),  # its elapsed time is what it ran
    ],
)
def test_sacct_tells_a_job_killed_at_its_limit_and_how_long_it_ran(
    monkeypatch: pytest.MonkeyPatch, cls: str, state: str, want_cls: str, want_ran: float | None
) -> None:
    monkeypatch.setattr(retries, "fetch_accounting", lambda *a, **k: _acct(state, 65))
    r = retries.Retries(SimpleNamespace(backends={}), None, None, None)  # type: ignore[arg-type]
    h = SimpleNamespace(site="local", slurm_job_ids=("77",), notes=[])
    failure = Failure(cls=cls, retryable=True, message="ManagerLost")  # type: ignore[arg-type]
    got, ran = r.timed_out(h, failure)  # type: ignore[arg-type]
    assert (got.cls, ran) == (want_cls, want_ran)
    if cls != want_cls:
        assert any("TIMEOUT after 65 s" in n for n in h.notes)


@pytest.mark.parametrize(("state", "retried"), [("TIMEOUT", True), ("FAILED", False)])
def test_a_command_killed_by_a_signal_is_retried_only_when_sacct_says_timeout(
    monkeypatch: pytest.MonkeyPatch, state: str, retried: bool
) -> None:
    """Slurm SIGTERMs a job's processes at its limit and the worker may still report the
    command's exit (-15): that is a walltime kill only if accounting says TIMEOUT."""
    monkeypatch.setattr(retries, "fetch_accounting", lambda *a, **k: _acct(state, 70))
    failed: list[str] = []
    life = SimpleNamespace(fail=lambda h, message, tb, **k: failed.append(message))
    r = retries.Retries(SimpleNamespace(backends={}), None, life, None)  # type: ignore[arg-type]
    seen: list[tuple[str, float | None]] = []
    monkeypatch.setattr(
        r, "retry", lambda h, failure, tb, ran_s=None: seen.append((failure.cls, ran_s)) or True
    )
    h = SimpleNamespace(
        id="t1", site="local", slurm_job_ids=("77",), notes=[], task=object(), attempts=[]
    )
    r.judge_signalled(h, "command exited with -15", "", None)  # type: ignore[arg-type]
    if retried:
        assert seen == [("walltime", 70.0)] and failed == []
        assert any("TIMEOUT after 70 s" in n and "exited with -15" in n for n in h.notes)
    else:
        assert seen == [] and failed == ["command exited with -15"]


def _sacct(fed: Any, job: str) -> dict[str, str]:
    """State, Timelimit and Elapsed of one job on the local site, as ``sacct`` has them."""
    fields = ("State", "Timelimit", "ElapsedRaw")
    row: dict[str, str] | None = None
    for _ in range(30):  # slurmdbd is updated asynchronously: its first row can be stale
        out = fed.run(SITE, ["sacct", "-X", "-n", "-P", "-j", job, "-o", ",".join(fields)])
        lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
        if lines:
            row = dict(zip(fields, lines[-1].split("|"), strict=True))
            if row["State"] != "PENDING" and row["Timelimit"]:  # the job ran: its record is in
                return row
        time.sleep(1)
    if row is not None:
        return row  # the test's own assertions say what is wrong with it
    raise AssertionError(f"sacct does not know job {job}")


@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_a_real_job_killed_at_its_limit_is_retried_longer_and_completes(
    local_federation: Any, tmp_path: Path
) -> None:
    """On the local Slurm cluster: a shell task that needs 100 s, given a 1-minute limit,
    is killed by Slurm at its limit (the engine then reports its worker pool lost); sacct
    says TIMEOUT, and the retry, on the same site, asks for twice what it ran and
    completes. (Slurm enforces limits on a 30-s timer plus KillWait=5 s, so a job may run
    up to ~95 s: a shorter sleep could finish before the kill.) The first run leaves a mark, so
    the retry, whose longer limit is what is checked, ends at once instead of sleeping again."""
    from federation.core.tasks import ShellTask
    from federation.deploy.local import LocalSites

    local = LocalSites(home=local_federation.home, sites=[SITE])
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    mark = tmp_path / "first-run"
    t0 = time.monotonic()
    try:
        h = coord.submit_task(
            ShellTask(command=f"[ -e {mark} ] || {{ touch {mark}; sleep 100; }}; echo slept"),
            ResourceEnvelope(sites=(SITE,), walltime_s=60),
        )
        assert h.wait(780), f"still {h.state} after 780 s: {h.notes}"
        took = time.monotonic() - t0
        assert h.state == "completed", f"{h.error} / {h.notes}"
        assert h.manifest().stdout.strip() == "slept" and mark.exists()
        assert [a["failure"] for a in h.attempts] == ["walltime"], h.attempts
        assert h.site == SITE and h.attempts[0]["site"] == SITE
        first, second = h.slurm_job_ids
        killed, retried = _sacct(local_federation, first), _sacct(local_federation, second)
        assert killed["State"].startswith("TIMEOUT") and killed["Timelimit"] == "00:01:00"
        ran = int(killed["ElapsedRaw"])
        new = h.decision.chosen.shape.walltime_s
        assert new == grown_walltime_s(60, ran, 3600) or new >= 2 * ran, (new, ran)
        # the retry's job is the engine's worker block: released once idle, not killed
        assert new >= 120 and not retried["State"].startswith("TIMEOUT"), retried
        h_, m_ = divmod(new // 60, 60)
        assert retried["Timelimit"] == f"{h_:02d}:{m_:02d}:00", retried
        assert any(f"retried with walltime 60 s -> {new} s" in n for n in h.notes), h.notes
        print(
            f"\nkilled job {first}: {killed}; retry job {second}: {retried}; "
            f"walltime 60 -> {new} s; task took {took:.0f} s; notes: {h.notes}"
        )
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
