"""The accountant (issue 33): reads answer from what is known; accounting (sacct) is read in
the background, one request per site per look, and ``task.accounted`` says when it is in.

The first tests run on in-process sites whose login node answers ``sacct`` from a script
and counts each request (that seam is ours: the ``FunctionSite`` protocol). The last one
runs on the real local federation and counts what the stand-in Globus Compute service
accepted for each site."""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import SiteSpec, load_sites
from federation.core.tasks import PythonTask
from federation.runtime.handles import TaskHandle
from federation.runtime.store import Store
from functions.accounting import sacct_jobs
from functions.workloads import report_allocation, square

HEAD = "JobID|JobName|State|Partition|Submit|Start|End|Elapsed|NodeList|AllocTRES|ExitCode\n"

Answer = Callable[[int, list[str]], dict[str, Any]]
"""(how many requests the site answered before, the job ids asked) -> sacct's raw output."""


def sacct_out(ids: list[str], ended: bool = True) -> dict[str, Any]:
    end, state = ("2026-01-05T10:00:09", "COMPLETED") if ended else ("Unknown", "RUNNING")
    rows = [
        f"{j}|parsl.block-0|{state}|cpu|2026-01-05T10:00:00|2026-01-05T10:00:02|{end}|"
        f"00:00:07|n01|cpu=1|0:0\n"
        for j in ids
    ]
    return {"hostname": "login1", "utc_offset_s": 0, "rc": 0, "stdout": HEAD + "".join(rows)}


def complete(_n: int, ids: list[str]) -> dict[str, Any]:
    return sacct_out(ids)


class _LoginNode:
    """The site's login node as an executor: runs ``sacct_jobs`` from a script, counted."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def submit(self, fn: Any, ids: list[str]) -> Future[dict[str, Any]]:
        assert fn is sacct_jobs
        with self.lock:
            n = len(self.calls)
            self.calls.append(list(ids))
        fut: Future[dict[str, Any]] = Future()
        fut.set_result(self.answer(n, list(ids)))
        return fut


class SacctSite(ThreadSite):
    """An in-process site that can run functions on its login node (``FunctionSite``)."""

    def __init__(
        self, spec: SiteSpec, answer: Answer = complete, gate: threading.Event | None = None
    ) -> None:
        super().__init__(spec, gate)
        self.login = _LoginNode(answer)

    def executor(self, uec: dict[str, Any]) -> _LoginNode:
        assert uec == {"profile": "probe"}
        return self.login


def _federation(
    path: Path,
    names: tuple[str, ...],
    answer: Answer = complete,
    gate: threading.Event | None = None,
) -> tuple[FixedCoordinator, dict[str, SacctSite]]:
    sites = {s.name: SacctSite(s, answer, gate) for s in load_sites(list(names))}
    c = FixedCoordinator(list(sites.values()), store=Store(path))
    for s in sites.values():
        s.coord = c
    return c, sites


@pytest.fixture
def two_sites(tmp_path: Path) -> Iterator[tuple[FixedCoordinator, dict[str, SacctSite]]]:
    c, sites = _federation(tmp_path / "coordinator.db", ("local", "delta"), gate=threading.Event())
    c.accountant.settle_s = 3600.0  # no look until the test says so
    c.accountant.look_s = 0.05
    try:
        yield c, sites
    finally:
        c.close()


def _run(c: FixedCoordinator, site: str, i: int) -> TaskHandle:
    return c.submit_task(PythonTask(square, (i,)), ResourceEnvelope(sites=(site,), walltime_s=300))


def test_reads_ship_nothing_and_one_look_asks_each_site_once(
    two_sites: tuple[FixedCoordinator, dict[str, SacctSite]],
) -> None:
    c, sites = two_sites
    handles = [_run(c, site, i) for i, site in enumerate(("local", "delta") * 3)]
    assert sites["local"].gate is not None
    sites["local"].gate.set()  # the same event holds both sites' tasks: all run now
    for h in handles:
        assert h.wait(30)
    reads = []
    for h in handles * 5:
        t0 = time.perf_counter()
        r = c.get_result(h)
        reads.append(time.perf_counter() - t0)
        assert r.status == "completed" and r.slurm_job_id
    assert all(not s.login.calls for s in sites.values()), "a read asked a site"
    assert max(reads) < 0.5, reads
    # a waiter wakes when its task ends; the accountant hears of the end just after
    deadline = time.monotonic() + 10
    while c.accountant.pending() < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.accountant.pending() == 6
    c.accountant.settle_s = 0.0  # the look is due: one request per site, every job in it
    for h in handles:
        acct = c.accountant.wait(h, timeout_s=30)
        assert acct is not None and acct.complete and acct.error is None, acct
        assert [j.job_id for j in acct.jobs] == [h.slurm_job_id]
        assert acct.jobs[0].state == "completed" and acct.jobs[0].queue_wait_s == 2.0
        back = c.task(h.id)  # released: read back from the store
        assert back is not None and back is not h and back.accounting == acct
        assert c.get_result(h.id).accounting == acct
        (ev,) = [e for e in c.history(h.id) if e.kind == "task.accounted"]
        assert ev.detail["slurm_job_ids"] == [h.slurm_job_id] and ev.detail["complete"]
        assert ev.site == h.site and ev.detail["asks"] == 1
    for name, s in sites.items():
        mine = sorted(str(h.slurm_job_id) for h in handles if h.site == name)
        assert [sorted(call) for call in s.login.calls] == [mine], (name, s.login.calls)
        assert c.accountant.requests[name] == 1
    assert sorted(look.site for look in c.accountant.looks) == ["delta", "local"]
    assert c.accountant.pending() == 0


def test_incomplete_accounting_is_asked_again_then_completes(tmp_path: Path) -> None:
    def slurmdbd_catching_up(n: int, ids: list[str]) -> dict[str, Any]:
        return sacct_out(ids, ended=n >= 2)

    c, sites = _federation(tmp_path / "c.db", ("local",), slurmdbd_catching_up)
    c.accountant.settle_s, c.accountant.look_s = 0.0, 0.05
    try:
        h = _run(c, "local", 3)
        acct = c.accountant.wait(h, timeout_s=30)
        assert acct is not None and acct.complete
        assert len(sites["local"].login.calls) == 3
        (ev,) = [e for e in c.history(h.id) if e.kind == "task.accounted"]
        assert ev.detail["asks"] == 3 and ev.detail["complete"]
        looks = [look.at for look in c.accountant.looks]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(looks)]
        assert all(g >= 0.04 for g in gaps), gaps  # the looks at a site are look_s apart
    finally:
        c.close()


def test_an_error_keeps_what_was_found_and_the_asks_are_bounded(tmp_path: Path) -> None:
    def then_down(n: int, ids: list[str]) -> dict[str, Any]:
        return sacct_out(ids, ended=False) if n == 0 else {"error": "slurmdbd is down"}

    c, sites = _federation(tmp_path / "c.db", ("local",), then_down)
    c.accountant.settle_s, c.accountant.look_s, c.accountant.max_asks = 0.0, 0.05, 3
    try:
        h = _run(c, "local", 4)
        acct = c.accountant.wait(h, timeout_s=30)
        # given up after 3 asks: the record the first look found is kept over the errors
        assert acct is not None and not acct.complete and acct.error is None
        assert [j.job_id for j in acct.jobs] == [h.slurm_job_id] and acct.jobs[0].end_time is None
        assert len(sites["local"].login.calls) == 3
        (ev,) = [e for e in c.history(h.id) if e.kind == "task.accounted"]
        assert ev.detail == {
            "slurm_job_ids": [h.slurm_job_id],
            "states": {h.slurm_job_id: "running"},
            "complete": False,
            "asks": 3,
        }
        assert c.get_result(h.id).accounting == acct
    finally:
        c.close()


def test_a_task_that_never_ran_is_not_asked_about(tmp_path: Path) -> None:
    gate = threading.Event()
    c, sites = _federation(tmp_path / "c.db", ("local",), gate=gate)
    c.accountant.settle_s = 0.0
    try:
        h = _run(c, "local", 5)
        assert c.cancel(h)  # still queued: it never ran in a Slurm job
        assert c.accountant.wait(h, timeout_s=30) is None
        assert c.accountant.pending() == 0 and not sites["local"].login.calls
        assert [e.kind for e in c.history(h.id)] == ["task.queued", "task.failed"]
    finally:
        c.close()


def test_a_restart_asks_for_what_ended_without_accounting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "coordinator.db"
    first, _ = _federation(path, ("local", "delta"))
    first.accountant.settle_s = 3600.0
    handles = [_run(first, site, i) for i, site in enumerate(("local", "delta", "local"))]
    for h in handles:
        assert h.wait(30)
    first.close()  # before any look: the store has no accounting for them
    assert first.accountant._thread is not None and not first.accountant._thread.is_alive()
    monkeypatch.setenv("FEDERATION_ACCOUNTING_SETTLE_S", "0")
    second, sites = _federation(path, ("local", "delta"))  # queues them as it is built
    try:
        for h in handles:
            acct = second.accountant.wait(h.id, timeout_s=30)
            assert acct is not None and acct.complete
            assert [j.job_id for j in acct.jobs] == [h.slurm_job_id]
            assert second.get_result(h.id).accounting == acct
        assert [len(sites[n].login.calls) for n in ("local", "delta")] == [1, 1]
        assert sorted(sites["local"].login.calls[0]) == sorted(
            str(h.slurm_job_id) for h in handles if h.site == "local"
        )
    finally:
        with caplog.at_level(logging.DEBUG, logger="federation.runtime.accounting"):
            second.close()
    assert second.accountant._thread is not None and not second.accountant._thread.is_alive()
    assert second.accountant.pending() == 0
    assert [r for r in caplog.records if r.name == "federation.runtime.accounting"] == []


# --- on the real local federation -----------------------------------------------------------
def _shipped(local: Any, function: str | None = None) -> dict[str, int]:
    """What the stand-in Globus Compute service accepted per site (``function``: only it)."""
    svc = local.service
    assert svc is not None
    return {
        ep.site: sum(n for f, n in ep.shipped.items() if function is None or f == function)
        for ep in list(svc._endpoints.values())
    }


@pytest.mark.slurm
def test_reads_are_fast_and_accounting_comes_per_site_per_look(local: Any, tmp_path: Path) -> None:
    c = local.connect(
        durable=True, store_path=tmp_path / "coordinator.db", telemetry=False, probe_timeout_s=60
    )
    c.accountant.settle_s = 3600.0  # no look until every task ended: one look per site
    try:
        env = {
            s: ResourceEnvelope(sites=(s,), cpus_min=1, mem_gb_min=1, walltime_s=300)
            for s in ("local", "vista")
        }
        handles = [
            c.submit_task(PythonTask(report_allocation, (0.2,)), env[s])
            for s in ("local", "vista") * 3
        ]
        for h in handles:
            r = c.get_result(h, timeout_s=300)
            assert r.status == "completed", (r.error, r.remote_traceback)
        until_s = time.monotonic() + 60  # a job id a start report brings after the end
        while not all(h.slurm_job_id for h in handles) and time.monotonic() < until_s:
            c.events.await_event(c.events.last_seq, timeout_s=1)
        shipped = _shipped(local)
        reads = []
        for h in handles * 5:
            t0 = time.perf_counter()
            r = c.get_result(h)
            reads.append(time.perf_counter() - t0)
            assert r.value["slurm_job_id"] == r.slurm_job_id
        assert _shipped(local) == shipped, "a read shipped a function"
        assert sum(reads) < 3.0 and statistics.quantiles(reads, n=20)[-1] < 0.05, reads
        sacct_before = _shipped(local, "sacct_jobs")
        c.accountant.settle_s = 0.0
        for h in handles:
            acct = c.accountant.wait(h, timeout_s=240)
            assert acct is not None and acct.error is None, acct
            (job,) = acct.jobs
            assert job.job_id == h.slurm_job_id and job.partition == h.partition
            assert job.start_time is not None and job.submit_time is not None
            assert c.get_result(h.id).accounting == acct
            (ev,) = [e for e in c.history(h.id) if e.kind == "task.accounted"]
            assert ev.detail["slurm_job_ids"] == [h.slurm_job_id]
        sacct = _shipped(local, "sacct_jobs")
        looks = list(c.accountant.looks)
        for site in ("local", "vista"):
            mine = [look for look in looks if look.site == site]
            # one request per look, counted where the service accepted it
            sent = sacct[site] - sacct_before.get(site, 0)
            assert sent == len(mine) == c.accountant.requests[site], (site, sent, mine)
            first = {h.id for h in handles if h.site == site}
            assert set(mine[0].task_ids) == first  # every task that ended, in the first look
            at = [look.at for look in mine]
            gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(at)]
            assert all(g >= c.accountant.look_s - 0.01 for g in gaps), gaps
    finally:
        c.close()
