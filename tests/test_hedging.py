"""Hedged copies in the live coordinator: the first copy to start wins, the others go.

In-process tests use :class:`GatedSite`, a site whose tasks start only when the test opens
its gate (one gate per site), so which copy starts first is the test's choice. The last
test runs the same race on the real local Slurm federation, against a full Delta queue.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from inprocess import FixedCoordinator
from slurm_scene import (
    BOTH_PATHS,
    active_jobs,
    fill_delta_cpu,
    held_blocks,
    queued_jobs,
    until,
    wait_until_quiet,
)

from federation.core.envelope import ResourceEnvelope, Shape
from federation.core.errors import FederationError
from federation.core.spec import SiteSpec, load_sites
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.placement.lateness import LateAdjusted
from federation.placement.policies import Policy, Watch, get_policy
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.runtime.handles import TaskHandle
from federation.runtime.store import Store
from federation.runtime.telemetry import Telemetry
from functions.workloads import report_allocation, square

_JOBS = itertools.count(5000)
ENV = ResourceEnvelope(sites=("local", "delta"), cpus_min=2, mem_gb_min=2, walltime_s=600)


@dataclass
class _Job:
    tid: str
    task: PythonTask
    fut: Future[Any]
    state: str = "pending"  # pending, running, cancelled, done
    slurm_job_id: str = field(default_factory=lambda: str(next(_JOBS)))
    thread: threading.Thread | None = None


class GatedSite:
    """A :class:`SiteBackend` whose tasks wait for ``go`` before they start.

    ``cancellable=False`` models a site where the copy had already started when the
    cancel arrived; ``submit_error`` makes submission raise; ``fail_before_start`` makes
    a task end in an error without ever reporting a start (a lost batch job; a text says
    how it was lost, e.g. a node failure, which is retryable); ``reports_start=False``
    runs tasks without reporting their starts (the result comes first). Results
    are ``{"site": name, "value": ...}`` so whose result the task kept is visible. Like a
    real endpoint, the site outlives a coordinator: ``reattach`` hands a new coordinator
    new futures for its tasks, and the old coordinator's futures never resolve.
    """

    def __init__(
        self,
        spec: SiteSpec,
        *,
        cancellable: bool = True,
        submit_error: str | None = None,
        fail_before_start: bool | str = False,
        reports_start: bool = True,
    ) -> None:
        self.spec = spec
        self.coord: Coordinator | None = None
        self.go = threading.Event()
        self.cancellable = cancellable
        self.submit_error = submit_error
        self.fail_before_start = fail_before_start
        self.reports_start = reports_start
        self.jobs: dict[str, _Job] = {}
        self.cancelled: list[str] = []
        self.refused: list[str] = []
        self.finished = threading.Event()
        """Set once a task's future was resolved (its callbacks have run)."""
        self._lock = threading.Lock()
        self._closed = False

    @property
    def name(self) -> str:
        return self.spec.name

    def probe(self) -> Future[dict[str, Any]]:
        f: Future[dict[str, Any]] = Future()
        f.set_exception(RuntimeError("in-process sites are not probed"))
        return f

    def submit(self, task: Any, shape: Shape) -> Future[Any]:
        if self.submit_error is not None:
            raise RuntimeError(self.submit_error)
        assert isinstance(task, PythonTask) and shape.site == self.name
        tid = str(uuid.uuid4())
        job = _Job(tid, task, self._future(tid))
        job.thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        with self._lock:
            self.jobs[tid] = job
        job.thread.start()
        return job.fut

    @staticmethod
    def _future(tid: str) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.task_id = tid  # type: ignore[attr-defined]
        return fut

    def _run(self, job: _Job) -> None:
        self.go.wait(60)
        with self._lock:
            if self._closed or job.state != "pending":
                return
            job.state = "running"
        fut = job.fut
        try:
            if self.fail_before_start:
                lost = self.fail_before_start
                why = lost if isinstance(lost, str) else "was lost before it started"
                raise RuntimeError(f"batch job on {self.name} {why}")
            assert self.coord is not None
            if self.reports_start:
                self.coord.notify_started(job.tid, job.slurm_job_id)
            value = job.task.fn(*job.task.args, **job.task.kwargs)
        except Exception as e:
            job.state = "done"
            fut.set_exception(e)
        else:
            job.state = "done"
            fut.set_result({"site": self.name, "value": value})
        self.finished.set()

    def reattach(self, task_ids: list[str]) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        with self._lock:
            for tid in task_ids:
                job = self.jobs.get(tid)
                if job is not None and job.state == "pending":
                    job.fut = out[tid] = self._future(tid)
        return out

    can_cancel = True

    def cancel(self, task_id: str) -> bool:
        with self._lock:
            job = self.jobs.get(task_id)
            if job is None or job.state != "pending" or not self.cancellable:
                self.refused.append(task_id)
                return False
            job.state = "cancelled"
            self.cancelled.append(task_id)
        return job.fut.cancel()

    def ended(self, tid: str) -> str:
        """Open the gate and wait for the task's thread to end; its final state."""
        self.go.set()
        job = self.jobs[tid]
        assert job.thread is not None
        job.thread.join(10)
        assert not job.thread.is_alive()
        return job.state

    def tid(self) -> str:
        """The id of the one task submitted here."""
        assert len(self.jobs) == 1, self.jobs
        return next(iter(self.jobs))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.go.set()


def _coordinator(sites: dict[str, GatedSite], store: Store | None = None) -> FixedCoordinator:
    coord = FixedCoordinator(
        list(sites.values()), policy="twin-hedge", telemetry=Telemetry(":memory:"), store=store
    )
    for s in sites.values():
        s.coord = coord
    return coord


def _sites(**options: dict[str, Any]) -> dict[str, GatedSite]:
    specs = {s.name: s for s in load_sites(["local", "delta"])}
    return {n: GatedSite(specs[n], **options.get(n, {})) for n in ("delta", "local")}


@pytest.fixture
def sites() -> Iterator[dict[str, GatedSite]]:
    s = _sites()
    yield s
    for site in s.values():
        site.close()


def _kinds(coord: Coordinator, h: TaskHandle) -> list[str]:
    return [e.kind for e in coord.history(h.id)]


def _once_each(events: list[Event]) -> None:
    """One queued, at most one started, and exactly one end for the task."""
    n = Counter(e.kind for e in events)
    assert n["task.queued"] == 1 and n["task.started"] <= 1, n
    assert n["task.completed"] + n["task.failed"] == 1, n


def test_twin_hedge_is_reachable_by_name_and_defaults_do_not_hedge() -> None:
    pol = get_policy("twin-hedge")
    assert isinstance(pol, Policy) and pol.name == "twin-hedge" and pol.max_copies == 2
    coord = FixedCoordinator([GatedSite(s) for s in load_sites(["local", "delta"])])
    try:
        assert coord.policy == "auto" and coord._placer().name == "auto"
        decision = coord.plan(ENV)
        assert decision.hedges == ()  # idle sites: no copy is worth its cost
        coord.policy = "twin-hedge"
        hedged = coord.plan(ENV)
        assert [c.site for c in (hedged.chosen, *hedged.hedges)] == ["delta", "local"]
    finally:
        coord.close()


def test_copies_go_to_both_sites_and_the_first_to_start_wins(
    sites: dict[str, GatedSite],
) -> None:
    coord = _coordinator(sites)
    h = coord.submit_task(PythonTask(square, (7,)), ENV)
    first = h.decision
    assert h.site == "delta" and [c.site for c in first.hedges] == ["local"]
    assert len(sites["delta"].jobs) == 1 and len(sites["local"].jobs) == 1
    assert [c.site for c in h.copies] == ["delta", "local"] and h.state == "queued"
    assert coord.history(h.id)[0].detail["hedges"][0]["shape"].startswith("local/")

    sites["local"].go.set()  # the hedge starts first
    r = coord.get_result(h, timeout_s=10)
    assert r.status == "completed" and r.value == {"site": "local", "value": 49}
    # the placement is the winner's; the decision keeps every candidate it had
    assert r.site == "local" and h.decision.chosen == first.hedges[0]
    assert h.decision.candidates == first.candidates and h.decision.hedges == first.hedges
    assert r.compute_task_id == sites["local"].tid()
    assert r.slurm_job_id == sites["local"].jobs[sites["local"].tid()].slurm_job_id
    # the Delta copy was cancelled at its site, and that is on record
    delta_tid = sites["delta"].tid()
    assert sites["delta"].cancelled == [delta_tid]
    assert sites["delta"].jobs[delta_tid].fut.cancelled()
    events = coord.history(h.id)
    assert [e.kind for e in events] == [
        "task.queued",
        "task.hedge_cancelled",
        "task.started",
        "task.completed",
    ]
    cancelled = events[1]
    assert cancelled.site == "delta"
    assert cancelled.detail["partition"] == "cpu"
    assert cancelled.detail["compute_task_id"] == delta_tid
    assert cancelled.detail["cancelled"] is True and cancelled.detail["winner_site"] == "local"
    assert 0 <= cancelled.detail["held_s"] < 10
    assert events[2].site == "local" and events[3].site == "local"
    assert {c["site"]: c["state"] for c in r.copies} == {"delta": "cancelled", "local": "won"}
    # the cancelled copy never runs, even once its gate opens
    assert sites["delta"].ended(delta_tid) == "cancelled"
    assert not sites["delta"].finished.is_set()
    assert _kinds(coord, h)[-1] == "task.completed"
    coord.close()


def test_a_late_result_from_a_copy_that_lost_is_ignored() -> None:
    sites = _sites(delta={"cancellable": False})  # its copy was already underway
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(square, (3,)), ENV)
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.value == {"site": "local", "value": 9}
        delta_tid = sites["delta"].tid()
        assert sites["delta"].refused == [delta_tid]
        gone = [e for e in coord.history(h.id) if e.kind == "task.hedge_cancelled"]
        assert [(e.site, e.detail["cancelled"]) for e in gone] == [("delta", False)]
        # now the loser runs: it reports a start and a result, both ignored
        sites["delta"].go.set()
        assert sites["delta"].finished.wait(10)
        assert sites["delta"].jobs[delta_tid].fut.result() == {"site": "delta", "value": 9}
        again = coord.get_result(h, timeout_s=1)
        assert again.value == {"site": "local", "value": 9} and again.site == "local"
        assert again.slurm_job_id == sites["local"].jobs[sites["local"].tid()].slurm_job_id
        assert _kinds(coord, h) == [
            "task.queued",
            "task.hedge_cancelled",
            "task.started",
            "task.completed",
        ]
        assert {c["site"]: c["state"] for c in again.copies} == {
            "delta": "abandoned",
            "local": "won",
        }
    finally:
        coord.close()


def _raises_remotely() -> None:
    raise ValueError(
        'Traceback (most recent call last):\n  File "task.py", line 1\n'
        "ValueError: the task's own error"
    )


def test_a_copy_whose_own_code_raised_ran_so_it_wins_and_the_task_fails() -> None:
    """A copy whose code raised at its site (a remote traceback, no start report yet) ran:
    it wins the race as a result would, the other copy is withdrawn, and the task fails
    once, its start announced first, as a task placed once does."""
    sites = _sites(local={"reports_start": False})
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(_raises_remotely, ()), ENV)
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.status == "failed" and "the task's own error" in (r.error or "")
        assert r.site == "local"
        assert _kinds(coord, h) == [
            "task.queued",
            "task.hedge_cancelled",
            "task.started",
            "task.failed",
        ]
        assert sites["delta"].cancelled == [sites["delta"].tid()]
        assert {c["site"]: c["state"] for c in r.copies} == {
            "delta": "cancelled",
            "local": "won",
        }
    finally:
        coord.close()


def test_a_copy_that_cannot_be_submitted_leaves_the_race() -> None:
    sites = _sites(delta={"submit_error": "endpoint unreachable"})
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(square, (4,)), ENV)
        assert not h.done and sites["delta"].jobs == {}
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 16}
        assert _kinds(coord, h) == ["task.queued", "task.started", "task.completed"]
        copies = {c["site"]: c for c in r.copies}
        assert copies["delta"]["state"] == "failed"
        assert "endpoint unreachable" in copies["delta"]["error"]
    finally:
        coord.close()


def test_a_copy_failing_before_any_start_leaves_the_others_running() -> None:
    sites = _sites(delta={"fail_before_start": True})
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(square, (5,)), ENV)
        sites["delta"].go.set()
        assert sites["delta"].finished.wait(10)
        assert not h.done and h.state == "queued"  # the other copy is still queued
        assert _kinds(coord, h) == ["task.queued"]
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.value == {"site": "local", "value": 25} and r.site == "local"
        assert _kinds(coord, h) == ["task.queued", "task.started", "task.completed"]
    finally:
        coord.close()


def test_every_copy_failing_fails_the_task_once() -> None:
    sites = _sites(delta={"fail_before_start": True}, local={"fail_before_start": True})
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(square, (6,)), ENV)
        sites["delta"].go.set()
        assert sites["delta"].finished.wait(10)
        assert not h.done
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.status == "failed"
        assert r.error is not None and "every copy failed" in r.error
        assert "delta/cpu" in r.error and "local/debug" in r.error
        events = coord.history(h.id)
        assert [e.kind for e in events] == ["task.queued", "task.failed"]
        _once_each(events)
    finally:
        coord.close()


def test_every_submission_failing_raises_and_fails_the_task_once() -> None:
    sites = _sites(delta={"submit_error": "no route"}, local={"submit_error": "down"})
    coord = _coordinator(sites)
    try:
        with pytest.raises(FederationError, match="submission of every copy failed"):
            coord.submit_task(PythonTask(square, (2,)), ENV)
        (h,) = coord.handles()
        assert h.done and h.state == "failed"
        assert _kinds(coord, h) == ["task.queued", "task.failed"]
    finally:
        coord.close()


def test_cancel_cancels_every_copy(sites: dict[str, GatedSite]) -> None:
    coord = _coordinator(sites)
    h = coord.submit_task(PythonTask(square, (8,)), ENV)
    assert coord.cancel(h, reason="changed my mind")
    assert sites["delta"].cancelled == [sites["delta"].tid()]
    assert sites["local"].cancelled == [sites["local"].tid()]
    r = coord.get_result(h, timeout_s=5)
    assert r.status == "failed" and r.error == "changed my mind"
    assert [c["state"] for c in r.copies] == ["cancelled", "cancelled"]
    for s in sites.values():  # neither copy runs once its gate opens
        assert s.ended(s.tid()) == "cancelled" and not s.finished.is_set()
    assert _kinds(coord, h) == ["task.queued", "task.failed"]
    assert not coord.cancel(h)  # already ended
    coord.close()


def test_copies_are_recorded_and_a_restart_reattaches_to_them(tmp_path: Path) -> None:
    sites = _sites()
    db = tmp_path / "coordinator.db"
    first = _coordinator(sites, Store(db))
    try:
        h = first.submit_task(PythonTask(square, (9,)), ENV)
        rows = Store(db).task_copies(h.id)
        assert [(r["idx"], r["site"], r["partition"], r["state"]) for r in rows] == [
            (0, "delta", "cpu", "queued"),
            (1, "local", "debug", "queued"),
        ]
        assert [r["compute_task_id"] for r in rows] == [
            sites["delta"].tid(),
            sites["local"].tid(),
        ]
        # the coordinator goes away with both copies queued; a new one takes over
        first.milestones.close()
        first.hooks.close()
        second = _coordinator(sites, Store(db))
        reopened = second.recover()
        assert [x.id for x in reopened] == [h.id]
        again = second._handle(h.id)
        assert [c.state for c in again.copies] == ["queued", "queued"]
        sites["delta"].go.set()  # this time the first choice starts first
        r = second.get_result(h.id, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "delta", "value": 81}
        assert sites["local"].cancelled == [sites["local"].tid()]
        assert _kinds(second, again) == [
            "task.queued",
            "task.hedge_cancelled",
            "task.started",
            "task.completed",
        ]
        stored = {r["site"]: r["state"] for r in Store(db).task_copies(h.id)}
        assert stored == {"delta": "won", "local": "cancelled"}
        row = Store(db).task(h.id)
        assert row is not None and row["compute_task_id"] == sites["delta"].tid()
        assert row["state"] == "completed" and row["site"] == "delta"
        second.close()
    finally:
        for s in sites.values():
            s.close()


# --- twin-watch live: a task still queued past its prediction is judged again -------------
class _Waits:
    """A wait predictor the test sets per site (as if the sites' queues changed)."""

    def __init__(self, **waits: float) -> None:
        self.waits = waits

    def __call__(
        self, shape: Shape, part: Any, site: Any, now: datetime
    ) -> tuple[float, float, str]:
        w = self.waits[shape.site]
        return w, w, f"the test says {w:.0f} s"


def _watching(waits: _Waits, **rules: Any) -> Policy:
    """Ranks on predicted completion, places one copy, and watches it (fast, for a test)."""
    return Policy(
        name="watch-test",
        key=lambda c: (c.predicted_completion_s,),
        wait_fn=waits,
        watch=Watch(**{"every_s": 0.2, "overdue_s": 0.3, "margin_s": 60.0, **rules}),
    )


def _watched(sites: dict[str, GatedSite], waits: _Waits, store: Store | None = None) -> Coordinator:
    coord = FixedCoordinator(
        list(sites.values()), policy=_watching(waits), telemetry=Telemetry(":memory:"), store=store
    )
    for s in sites.values():
        s.coord = coord
    return coord


def _copy_added(coord: Coordinator, h: TaskHandle, timeout_s: float = 10) -> Event:
    found = coord.events.await_event(
        task_ids={h.id}, kinds={"task.copy_added"}, timeout_s=timeout_s
    )
    assert found, f"no task.copy_added within {timeout_s} s: {_kinds(coord, h)}"
    return found[0]


def test_twin_watch_is_reachable_by_name_and_watches() -> None:
    pol = get_policy("twin-watch")
    assert pol.name == "twin-watch" and pol.watch == Watch() and pol.max_copies == 2
    assert pol.hedge_within == 0.5  # it hedges on submit like twin-hedge


def test_an_overdue_task_gets_a_copy_where_it_now_finishes_sooner(
    sites: dict[str, GatedSite], tmp_path: Path
) -> None:
    waits = _Waits(delta=0.0, local=900.0)
    db = tmp_path / "coordinator.db"
    coord = _watched(sites, waits, Store(db))
    try:
        h = coord.submit_task(PythonTask(square, (4,)), ENV)
        assert h.site == "delta" and [c.site for c in h.copies] == ["delta"]
        assert len(sites["local"].jobs) == 0
        coord.policy = "earliest-start"  # later tasks are placed otherwise; this one is watched
        waits.waits = {"delta": 5000.0, "local": 0.0}  # Delta's queue grew; local drained
        added = _copy_added(coord, h)
        assert added.site == "local" and added.detail["partition"] == "debug"
        assert added.detail["holding"] == ["delta"] and added.detail["copies"] == 2
        assert added.detail["predicted_wait_s"] == 0.0
        assert added.detail["queued_s"] >= 0.3  # only once overdue (predicted 0 s + 0.3 s)
        assert "local" in added.detail["reason"]
        # recorded, then shipped
        rows = Store(db).task_copies(h.id)
        assert [(r["idx"], r["site"]) for r in rows] == [(0, "delta"), (1, "local")]
        until("the added copy is acknowledged", lambda: len(sites["local"].jobs) == 1, 10)
        until(
            "its compute id is stored",
            lambda: Store(db).task_copies(h.id)[1]["compute_task_id"] == sites["local"].tid(),
            10,
        )
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 16}
        assert sites["delta"].cancelled == [sites["delta"].tid()]
        events = coord.history(h.id)
        assert [e.kind for e in events] == [
            "task.queued",
            "task.copy_added",
            "task.hedge_cancelled",
            "task.started",
            "task.completed",
        ]
        _once_each(events)
        assert events[2].site == "delta" and events[2].detail["winner_site"] == "local"
        assert {c["site"]: c["state"] for c in r.copies} == {"delta": "cancelled", "local": "won"}
    finally:
        coord.close()


def test_a_watch_copy_the_callers_policy_refuses_is_not_shipped(
    sites: dict[str, GatedSite],
) -> None:
    """The same overdue task, for a caller whose daily node-hours fit one copy: the copy local
    would get is put to the caller's policy, refused (audited, ``policy.copy_refused``),
    not shipped, and not proposed again on the next judgements."""
    from federation.security import CallerPolicy, PolicyGate, PolicySet

    waits = _Waits(delta=0.0, local=900.0)
    coord = _watched(sites, waits)
    hours = ENV.walltime_s / 3600
    coord.gate = PolicyGate(
        PolicySet(callers={"ivy": CallerPolicy(max_node_hours_per_day=1.5 * hours)})
    )
    try:
        h = coord.submit_task(PythonTask(square, (5,)), ENV, caller="ivy")
        waits.waits = {"delta": 5000.0, "local": 0.0}  # a better place opens up
        found = coord.events.await_event(
            task_ids={h.id}, kinds={"policy.copy_refused"}, timeout_s=10
        )
        assert found and "watch copy on local/debug not shipped" in found[0].detail["reason"]
        time.sleep(1.0)  # judged ~5 times more: no second refusal, no copy
        kinds = _kinds(coord, h)
        assert kinds.count("policy.copy_refused") == 1 and "task.copy_added" not in kinds
        assert len(sites["local"].jobs) == 0 and [c.site for c in h.copies] == ["delta"]
        decisions = [r.decision for r in coord.gate.audit.records(task_id=h.id)]
        assert decisions == ["allowed", "denied"]
        sites["delta"].go.set()
        assert coord.get_result(h, timeout_s=10).value == {"site": "delta", "value": 25}
    finally:
        coord.close()


def test_a_task_on_time_or_without_a_better_site_gets_no_copy(
    sites: dict[str, GatedSite],
) -> None:
    waits = _Waits(delta=0.0, local=900.0)
    coord = _watched(sites, waits)
    try:
        h = coord.submit_task(PythonTask(square, (3,)), ENV)
        # overdue after 0.3 s and judged every 0.2 s, but local is still no better
        assert not coord.events.await_event(
            task_ids={h.id}, kinds={"task.copy_added"}, timeout_s=1.5
        )
        assert len(sites["local"].jobs) == 0 and [c.site for c in h.copies] == ["delta"]
        sites["delta"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.value == {"site": "delta", "value": 9}
        assert _kinds(coord, h) == ["task.queued", "task.started", "task.completed"]
    finally:
        coord.close()


def test_a_watching_coordinator_charges_new_placements_its_late_copies(
    sites: dict[str, GatedSite],
) -> None:
    waits = _Waits(delta=0.0, local=900.0)
    coord = _watched(sites, waits)
    assert not coord.charge_late_copies  # opt-in
    coord.charge_late_copies = True
    try:
        h = coord.submit_task(PythonTask(square, (5,)), ENV)
        assert h.site == "delta" and h.decision.chosen.predicted_wait_s == 0.0
        time.sleep(0.6)  # queued past its 0 s prediction; local (900 s) still no better
        plan = coord.plan(ENV)
        delta = next(c for c in plan.candidates if c.site == "delta")
        assert delta.predicted_wait_s >= 0.6 and "past its predicted wait" in delta.why
        local = next(c for c in plan.candidates if c.site == "local")
        assert local.predicted_wait_s == 900.0  # nothing of ours is late there
        sites["delta"].go.set()
        assert coord.get_result(h, timeout_s=10).value == {"site": "delta", "value": 25}
        # started: no longer evidence against Delta's prediction
        again = next(c for c in coord.plan(ENV).candidates if c.site == "delta")
        assert again.predicted_wait_s == 0.0 and "past its predicted wait" not in again.why
        # not asked, or a policy that does not watch: never charged
        coord.charge_late_copies = False
        assert not isinstance(coord._placer().wait_fn, LateAdjusted)
        coord.charge_late_copies = True
        coord.policy = "earliest-start"
        assert not isinstance(coord._placer().wait_fn, LateAdjusted)
        assert "past its predicted" not in coord.plan(ENV).chosen.why
    finally:
        coord.close()


def test_an_added_copy_is_reattached_after_a_restart(tmp_path: Path) -> None:
    sites = _sites()
    db = tmp_path / "coordinator.db"
    waits = _Waits(delta=0.0, local=900.0)
    first = _watched(sites, waits, Store(db))
    try:
        h = first.submit_task(PythonTask(square, (8,)), ENV)
        waits.waits = {"delta": 5000.0, "local": 0.0}
        _copy_added(first, h)
        until(
            "the added copy's id is stored",
            lambda: Store(db).task_copies(h.id)[-1]["compute_task_id"] is not None,
            10,
        )
        # gone with both copies queued (the sites outlive it)
        first.milestones.close()
        first.hooks.close()
        second = _watched(sites, waits, Store(db))
        reopened = second.recover()
        assert [x.id for x in reopened] == [h.id]
        again = second._handle(h.id)
        assert [(c.site, c.state) for c in again.copies] == [
            ("delta", "queued"),
            ("local", "queued"),
        ]
        sites["local"].go.set()
        r = second.get_result(h.id, timeout_s=10)
        assert r.value == {"site": "local", "value": 64}
        stored = {r["site"]: r["state"] for r in Store(db).task_copies(h.id)}
        assert stored == {"delta": "cancelled", "local": "won"}
        second.close()
    finally:
        for s in sites.values():
            s.close()


def test_a_single_watched_copy_lost_to_a_node_failure_is_retried_elsewhere(
    tmp_path: Path,
) -> None:
    sites = _sites(delta={"fail_before_start": "failed: NODE_FAIL on delta-cpu-0"})
    db = tmp_path / "coordinator.db"
    coord = _watched(sites, _Waits(delta=0.0, local=900.0), Store(db))
    try:
        h = coord.submit_task(PythonTask(square, (12,)), ENV)
        assert [c.site for c in h.copies] == ["delta"]
        sites["delta"].go.set()
        found = coord.events.await_event(task_ids={h.id}, kinds={"task.retried"}, timeout_s=10)
        assert found and found[0].detail["failure"] == "node_failure"
        assert found[0].detail["from_site"] == "delta" and found[0].detail["to_site"] == "local"
        row = Store(db).task(h.id)
        assert row is not None and row["site"] == "local"
        assert [a["site"] for a in json.loads(row["attempts"])] == ["delta"]
        until("the retry reaches local", lambda: len(sites["local"].jobs) == 1, 10)
        until(
            "the retry's compute id is stored",
            lambda: (Store(db).task(h.id) or {}).get("compute_task_id") == sites["local"].tid(),
            10,
        )
        sites["local"].go.set()
        r = coord.get_result(h, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 144}
        # the retry's start is reported under its own compute task id
        assert _kinds(coord, h) == [
            "task.queued",
            "task.retried",
            "task.started",
            "task.completed",
        ]
        assert coord.history(h.id)[2].site == "local"
    finally:
        coord.close()
        for s in sites.values():
            s.close()


# --- the real local federation ------------------------------------------------------------
TAG = "fed-test-hedge-fill"
HOLD = "fed-test-hedge-hold"


def _delta_first_hedge() -> Policy:
    """Prefers Delta whatever its queue, and hedges with the best other site."""
    return Policy(
        name="delta-first-hedge",
        key=lambda c: (0.0 if c.site == "delta" else 1.0, c.predicted_wait_s),
        hedge_within=0.0,
    )


def _ours(slurm: Any, site: str) -> list[str]:
    """Jobs on ``site`` that are not this test's fillers (i.e. the copies' batch jobs), but
    for an earlier test's withdrawn block (held until its user endpoint process ends)."""
    return [j for j in active_jobs(slurm, site) if TAG not in j and HOLD not in j]


def _hold_local(slurm: Any) -> None:
    """Fill the local site's debug nodes, so its copy queues until the test lets it go."""
    for _ in range(2):
        res = slurm.run(
            "local",
            [
                "sbatch",
                "--parsable",
                f"--job-name={HOLD}",
                "--partition=debug",
                "--cpus-per-task=8",
                "--mem=1G",
                "--time=00:30:00",
                "--output=/dev/null",
                "--wrap=sleep 600",
            ],
        )
        assert res.returncode == 0, res.stderr
    until(
        "local's holders run",
        lambda: sum("RUNNING" in j for j in queued_jobs(slurm, "local")) == 2,
        30,
    )


@pytest.mark.slurm
@BOTH_PATHS
@pytest.mark.paths("cloud")
def test_hedged_fan_out_on_a_full_delta_runs_on_the_free_site(local: LocalSites) -> None:
    """Two tasks of one shape, each hedged on a full Delta and a held local site: once the
    local copies win, both Delta copies are withdrawn on both paths by winning their claims
    (they share one user endpoint process and its blocks there, so no process can be ended
    for one of them), and their shape's pending blocks are held. When Delta frees up no
    Slurm job of ours starts there: a withdrawn copy runs nothing, and no test cancels a
    Slurm job by hand. On the cloud path only: both paths withdraw a copy by the same
    claim, and the embedded path's is checked by the crash suite (``hedge.cancel``, a
    coordinator killed in the middle of a withdrawal there)."""
    coord = local.connect(telemetry=False, probe_timeout_s=60, policy=_delta_first_hedge())
    slurm = local.slurm
    n = 2
    try:
        wait_until_quiet(slurm, ("local", "delta"))
        earlier = held_blocks(slurm, "delta")
        since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")  # the clusters' local time
        fill_delta_cpu(slurm, TAG)
        _hold_local(slurm)  # both copies queue: the race starts when the test says so
        env = ResourceEnvelope(sites=("delta", "local"), cpus_min=4, mem_gb_min=4, walltime_s=600)
        hs = [coord.submit_task(PythonTask(report_allocation, (0.5,)), env) for _ in range(n)]
        for h in hs:
            assert h.decision.chosen.site == "delta"
            assert [c.site for c in h.decision.hedges] == ["local"]
        partition = hs[0].decision.chosen.partition
        # the Delta copies' batch jobs wait behind the fillers; then the local site frees up
        until("the Delta copies' batch jobs are queued", lambda: _ours(slurm, "delta"), 120)
        until("the local copies' batch jobs are queued", lambda: _ours(slurm, "local"), 120)
        assert all([c.state for c in h.copies] == ["queued", "queued"] for h in hs)
        # acknowledged off the submitter's path (a copy submitted while its function's
        # registration was still out goes in a later batch of the SDK)
        until(
            "the Delta copies' ids",
            lambda: None not in {h.copies[0].compute_task_id for h in hs},
            60,
        )
        delta_tids = {h.copies[0].compute_task_id for h in hs}
        slurm.run("local", ["scancel", f"--name={HOLD}"])
        for h in hs:
            r = coord.get_result(h, timeout_s=240)
            assert r.status == "completed", r.error
            assert r.site == "local" and r.value["cluster"] == "local"
            if local.path == "cloud":  # the start is read from its claim, maybe after the end
                until("the winner's job id", lambda h=h: coord.get_result(h).slurm_job_id, 30)
                r = coord.get_result(h)
            assert r.slurm_job_id is not None and r.value["slurm_job_id"] == r.slurm_job_id
            events = coord.history(h.id)
            kinds = [e.kind for e in events]
            assert kinds == [
                "task.queued",
                "task.hedge_cancelled",
                "task.started",
                "task.completed",
            ]
            gone = events[1]
            assert gone.site == "delta" and gone.detail["partition"] == partition
            assert gone.detail["compute_task_id"] in delta_tids
            assert gone.detail["cancelled"] is True and gone.detail["winner_site"] == "local"
            assert {c["site"]: c["state"] for c in r.copies} == {
                "delta": "cancelled",
                "local": "won",
            }
        # each withdrawal won its copy's claim and held the shape's pending blocks beyond the
        # work still waiting (named for the shape, not the task): none starts, and the
        # engine, seeing them pending, asks for no other
        jobs = coord.backends["delta"].jobs  # type: ignore[attr-defined]
        until("the withdrawals won the claims", lambda: jobs.withdrawals["won"] == n, 60)
        assert jobs.withdrawals["lost"] == 0 and jobs.withdrawals["held_blocks"] >= 1
        mine = held_blocks(slurm, "delta") - earlier
        assert mine and not _ours(slurm, "delta"), queued_jobs(slurm, "delta")
        claims = Path.home() / ".federation-jobs" / "claims"
        recent = [
            f
            for f in claims.iterdir()
            if f.read_text() == "withdrawn\n" and f.stat().st_mtime > time.time() - 600
        ]
        assert len(recent) >= n
        # Delta frees up: the held blocks stay held, no batch job of ours starts there
        slurm.run("delta", ["scancel", f"--name={TAG}"])
        time.sleep(15)  # three of the engines' scaling rounds (5 s)
        assert held_blocks(slurm, "delta") - earlier == mine
        acct = slurm.run(
            "delta",
            ["sacct", "-X", "-a", "-n", "-P", "-S", since, "-o", "JobID,JobName,State,Start"],
        )
        started = [
            ln
            for ln in acct.stdout.splitlines()
            if ln
            and not ln.split("|")[1].startswith("fed-test-")  # this or an earlier test's fillers
            and ln.split("|")[3] not in ("Unknown", "None")
        ]
        assert not started, acct.stdout
        for h in hs:
            assert coord.get_result(h, timeout_s=1).site == "local"
    finally:
        slurm.run("delta", ["scancel", f"--name={TAG}"])
        slurm.run("local", ["scancel", f"--name={HOLD}"])
        coord.close()


@pytest.mark.parametrize("without_cancel", ["local", "delta"])
def test_no_copy_is_made_where_a_loser_could_not_be_withdrawn(without_cancel: str) -> None:
    """The Globus Compute cloud has no task cancel: a site reached through it cannot
    withdraw a losing copy, so no copy goes where one of them could not be withdrawn (the
    hedge's site or the chosen one), and the task says why."""
    sites = _sites()
    sites[without_cancel].can_cancel = False  # type: ignore[misc]
    coord = _coordinator(sites)
    try:
        h = coord.submit_task(PythonTask(square, (7,)), ENV)
        assert h.site == "delta" and h.decision.hedges == ()
        assert len(sites["delta"].jobs) == 1 and sites["local"].jobs == {}
        assert any(f"{without_cancel} cannot cancel a queued copy" in n for n in h.notes)
        sites["delta"].go.set()
        assert coord.get_result(h, timeout_s=10).status == "completed"
        assert "task.hedge_cancelled" not in _kinds(coord, h)
    finally:
        coord.close()
        for s in sites.values():
            s.close()
