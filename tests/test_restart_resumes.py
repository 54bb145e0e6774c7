"""A restarted coordinator resumes what the earlier one left: task and group hooks (kept in
the store, except webhooks whose headers may hold credentials), and retries of tasks that
fail after the restart (the task's spec is kept in the store). No Slurm: the sites run
tasks on threads and outlive the coordinator (``GatedSite``)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from test_hedging import GatedSite, _sites

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.runtime.coordinator import Coordinator
from federation.runtime.hooks import CommandHook, WebhookHook
from federation.runtime.store import Store
from federation.runtime.telemetry import Telemetry
from functions.workloads import square


def _coordinator(sites: dict[str, GatedSite], db: Path) -> Coordinator:
    from inprocess import FixedCoordinator

    coord = FixedCoordinator(
        list(sites.values()),
        policy="earliest-start",
        telemetry=Telemetry(":memory:"),
        store=Store(db),
    )
    for s in sites.values():
        s.coord = coord
    return coord


def _gone(coord: Coordinator) -> None:
    """The coordinator stops without a word (its threads stop listening)."""
    coord.milestones.close()
    coord.hooks.close()


def test_a_task_hook_is_kept_and_hears_the_end_after_a_restart(tmp_path: Path) -> None:
    sites = _sites()
    db = tmp_path / "coordinator.db"
    out = tmp_path / "heard.jsonl"
    script = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read().strip() + '\\n')"
    hook = CommandHook(argv=(sys.executable, "-c", script), kinds=frozenset({"task.completed"}))
    secret = WebhookHook(
        url="http://127.0.0.1:9/x",
        headers={"Authorization": "Bearer s3cr3t"},
        kinds=frozenset({"task.completed"}),  # delivered only by the first coordinator
    )
    env = ResourceEnvelope(sites=("local",))
    first = _coordinator(sites, db)
    try:
        h = first.submit_task(PythonTask(square, (7,)), env, hooks=[hook, secret])
        kept = Store(db).hooks()
        assert [json.loads(text)["type"] for _, text, _ in kept] == ["command"]  # no headers
        assert all("s3cr3t" not in text for _, text, _ in kept)
        _gone(first)
        second = _coordinator(sites, db)
        second.recover()
        sites["local"].go.set()
        r = second.get_result(h.id, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 49}
        assert second.hooks.drain(10)
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        heard = [json.loads(line) for line in out.read_text().splitlines()]
        assert [(e["kind"], e["task_id"]) for e in heard] == [("task.completed", h.id)]
        second.close()
    finally:
        for s in sites.values():
            s.close()


def test_a_hook_of_a_task_that_ended_is_not_registered_again(tmp_path: Path) -> None:
    sites = _sites()
    db = tmp_path / "coordinator.db"
    hook = CommandHook(argv=("true",))
    first = _coordinator(sites, db)
    try:
        sites["local"].go.set()
        h = first.submit_task(
            PythonTask(square, (2,)), ResourceEnvelope(sites=("local",)), hooks=[hook]
        )
        assert first.get_result(h.id, timeout_s=10).status == "completed"
        _gone(first)
        second = _coordinator(sites, db)
        second.recover()
        assert second.hooks.restore({h.id}) != []  # kept in the store...
        second.close()
        third = _coordinator(sites, db)
        third.recover()  # ...but its task ended: nothing more to deliver to it
        assert third.hooks._regs == []
        third.close()
    finally:
        for s in sites.values():
            s.close()


def test_a_task_failing_after_a_restart_is_retried_from_its_kept_spec(tmp_path: Path) -> None:
    sites = _sites(delta={"fail_before_start": "NODE_FAIL: its node went away"})
    db = tmp_path / "coordinator.db"
    env = ResourceEnvelope(sites=("delta", "local"))
    first = _coordinator(sites, db)
    try:
        h = first.submit_task(PythonTask(square, (5,)), env)
        assert h.site == "delta"
        _gone(first)
        second = _coordinator(sites, db)
        (again,) = second.recover()
        assert isinstance(again.task, PythonTask) and again.task.fn(3) == 9  # from the store
        sites["delta"].go.set()  # the first attempt fails: retryable, retried on local
        sites["local"].go.set()
        r = second.get_result(h.id, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 25}
        kinds = [e.kind for e in second.history(h.id)]
        assert kinds == ["task.queued", "task.retried", "task.started", "task.completed"], kinds
        second.close()
    finally:
        for s in sites.values():
            s.close()


def test_a_watched_task_is_judged_again_after_a_restart(tmp_path: Path) -> None:
    """The watch timer of a task still queued is armed again by the restarted coordinator:
    once overdue it gets a copy where it now finishes sooner, as before the crash."""
    from test_hedging import _copy_added, _kinds, _Waits, _watched

    sites = _sites()
    db = tmp_path / "coordinator.db"
    waits = _Waits(delta=0.0, local=900.0)
    first = _watched(sites, waits, Store(db))
    try:
        h = first.submit_task(PythonTask(square, (6,)), ResourceEnvelope(sites=("delta", "local")))
        assert [c.site for c in h.copies] == ["delta"]
        _gone(first)  # its watch timer dies with it
        first._hedging.rejudge_pool and first._hedging.rejudge_pool.shutdown(cancel_futures=True)
        second = _watched(sites, waits, Store(db))
        second.recover()
        waits.waits = {"delta": 5000.0, "local": 0.0}  # Delta's queue grew; local drained
        added = _copy_added(second, h)
        assert added.site == "local"
        sites["local"].go.set()
        r = second.get_result(h.id, timeout_s=10)
        assert r.status == "completed" and r.value == {"site": "local", "value": 36}
        again = second._handle(h.id)
        assert _kinds(second, again)[-2:] == ["task.started", "task.completed"]
        second.close()
    finally:
        for s in sites.values():
            s.close()
