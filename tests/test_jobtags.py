"""Claims: the tags, the shell functions and their outputs, run by a real bash (Slurm's
``squeue``/``scontrol`` are small stand-ins on PATH that record their arguments here; the
same functions run against the local clusters in the cloud path of the slurm suites)."""

from __future__ import annotations

import re
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
SHAPE = "a2fa7be1d7bc"


def test_tags_and_shape_names_are_safe_and_anything_else_is_refused() -> None:
    tag = jobtags.new_tag()
    assert len(tag) == 20 and jobtags.claim_path(tag).endswith("/claims/" + tag)
    assert (
        jobtags.tag_for("t1", 1, None)
        == jobtags.tag_for("t1", 1, None)
        != jobtags.tag_for("t1", 2, None)
    )
    for bad in ("", "ABC12345", "a;rm -rf ~", "0123 4567", "x" * 8):
        with pytest.raises(ValueError, match="not a job tag"):
            jobtags.claim_path(bad)
        with pytest.raises(ValueError, match="not a shape name"):
            jobtags.job_name(bad)
    uec = {"profile": "task", "partition": "cpu", "cpus": 1}
    assert jobtags.shape_tag(uec) == jobtags.shape_tag({**uec, "job_tag": "anything"})
    assert jobtags.shape_tag(uec) != jobtags.shape_tag({**uec, "cpus": 2})


def _bash(
    script: str, home: Path, path: str = "/usr/bin:/bin", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        env={"HOME": str(home), "PATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_shell_task_claims_its_tag_once_and_a_second_claim_stops_before_the_command(
    tmp_path: Path,
) -> None:
    cmd = jobtags.guarded_command("echo the-work", TAG)
    ids = {"SLURM_JOB_ID": "4211", "GC_TASK_UUID": "9e1c"}
    ran = _bash(cmd, tmp_path, env=ids)
    assert ran.returncode == 0 and ran.stdout == "the-work\n"
    assert (tmp_path / jobtags.CLAIM_DIR / TAG).read_text() == "4211 9e1c\n"
    again = _bash(cmd, tmp_path, env=ids)  # the same tag twice: the second never runs
    assert again.returncode == jobtags.WITHDRAWN_EXIT and again.stdout == ""
    assert "withdrawn before it started" in again.stderr


def _fake_slurm(tmp_path: Path, queue: str) -> tuple[str, Path]:
    """``squeue`` prints ``queue`` (filtered by --states=PENDING when asked); ``scontrol``
    records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls"
    log.write_text("")
    (tmp_path / "queue").write_text(queue)
    squeue = (
        f'#!/bin/sh\necho "squeue $*" >> {log}\n'
        f'case "$*" in *--states=PENDING*--format=%r*) grep " PENDING " {tmp_path}/queue '
        "| awk '{print $3}';;\n"
        f"*--states=PENDING*) grep ' PENDING ' {tmp_path}/queue | awk '{{print $1, $3}}';;\n"
        f"*) cat {tmp_path}/queue;; esac\n"
    )
    (bin_dir / "squeue").write_text(squeue)
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "scontrol $*" >> {log}\n')
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin", log


def test_a_withdrawal_that_wins_holds_the_shapes_pending_blocks_beyond_the_waiting_work(
    tmp_path: Path,
) -> None:
    queue = "11 RUNNING None\n12 PENDING Priority\n13 PENDING Resources\n14 PENDING JobHeldUser\n"
    path, log = _fake_slurm(tmp_path, queue)
    res = _bash(jobtags.withdraw_command(TAG, SHAPE, waiting=1), tmp_path, path)
    assert res.returncode == 0, res.stderr
    won, claim, held = jobtags.parse_withdraw(TAG, res.stdout)
    assert (won, claim, held) == (True, None, 1)  # two unheld pending, one still needed
    assert (tmp_path / jobtags.CLAIM_DIR / TAG).read_text() == "withdrawn\n"
    assert "scontrol uhold 13" in log.read_text().splitlines()  # the newest one
    # the task, arriving later, finds the claim taken and never runs
    late = _bash(jobtags.guarded_command("echo the-work", TAG), tmp_path)
    assert late.returncode == jobtags.WITHDRAWN_EXIT and late.stdout == ""


def test_a_withdrawal_that_loses_names_the_job_that_claimed_first(tmp_path: Path) -> None:
    path, log = _fake_slurm(tmp_path, "12 PENDING Priority\n")
    _bash(jobtags.guarded_command("true", TAG), tmp_path, env={"SLURM_JOB_ID": "4212"})
    res = _bash(jobtags.withdraw_command(TAG, SHAPE, waiting=0), tmp_path, path)
    won, claim, held = jobtags.parse_withdraw(TAG, res.stdout)
    assert not won and held == 0
    assert claim is not None and claim.job_id == "4212" and not claim.withdrawn
    assert "scontrol" not in log.read_text()  # nothing held: the copy runs


def test_one_look_lists_the_claims_and_releases_held_blocks_the_shape_needs_again(
    tmp_path: Path,
) -> None:
    path, log = _fake_slurm(tmp_path, "21 PENDING JobHeldUser\n22 PENDING JobHeldUser\n")
    other = "f" * 20
    _bash(jobtags.guarded_command("true", TAG), tmp_path, env={"SLURM_JOB_ID": "4213"})
    _bash(jobtags.withdraw_command(other), tmp_path, path)
    res = _bash(jobtags.look_command([TAG, other, "e" * 20], {SHAPE: 1}), tmp_path, path)
    assert res.returncode == 0, res.stderr
    look = jobtags.parse_look(res.stdout)
    assert set(look.claims) == {TAG, other}  # the third has not claimed yet
    assert look.claims[TAG].job_id == "4213" and look.claims[other].withdrawn
    assert "scontrol release 21" in log.read_text().splitlines()  # one task waits: one block
    assert look.shapes[SHAPE].pending == 0 and look.shapes[SHAPE].running == 0


class _Site:
    """The login node's answers to the shell functions, from claims the test sets."""

    def __init__(self) -> None:
        self.claims: dict[str, str] = {}  # tag -> claim content
        self.commands: list[str] = []

    def run(self, command: str) -> Future[Any]:
        self.commands.append(command)
        fut: Future[Any] = Future()
        if "set -C; echo withdrawn" in command:
            tag = command.split('claims"/')[1].split(")")[0]
            if tag in self.claims:
                out = f"lost|{self.claims[tag]}\n"
            else:
                self.claims[tag] = "withdrawn"
                out = "won\n"
        else:
            out = "".join(f"claim|{t}|{c}\n" for t, c in self.claims.items() if t in command)
            # a shape's jobs, as the script counts them: none pending, held or running
            out += "".join(f"shape|{s}|0|0|0\n" for s in re.findall(r"shape\|(\w+)\|", command))
        fut.set_result(SimpleNamespace(returncode=0, stdout=out, stderr=""))
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
        jobs.track("a" * 20, a, SHAPE)
        jobs.track("b" * 20, b, SHAPE)
        _until(lambda: jobs.checks >= 2)
        assert seen == []
        site.claims["a" * 20] = "11 task-a"
        _until(lambda: seen == [("task-a", "11")])
        _until(lambda: jobs.checks >= 6)
        assert seen == [("task-a", "11")]  # once
        assert jobs.withdraw("task-a") is False  # it started: it runs to its end
        assert jobs.withdraw("task-b") is True  # not started: the withdrawal claims first
        _until(lambda: jobs.withdrawals["won"] == 1)
        assert site.claims["b" * 20] == "withdrawn"
        assert jobs.withdraw("task-b") is False  # once
        assert jobs.withdraw("no-such-task") is False
    finally:
        jobs.close()


def test_a_task_that_claimed_before_its_acknowledgement_is_known_by_its_claim() -> None:
    """After a restart, or before the SDK set the future's id, the claim names the task."""
    site = _Site()
    jobs = TaggedJobs("delta", site.run, check_s=0.05)
    seen: list[tuple[str, str | None]] = []
    jobs.on_started(lambda tid, job: seen.append((tid, job)))
    try:
        fut: Future[Any] = Future()  # no task_id yet
        jobs.track("c" * 20, fut, SHAPE)
        site.claims["c" * 20] = "13 gc-task-c"
        _until(lambda: seen == [("gc-task-c", "13")])
        assert jobs.claims(["c" * 20, "d" * 20])["c" * 20].compute_task_id == "gc-task-c"
    finally:
        jobs.close()


def test_a_look_holds_the_blocks_an_engine_asks_beyond_the_waiting_work(tmp_path: Path) -> None:
    """The engine still counts a withdrawn copy outstanding and may ask for a block for it
    after the withdrawal: the next look holds the newest unheld pending blocks beyond the
    work waiting, so none of them starts."""
    queue = "31 RUNNING None\n32 PENDING Priority\n33 PENDING Resources\n34 PENDING JobHeldUser\n"
    path, log = _fake_slurm(tmp_path, queue)
    res = _bash(jobtags.look_command([], {SHAPE: 1}), tmp_path, path)
    assert res.returncode == 0, res.stderr
    calls = log.read_text().splitlines()
    assert "scontrol uhold 33" in calls and not any("release" in c for c in calls)
    path, log = _fake_slurm(tmp_path, queue)
    _bash(jobtags.look_command([], {SHAPE: 0}), tmp_path, path)  # nothing waits: hold both
    assert "scontrol uhold 32 33" in log.read_text().splitlines()
    path, log = _fake_slurm(tmp_path, queue)
    _bash(jobtags.look_command([], {SHAPE: 2}), tmp_path, path)  # as many as wait: as is
    assert "scontrol" not in log.read_text()


def test_a_withdrawn_copy_keeps_its_shape_looked_at_until_its_process_lets_it_go() -> None:
    """Where the site reports starts itself (``watch_starts=False``), looks run only for
    shapes with withdrawn copies still outstanding, and stop once those end; a task the
    site reports started cannot be withdrawn; a task not acknowledged yet is withdrawn by
    its future."""
    site = _Site()
    jobs = TaggedJobs("delta", site.run, check_s=0.05, watch_starts=False)
    try:
        a, b, c = _task("task-a"), _task("task-b"), Future()
        jobs.track("a" * 20, a, SHAPE)
        jobs.track("b" * 20, b, SHAPE)
        jobs.track("c" * 20, c, SHAPE)
        time.sleep(0.3)
        assert jobs.checks == 0  # no claim is read for starts
        jobs.mark_started("task-a", "41")
        assert jobs.withdraw("task-a") is False
        assert jobs.withdraw_future(c) is True  # no id yet: known by its future
        _until(lambda: jobs.withdrawals["won"] == 1 and jobs.checks >= 2)
        looks = [x for x in site.commands if "shape|" in x]
        assert looks and f"shape|{SHAPE}|" in looks[-1]
        assert "need=$(( 1 - p ))" in looks[-1]  # task-b still waits for a block
        c.set_exception(RuntimeError("its user endpoint process ended"))
        b.set_result("done")
        a.set_result("done")
        n = jobs.checks
        time.sleep(0.3)
        assert jobs.checks <= n + 1  # the shape's last look, then none
    finally:
        jobs.close()


def test_in_flight_shipments_are_settled_by_their_claims(tmp_path: Path) -> None:
    """After a restart, one look per site settles the shipments that were in flight: one a
    task claimed is that task (its Globus Compute id, for re-attaching); one nobody claimed
    is claimed now, so whatever of it reached the site never runs, and it is shipped again
    under the next generation; generations an earlier restart withdrew are skipped."""
    chain = {k: [jobtags.shipment_tag(k, 0, None, g) for g in range(3)] for k in ("a", "b", "c")}
    claims = tmp_path / jobtags.CLAIM_DIR
    claims.mkdir(parents=True)
    (claims / chain["b"][0]).write_text("withdrawn\n")  # an earlier restart withdrew it
    (claims / chain["b"][1]).write_text("4214 gc-b\n")  # its second shipment ran
    (claims / chain["c"][0]).write_text("withdrawn\n")
    res = _bash(
        jobtags.settle_command({"r0": chain["a"], "r1": chain["b"], "r2": chain["c"]}), tmp_path
    )
    assert res.returncode == 0, res.stderr
    got = jobtags.parse_settle(res.stdout)
    assert (got["r0"].kind, got["r0"].generation) == ("freed", 0)
    assert (got["r1"].kind, got["r1"].generation) == ("took", 1)
    assert got["r1"].claim is not None and got["r1"].claim.compute_task_id == "gc-b"
    assert (got["r2"].kind, got["r2"].generation) == ("freed", 1)
    # the freed shipments' tasks, arriving late, never run
    late = _bash(jobtags.guarded_command("echo the-work", chain["a"][0]), tmp_path)
    assert late.returncode == jobtags.WITHDRAWN_EXIT and late.stdout == ""
    assert jobtags.shipment_tag("a", 0, None, 0) != jobtags.shipment_tag("a", 0, 0, 0)
    with pytest.raises(ValueError):
        jobtags.settle_command({"r 0; rm -rf ~": chain["a"]})
