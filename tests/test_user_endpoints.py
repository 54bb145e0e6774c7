"""A site's endpoint runs one user endpoint process per (identity, config), as a real
multi-user Globus Compute endpoint (4.x) does.

The real endpoint's manager forks one user endpoint process (UEP) per distinct (identity,
``user_endpoint_config``); each holds its engine (whose interchange is a further process),
ends ``idle_heartbeats_soft`` heartbeats after its last task (the template says 10) and
shuts its engine down then, which cancels its blocks. These tests talk to a real endpoint
daemon (:mod:`federation.endpoint.daemon`) over its socket in a temporary run dir, no
Slurm: the ``probe`` profile runs on a LocalProvider, and the ``task`` profile's
SlurmProvider meets a fake ``sbatch``/``sacct``/``scancel`` that keep its block pending
and log what they were asked.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from globus_compute_common import messagepack
from globus_compute_common.messagepack.message_types import Result, Task

from federation.endpoint import protocol
from federation.endpoint.connection import EndpointConnection
from federation.endpoint.manager import EndpointDaemons
from federation.endpoint.uep_pool import IdleClock
from federation.sites.shipping import executor_serializer
from functions.workloads import square

SITE = "local"
PROBE = {"profile": "probe"}
SHAPE = {"profile": "task", "partition": "debug"}
"""A ``task``-profile config: a SlurmProvider engine, whose block the fake Slurm keeps
pending (its task stays queued)."""
FAKE_SLURM = {
    "sbatch": 'echo "Submitted batch job 4242"',
    "sacct": 'echo "4242 PENDING"',
    "scancel": "true",
}


def nap(seconds: float) -> float:
    """Sleeps on the worker (shipped by source)."""
    import time

    time.sleep(seconds)
    return seconds


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)
    return value


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Running (a zombie is not: PID 1 here does not reap the orphans it inherits)."""
    return _state(pid) not in (None, "Z", "X")


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                out.append(int(name))
    return out


class Endpoint:
    """A real endpoint daemon, talked to over its socket as the service talks to it."""

    def __init__(self, home: Path, period_s: float) -> None:
        self.daemons = EndpointDaemons(home)
        # the template's own idle limits (10 and 5760 beats), not the local federation's
        limits = {
            "FEDERATION_IDLE_HEARTBEATS_SOFT": "10",
            "FEDERATION_IDLE_HEARTBEATS_HARD": "5760",
        }
        self.pid = self.daemons.start(SITE, {protocol.HEARTBEAT_ENV: str(period_s), **limits})
        self.results: dict[str, tuple[Result, float]] = {}
        self.started: set[str] = set()
        self.heartbeats: list[protocol.Message] = []
        self.ser = executor_serializer()  # our functions travel by source
        self.conn = EndpointConnection(SITE, self.daemons.run_dir(SITE), self._event)
        self.conn.connect()

    def _event(self, msg: protocol.Message) -> None:
        if msg["op"] == "task.result":
            res = messagepack.unpack(protocol.unb64(msg["result"]))
            self.results[msg["task_id"]] = (res, time.monotonic())
        elif msg["op"] == "task.started":
            self.started.add(msg["task_id"])
        elif msg["op"] == "heartbeat":
            self.heartbeats.append(msg)

    def submit(
        self, fn: Callable[..., Any], *args: Any, config: dict[str, Any], identity: str | None
    ) -> str:
        tid = str(uuid.uuid4())
        ser = self.ser
        buf = ser.pack_buffers([ser.serialize(fn)]) + ser.pack_buffers(
            [ser.serialize(args), ser.serialize({})]
        )
        packed = messagepack.pack(Task(task_id=uuid.UUID(tid), task_buffer=buf))
        msg = {
            "op": "submit",
            "task_id": tid,
            "packed_task": protocol.b64(packed),
            "user_endpoint_config": config,
            "user_runtime": None,
        }
        if identity is not None:
            msg["identity"] = identity
        self.conn.request(msg)
        return tid

    def outcome(self, tid: str, timeout_s: float = 180) -> Result:
        # a first result waits on a process fork, its engine's interchange and a worker
        # pool: three Python start-ups, which took over 60 s on a loaded 2-core CI machine
        wait_for(lambda: tid in self.results, timeout_s, f"the result of {tid}")
        return self.results[tid][0]

    def result(self, tid: str, timeout_s: float = 180) -> Any:
        res = self.outcome(tid, timeout_s)
        assert not res.is_error, res.data
        return self.ser.deserialize(res.data)

    def ueps(self) -> list[dict[str, Any]]:
        ueps: list[dict[str, Any]] = self.conn.request({"op": "ping"})["user_endpoints"]
        return ueps

    def close(self) -> None:
        self.conn.close()
        self.daemons.stop(SITE)


def install_fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sbatch: str) -> Path:
    """``sbatch`` (running ``sbatch``), ``sacct``, ``scancel`` first on PATH, each logging
    its call; returns the log."""
    bindir, log = tmp_path / "fake-slurm", tmp_path / "fake-slurm.log"
    bindir.mkdir()
    for name, body in {**FAKE_SLURM, "sbatch": sbatch}.items():
        script = bindir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{body}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    log.touch()
    return log


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake Slurm that keeps every job pending; returns the log of its calls."""
    return install_fake_slurm(tmp_path, monkeypatch, FAKE_SLURM["sbatch"])


@pytest.fixture
def endpoint_factory(tmp_path: Path) -> Iterator[Callable[[float], Endpoint]]:
    made: list[Endpoint] = []

    def make(period_s: float) -> Endpoint:
        ep = Endpoint(tmp_path / "home", period_s)
        made.append(ep)
        return ep

    try:
        yield make
    finally:
        for ep in made:
            ep.close()


def test_one_process_per_identity_and_config(
    endpoint_factory: Callable[[float], Endpoint],
) -> None:
    ep = endpoint_factory(1.0)  # UEPs live 10 s after their last task: all seen together
    alice = [ep.submit(square, i, config=PROBE, identity="alice") for i in range(20)]
    bob = ep.submit(square, 21, config=PROBE, identity="bob")
    nobody = ep.submit(square, 22, config=PROBE, identity=None)
    assert [ep.result(t) for t in alice] == [i * i for i in range(20)]
    assert (ep.result(bob), ep.result(nobody)) == (441, 484)
    ueps = {u["identity"]: u for u in ep.ueps()}
    assert set(ueps) == {"alice", "bob", "anonymous"}  # 20 tasks of one key: one process
    assert ueps["alice"]["tasks"] == 20 and ueps["bob"]["tasks"] == 1
    pids = {u["pid"] for u in ueps.values()}
    assert len(pids) == 3 and ep.pid not in pids and all(alive(p) for p in pids)
    for u in ueps.values():  # the report: what each process is and what it costs
        assert (u["profile"], u["partition"], u["outstanding"]) == ("probe", None, 0)
        assert u["rss_mb"] > u["own_rss_mb"] > 10  # with its engine's interchange
        assert u["processes"] >= 2
        assert u["age_s"] >= u["idle_s"] >= 0
    # the heartbeat carries the same list
    beat = wait_for(
        lambda: next((b for b in reversed(ep.heartbeats) if b.get("user_endpoints")), None),
        5,
        "a heartbeat listing the user endpoint processes",
    )
    assert {u["pid"] for u in beat["user_endpoints"]} == pids
    assert beat["engines"] == 3 and beat["rss_mb"] > 0


def test_distinct_configs_get_distinct_processes_and_cancel_ends_one(
    endpoint_factory: Callable[[float], Endpoint], fake_slurm: Path
) -> None:
    ep = endpoint_factory(1.0)
    probe = ep.submit(square, 3, config=PROBE, identity="carol")
    shaped = ep.submit(square, 4, config=SHAPE, identity="carol")
    assert ep.result(probe) == 9
    wait_for(lambda: "sbatch" in fake_slurm.read_text(), 30, "the shaped task's block")
    ueps = {u["profile"]: u for u in ep.ueps()}
    assert set(ueps) == {"probe", "task"} and ueps["task"]["partition"] == "debug"
    assert ueps["probe"]["pid"] != ueps["task"]["pid"]
    assert ueps["task"]["outstanding"] == 1 and ueps["task"]["identity"] == "carol"
    # cancelling its only (queued) task ends that process; its engine cancels the block
    reply = ep.conn.request({"op": "cancel", "task_id": shaped})
    assert (reply["ok"], reply["reason"]) == (True, "cancelled")
    assert not alive(ueps["task"]["pid"])
    assert "scancel 4242" in fake_slurm.read_text()
    assert "task cancelled" in ep.outcome(shaped).data
    # the endpoint hears of the ended process from its own reaper, a moment later
    wait_for(
        lambda: [u["pid"] for u in ep.ueps()] == [ueps["probe"]["pid"]],
        10,
        "the ended process is gone from the endpoint's list",
    )


def test_a_process_ends_idle_heartbeats_soft_after_its_last_result(
    endpoint_factory: Callable[[float], Endpoint],
) -> None:
    period = 0.2
    ep = endpoint_factory(period)
    first = ep.submit(square, 6, config=PROBE, identity="dan")
    assert ep.result(first) == 36
    got_at = ep.results[first][1]
    (uep,) = ep.ueps()

    def ended() -> float | None:
        now = time.monotonic()
        live = [u for u in ep.ueps() if u["pid"] == uep["pid"] and u["state"] == "ready"]
        return None if live else now

    ended_at = wait_for(ended, 30, "the idle process ended")
    assert 10 * period - 0.1 <= ended_at - got_at <= 10 * period + 1.5, ended_at - got_at
    wait_for(lambda: not alive(uep["pid"]), 30, "the idle process exited")
    wait_for(lambda: not group_alive(uep["pid"]), 10, "its interchange ended with it")
    again = ep.submit(square, 7, config=PROBE, identity="dan")
    assert ep.result(again) == 49  # a fresh process took it
    (fresh,) = ep.ueps()
    assert fresh["pid"] != uep["pid"] and fresh["tasks"] == 1


def test_a_killed_process_fails_its_tasks_and_the_next_task_gets_a_new_one(
    endpoint_factory: Callable[[float], Endpoint],
) -> None:
    ep = endpoint_factory(1.0)
    slow = ep.submit(nap, 120, config=PROBE, identity="erin")
    wait_for(lambda: slow in ep.started, 180, "the long task started")
    (uep,) = ep.ueps()
    assert uep["outstanding"] == 1
    os.kill(uep["pid"], signal.SIGKILL)
    res = ep.outcome(slow, 15)
    assert res.is_error
    assert "died unexpectedly (killed by signal 9 (SIGKILL))" in res.data, res.data
    assert "identity erin, profile probe" in res.data
    wait_for(lambda: not group_alive(uep["pid"]), 10, "its interchange ended")
    after = ep.submit(square, 8, config=PROBE, identity="erin")
    assert ep.result(after) == 64
    (fresh,) = ep.ueps()
    assert fresh["pid"] != uep["pid"]


def test_processes_end_with_their_manager(
    endpoint_factory: Callable[[float], Endpoint], fake_slurm: Path
) -> None:
    # SIGTERM: every process's engine is shut down (the pending block is cancelled); the
    # probe's process lives 30 s after its task, so both are seen even on a loaded machine
    ep = endpoint_factory(3.0)
    assert ep.result(ep.submit(square, 2, config=PROBE, identity=None)) == 4
    ep.submit(square, 3, config=SHAPE, identity=None)
    wait_for(lambda: "sbatch" in fake_slurm.read_text(), 30, "the shaped task's block")
    pids = [u["pid"] for u in ep.ueps()]
    assert len(pids) == 2
    ep.close()
    assert not any(alive(p) or group_alive(p) for p in pids)
    assert "scancel 4242" in fake_slurm.read_text()
    # SIGKILL: the processes notice their pipe closed and shut down on their own
    ep = endpoint_factory(1.0)
    assert ep.result(ep.submit(square, 2, config=PROBE, identity=None)) == 4
    (uep,) = ep.ueps()
    os.kill(ep.pid, signal.SIGKILL)
    wait_for(lambda: not alive(uep["pid"]), 15, "the orphaned process ended")
    wait_for(lambda: not group_alive(uep["pid"]), 10, "with its interchange")


def test_an_engine_in_a_bad_state_ends_its_process(
    endpoint_factory: Callable[[float], Endpoint],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the real UEP's BadStateWatcher: an engine that cannot start blocks fails its
    tasks, and its process ends rather than take more."""
    install_fake_slurm(tmp_path, monkeypatch, 'echo "sbatch: error: no" >&2; exit 1')
    ep = endpoint_factory(1.0)
    doomed = ep.submit(square, 3, config=SHAPE, identity=None)
    res = ep.outcome(doomed)
    assert res.is_error and "Failed to start block" in res.data, res.data
    wait_for(lambda: not ep.ueps(), 30, "the process with the broken engine ended")
    log = (ep.daemons.run_dir(SITE) / "endpoint.log").read_text()
    assert "its engine is in a bad state" in log


def test_idle_clock_counts_as_the_real_user_endpoint() -> None:
    """``interchange.py``'s main loop: soft after N quiet beats with every result out,
    hard after M quiet beats with tasks outstanding, any movement restarts both."""
    clock = IdleClock(soft_limit=3, hard_limit=5)
    assert clock.beat(1, 0) is None  # a task arrived
    assert [clock.beat(1, 0) for _ in range(5)] == [None] * 5  # outstanding, quiet
    assert clock.beat(1, 0) == "hard"  # beat 6 > hard limit 5
    clock = IdleClock(soft_limit=3, hard_limit=5)
    assert [clock.beat(2, 1), clock.beat(2, 2)] == [None, None]  # moving
    assert [clock.beat(2, 2) for _ in range(3)] == [None, None, "soft"]
    always_on = IdleClock(soft_limit=0, hard_limit=5)
    assert all(always_on.beat(1, 1) is None for _ in range(20))
