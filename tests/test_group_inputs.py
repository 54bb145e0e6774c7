"""Group children that read their siblings' outputs (``needs``; issue 28, item 4).

An in-process coordinator over two sites with the real local copy backend between their
storage roots: a three-step group (prepare on one site, a step on the other that needs the
preparation's file, a report that needs the step's output) runs in order from the
children's own events, each step's inputs moved to where it was placed. A child whose
input sibling failed is not run and says why; needs that name no sibling or go round in a
cycle are refused before anything is submitted; a waiting child survives in the store.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope
from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.core.tasks import PythonTask
from federation.interfaces.service.models import GroupRequest, group_view
from federation.runtime.group_handles import group_from_row, group_row
from federation.runtime.group_inputs import ChildNeed, check_needs
from federation.runtime.store import Store
from federation.transfer import LocalCopyBackend


def _writes(name: str, text: str) -> int:
    import os

    with open(os.path.join(os.environ["FEDERATION_WORKSPACE"], name), "w") as f:
        f.write(text)
    return len(text)


def _upper(src: str, dst: str) -> str:
    import os

    ws = os.environ["FEDERATION_WORKSPACE"]
    with open(os.path.join(ws, src)) as f:
        text = f.read().upper()
    with open(os.path.join(ws, dst), "w") as f:
        f.write(text)
    return os.environ["FEDERATION_SITE"]


def _fails() -> None:
    raise RuntimeError("the preparation broke")


def _coordinator(home: Path, gate: threading.Event | None = None) -> FixedCoordinator:
    sites = [ThreadSite(s, gate) for s in load_sites(["local", "delta"])]
    coord = FixedCoordinator(
        sites,
        store=Store(home / "coordinator.db"),
        result_storage=lambda s: site_storage(s, home),
        transfer_backends=LocalCopyBackend(["local", "delta"], home),
    )
    for s in sites:
        s.coord = coord
    return coord


def _on(site: str) -> ResourceEnvelope:
    return ResourceEnvelope(sites=(site,), walltime_s=60)


def test_a_chain_runs_in_order_each_step_reading_the_last_ones_output(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    try:
        g = coord.submit_group(
            [
                ("prepare", PythonTask(_writes, ("raw.txt", "abc")), _on("local")),
                ("step", PythonTask(_upper, ("raw.txt", "up.txt")), _on("delta")),
                ("report", PythonTask(_upper, ("up.txt", "report.txt")), _on("local")),
            ],
            distinct_sites=False,
            needs={
                "step": [ChildNeed(child="prepare", path="raw.txt")],
                "report": [ChildNeed(child="step")],  # every file it wrote
            },
            workflow="chain-1",
        )
        assert g.state()["step"] == "waiting" and g.state()["report"] == "waiting"
        view = group_view(g)
        waiting = {c.name: c for c in view.children}
        assert waiting["step"].task_id is None and waiting["step"].needs[0].child == "prepare"
        assert g.wait(30), g.state()
        assert g.state() == {"prepare": "completed", "step": "completed", "report": "completed"}
        by_name = {c.name: c.handle for c in g.children}
        assert coord.get_result(by_name["step"].id).value == "delta"
        assert coord.get_result(by_name["report"].id).value == "local"
        ws = "workspaces/local/chain-1"
        assert (site_storage("local", tmp_path) / ws / "report.txt").read_text() == "ABC"
        assert (site_storage("delta", tmp_path) / ws / "raw.txt").read_text() == "abc"
        # each waiting step was placed with its inputs where its siblings ran
        step_in = by_name["step"].envelope.stage_in
        assert [(d.site, d.path, d.size_bytes) for d in step_in] == [("local", "raw.txt", 3)]
        report_in = by_name["report"].envelope.stage_in
        assert [(d.site, d.path) for d in report_in] == [("delta", "up.txt")]
        kinds = [e.kind for e in coord.history(g.id)]
        assert kinds[-1] == "group.round_terminal" and "group.exception" not in kinds
    finally:
        coord.close()


def test_a_child_whose_input_failed_is_not_run_and_says_why(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    try:
        g = coord.submit_group(
            [
                ("prepare", PythonTask(_fails), _on("local")),
                ("step", PythonTask(_upper, ("raw.txt", "up.txt")), _on("delta")),
                ("other", PythonTask(_writes, ("o.txt", "o")), _on("delta")),
            ],
            distinct_sites=False,
            needs={"step": [ChildNeed(child="prepare")]},
        )
        assert g.wait(30), g.state()
        assert g.state() == {"prepare": "failed", "step": "skipped", "other": "completed"}
        exc = [e for e in coord.history(g.id) if e.kind == "group.exception"]
        assert len(exc) == 1 and exc[0].detail["child"] == "step"
        assert "input child 'prepare' failed" in exc[0].detail["error"], exc[0].detail
        assert "the preparation broke" in exc[0].detail["error"]
        view = {c.name: c for c in group_view(g).children}
        assert view["step"].state == "skipped" and "prepare" in (view["step"].skipped or "")
    finally:
        coord.close()


def test_needs_that_name_no_sibling_or_go_round_are_refused() -> None:
    names = ["a", "b", "c"]
    with pytest.raises(ValueError, match="'x', which is not a child"):
        check_needs(names, {"a": [ChildNeed(child="x")]})
    with pytest.raises(ValueError, match="its own outputs"):
        check_needs(names, {"a": [ChildNeed(child="a")]})
    with pytest.raises(ValueError, match="cycle"):
        check_needs(names, {"a": [ChildNeed(child="b")], "b": [ChildNeed(child="c")],
                            "c": [ChildNeed(child="a")]})  # fmt: skip
    with pytest.raises(ValueError, match="workspace"):
        ChildNeed(child="a", path="../../bob/secret")
    check_needs(names, {"b": [ChildNeed(child="a")], "c": [ChildNeed(child="a")]})
    env = {"sites": ["local"], "walltime_s": 60}
    with pytest.raises(ValueError, match="cycle"):
        GroupRequest.model_validate(
            {
                "children": [
                    {"name": "a", "command": "true", "envelope": env, "needs": [{"child": "b"}]},
                    {"name": "b", "command": "true", "envelope": env, "needs": [{"child": "a"}]},
                ]
            }
        )


def test_a_waiting_child_is_kept_in_the_store_with_its_task_and_needs(tmp_path: Path) -> None:
    gate = threading.Event()  # the preparation does not start until the row is read
    coord = _coordinator(tmp_path, gate)
    try:
        g = coord.submit_group(
            [
                ("prepare", PythonTask(_writes, ("raw.txt", "abc")), _on("local")),
                ("step", PythonTask(_upper, ("raw.txt", "up.txt")), _on("delta")),
            ],
            needs={"step": [ChildNeed(child="prepare", path="raw.txt")]},
            workflow="kept",
        )
        stored = coord.store.group(g.id)  # type: ignore[union-attr]
        assert stored is not None
        back = group_from_row(stored, coord.task)
        step = next(c for c in back.children if c.name == "step")
        assert back.workflow == "kept" and step.waiting
        assert step.needs == (ChildNeed(child="prepare", path="raw.txt"),)
        assert step.task is not None and step.task.fn.__name__ == "_upper"  # type: ignore[union-attr]
        gate.set()
        assert g.wait(30) and g.state() == {"prepare": "completed", "step": "completed"}
        done = group_from_row(group_row(g, "terminal"), coord.task)
        assert not next(c for c in done.children if c.name == "step").waiting
    finally:
        gate.set()
        coord.close()
