"""submit_group on the real local federation: the paper's re-placement scenario."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from slurm_scene import BOTH_PATHS, fill_delta_cpu, wait_until_quiet

from federation.core.envelope import ResourceEnvelope
from federation.core.tasks import PythonTask
from federation.deploy.local import LocalSites
from federation.runtime.coordinator import Coordinator
from federation.runtime.events import Event
from federation.runtime.hooks import CommandHook
from functions.workloads import report_allocation

pytestmark = [pytest.mark.slurm, BOTH_PATHS]
TAG = "fed-test-group-fill"


@pytest.mark.paths("cloud")
def test_queued_child_is_replaced_once_its_siblings_finish(
    coord: Coordinator, local: LocalSites, tmp_path: Path
) -> None:
    """A group's child left queued is withdrawn and placed again once its siblings ended.
    On the cloud path only: the replacement is the coordinator's, and the withdrawal by
    claim it rests on is checked on the cloud path by ``test_hedging.py``'s full-Delta
    test and on the embedded one by the crash suite (``hedge.cancel``)."""
    seen = tmp_path / "hook.jsonl"
    record = (
        "import json, sys; e = json.load(sys.stdin); "
        f"open({str(seen)!r}, 'a').write(json.dumps([e['kind'], e['task_id']]) + '\\n')"
    )
    hook = CommandHook(
        argv=(sys.executable, "-c", record),
        kinds=frozenset({"task.completed", "group.child_replaced", "group.round_terminal"}),
    )
    # Delta's CPU nodes are full, with more waiting: whoever lands there queues; the
    # other sites are quiet, so it is the only child that waits
    try:
        wait_until_quiet(local.slurm, ("local", "vista"))
        fill_delta_cpu(local.slurm, TAG)
        env = ResourceEnvelope(
            sites=("local", "vista", "delta"), cpus_min=4, mem_gb_min=4, walltime_s=600
        )
        events: list[Event] = []
        g = coord.submit_group(
            [(f"c{i}", PythonTask(report_allocation, (1.0,)), env) for i in (1, 2, 3)],
            objective="three-system comparison",
            distinct_sites=True,
            on_event=events.append,
            hooks=[hook],
        )
        first = {c.name: c.handle.site for c in g.children}
        assert sorted(first.values()) == ["delta", "local", "vista"]  # distinct systems
        on_delta = next(c for c in g.children if c.handle.site == "delta")
        assert g.wait(180), (g.state(), [(e.kind, e.site, e.detail) for e in events])
        assert g.state() == {"c1": "completed", "c2": "completed", "c3": "completed"}
        # the child stuck behind Delta's queue was moved, and the move is on record
        assert len(on_delta.attempts) == 2
        old, new = on_delta.attempts
        assert old.state == "failed" and old.error == "re-placed by its group"
        assert new.site in ("local", "vista")
        assert g.replacements == [{"child": on_delta.name, "from": "delta", "to": new.site}]
        kinds = [e.kind for e in events]
        assert kinds[0] == "group.submitted" and "group.child_replaced" in kinds
        stalled = [e for e in events if e.kind == "group.child_stalled"]
        assert [(e.detail["child"], e.site) for e in stalled] == [(on_delta.name, "delta")]
        assert stalled[0].seq < next(e.seq for e in events if e.kind == "group.child_replaced")
        assert kinds[-1] == "group.round_terminal"
        r = coord.get_result(new)
        assert r.value["cluster"] == new.site
        # the group's hook saw the move, the round's end and every child's completion
        assert coord.hooks.drain(60)
        got = [tuple(json.loads(x)) for x in seen.read_text().splitlines()]
        assert ("group.child_replaced", g.id) in got and ("group.round_terminal", g.id) in got
        done = {tid for kind, tid in got if kind == "task.completed"}
        assert done == {c.handle.id for c in g.children}

        # its queued batch job on Delta was cancelled (embedded) or held (cloud: withdrawn by
        # its claim, the block held until its user endpoint process ends), never started
        # (a withdrawal rides the site's next look, behind the SDK's own throttle)
        def withdrawn() -> list[list[str]]:
            q = local.slurm.run("delta", ["squeue", "-h", "-o", "%j|%T|%r"])
            left = [x.split("|") for x in q.stdout.splitlines() if x.strip()]
            return [
                x
                for x in left
                if not x[0].startswith(TAG)
                and (x[0][:4], x[1], x[2]) != ("fed.", "PENDING", "JobHeldUser")
            ]

        deadline = time.monotonic() + 60
        while withdrawn() and time.monotonic() < deadline:
            time.sleep(1)
        assert not withdrawn()
    finally:
        local.slurm.run("delta", ["scancel", f"--name={TAG}"])
