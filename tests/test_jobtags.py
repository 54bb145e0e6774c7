"""Tagged jobs: the names, the shell functions and their outputs (no Slurm needed here; the
same functions run against the local clusters in the cloud path of the slurm suites)."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from federation.sites import jobtags
from federation.sites.jobwatch import TaggedJobs

TAG = "0a1b2c3d4e5f60718293"


def test_tags_are_safe_names_and_anything_else_is_refused() -> None:
    tag = jobtags.new_tag()
    assert jobtags.job_name(tag) == "fed." + tag and len(tag) == 20
    for bad in ("", "ABC12345", "a;rm -rf ~", "0123 4567", "x" * 8):
        with pytest.raises(ValueError, match="not a job tag"):
            jobtags.job_name(bad)


def test_squeue_output_is_read_per_tag_and_other_lines_ignored() -> None:
    out = (
        f"fed.{TAG}|4211|PENDING\n"
        "fed.ffffffffffffffffffff|4212|RUNNING\n"
        "parsl.block-0|4213|RUNNING\n"  # someone else's job
        "garbage line\n"
        "'fed.00000000000000000000|4214|COMPLETING'\n"
    )
    jobs = jobtags.parse_squeue(out)
    assert set(jobs) == {TAG, "f" * 20, "0" * 20}
    assert (jobs[TAG].job_id, jobs[TAG].state, jobs[TAG].started) == ("4211", "PENDING", False)
    assert jobs["f" * 20].started and jobs["0" * 20].started
    cmd = jobtags.squeue_command([TAG, "f" * 20, TAG])
    assert f"--name=fed.{TAG},fed.{'f' * 20}" in cmd and cmd.startswith("squeue --noheader")


def test_cancel_output_says_the_state_before() -> None:
    assert jobtags.parse_cancel("state:PENDING\n") == "PENDING"
    assert jobtags.parse_cancel("noise\nstate:\n") == ""
    assert jobtags.parse_cancel("scancel: error\n") is None


def _bash(script: str, home: Path, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        env={"HOME": str(home), "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_withdrawn_shell_task_stops_before_its_command(tmp_path: Path) -> None:
    cmd = jobtags.guarded_command("echo the-work", TAG)
    ran = _bash(cmd, tmp_path)
    assert ran.returncode == 0 and ran.stdout == "the-work\n"
    (tmp_path / jobtags.MARKER_DIR).mkdir(parents=True)
    (tmp_path / jobtags.MARKER_DIR / TAG).touch()
    stopped = _bash(cmd, tmp_path)
    assert stopped.returncode == 125 and stopped.stdout == ""
    assert "cancelled before it started" in stopped.stderr


def test_the_cancel_function_leaves_the_marker_and_cancels_only_a_pending_job(
    tmp_path: Path,
) -> None:
    """Run with stand-in ``squeue``/``scancel`` on PATH that record their arguments (the
    real ones are exercised on the local clusters by the cloud path's slurm tests)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name, body in (("squeue", 'echo "$STATE"'), ("scancel", "")):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{body}\n')
        exe.chmod(0o755)
    for state, cancels in (("PENDING", True), ("RUNNING", False), ("", False)):
        log.write_text("")
        script = f"export STATE={state}\n" + jobtags.cancel_command(TAG)
        res = _bash(script, tmp_path, f"{bin_dir}:/usr/bin:/bin")
        assert res.returncode == 0, res.stderr
        assert jobtags.parse_cancel(res.stdout) == state
        assert (tmp_path / jobtags.MARKER_DIR / TAG).exists()
        calls = log.read_text().splitlines()
        assert calls[0] == f"squeue --noheader --name=fed.{TAG} --format=%T"
        assert (f"scancel --state=PENDING --name=fed.{TAG}" in calls) is cancels, calls


class _Site:
    """The login node's answers to the two shell functions, as a queue the test sets."""

    def __init__(self) -> None:
        self.queue: dict[str, tuple[str, str]] = {}  # tag -> (job id, state)
        self.commands: list[str] = []

    def run(self, command: str) -> Future[Any]:
        self.commands.append(command)
        fut: Future[Any] = Future()
        if command.startswith("squeue"):
            lines = [
                f"fed.{t}|{j}|{s}" for t, (j, s) in self.queue.items() if f"fed.{t}" in command
            ]
            fut.set_result(SimpleNamespace(returncode=0, stdout="\n".join(lines), stderr=""))
        else:
            tag = command.split("--name=fed.")[1].split()[0]
            before = self.queue.get(tag, ("", ""))[1]
            fut.set_result(SimpleNamespace(returncode=0, stdout=f"state:{before}\n", stderr=""))
        return fut


def _task(task_id: str) -> Future[Any]:
    fut: Future[Any] = Future()
    fut.task_id = task_id  # type: ignore[attr-defined]
    return fut


def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


def test_a_start_is_reported_once_with_its_job_and_a_started_task_is_not_withdrawn() -> None:
    site = _Site()
    jobs = TaggedJobs("delta", site.run, check_s=0.05)
    seen: list[tuple[str, str | None]] = []
    jobs.on_started(lambda tid, job: seen.append((tid, job)))
    try:
        a, b = _task("task-a"), _task("task-b")
        jobs.track("a" * 20, a)
        jobs.track("b" * 20, b)
        site.queue = {"a" * 20: ("11", "PENDING"), "b" * 20: ("12", "PENDING")}
        _until(lambda: jobs.checks >= 2)
        assert seen == []
        site.queue["a" * 20] = ("11", "RUNNING")
        _until(lambda: seen == [("task-a", "11")])
        _until(lambda: jobs.checks >= 6)
        assert seen == [("task-a", "11")]  # once
        assert jobs.withdraw("task-a") is False  # it started: it runs to its end
        assert jobs.withdraw("task-b") is True  # pending: marker left, job cancelled
        assert any(c.startswith("mkdir -p") and "b" * 20 in c for c in site.commands)
        assert jobs.withdraw("task-b") is False  # once
        assert jobs.withdraw("no-such-task") is False
    finally:
        jobs.close()


def test_a_task_that_ended_unseen_is_looked_for_once_more() -> None:
    """A short task may start and end between two reads of squeue: its block lingers
    while idle, so one last look still names its job."""
    site = _Site()
    jobs = TaggedJobs("delta", site.run, check_s=30.0)  # no second round in this test
    seen: list[tuple[str, str | None]] = []
    jobs.on_started(lambda tid, job: seen.append((tid, job)))
    try:
        fut = _task("task-c")
        jobs.track("c" * 20, fut)
        time.sleep(0.2)
        assert jobs.checks == 0  # the first read waits an interval
        site.queue = {"c" * 20: ("13", "CANCELLED")}  # started, ended, released after idling
        fut.set_result(0)
        _until(lambda: seen == [("task-c", "13")])
        assert jobs.checks == 1
    finally:
        jobs.close()
