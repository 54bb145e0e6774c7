"""A task's inputs on other sites are moved to its site before it ships (issue 28, item 4).

An in-process coordinator over two sites, with the real local copy backend between their
storage roots (the sites' tasks run in threads): a first task writes a file in its
workspace on one site, a second names it in its envelope's ``stage_in`` and is placed on the
other; the coordinator moves the file there, from the transfer's events, then ships the
task. Also: a missing input fails the task naming it, a task cancelled while its input
moves never runs, a restart while an input moves stages it again and runs the task, and an
input already on the task's site moves nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from inprocess import FixedCoordinator, ThreadSite

from federation.core.envelope import ResourceEnvelope, StageIn
from federation.core.errors import DataNotFoundError, TransferError
from federation.core.spec import load_sites
from federation.core.storage import site_storage
from federation.core.tasks import PythonTask
from federation.core.workspace import workspace_rel
from federation.runtime.store import Store
from federation.transfer import LocalCopyBackend


def _writes(name: str, text: str) -> int:
    import os

    with open(os.path.join(os.environ["FEDERATION_WORKSPACE"], name), "w") as f:
        f.write(text)
    return len(text)


def _reads(name: str) -> str:
    import os

    with open(os.path.join(os.environ["FEDERATION_WORKSPACE"], name)) as f:
        return f.read()


class HeldCopies(LocalCopyBackend):
    """The real local copy, started only once ``go`` is set (an input still moving)."""

    def __init__(self, sites: list[str], home: Path, go: threading.Event) -> None:
        super().__init__(sites, home)
        self.go = go

    def _run(self, transfer_id: str, request: Any, report: Any) -> None:
        self.go.wait(30)
        super()._run(transfer_id, request, report)


def _coordinator(home: Path, backend: LocalCopyBackend | None = None) -> FixedCoordinator:
    sites = [ThreadSite(s) for s in load_sites(["local", "delta"])]
    coord = FixedCoordinator(
        sites,
        store=Store(home / "coordinator.db"),
        result_storage=lambda s: site_storage(s, home),
        transfer_backends=backend or LocalCopyBackend(["local", "delta"], home),
    )
    for s in sites:
        s.coord = coord
    return coord


def _ws(home: Path, site: str) -> Path:
    return site_storage(site, home) / str(workspace_rel("local"))


ON = {"local": ResourceEnvelope(sites=("local",), walltime_s=60)}


def _on(site: str, *inputs: StageIn) -> ResourceEnvelope:
    return ResourceEnvelope(sites=(site,), walltime_s=60, stage_in=inputs)


def test_a_task_names_an_earlier_tasks_output_and_runs_once_it_arrived(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    try:
        first = coord.submit_task(PythonTask(_writes, ("prep.csv", "a,b\n1,2\n")), _on("local"))
        assert first.wait(30) and first.state == "completed", first.error
        out = coord.get_result(first.id).outputs
        assert [o.path for o in out] == ["prep.csv"]
        seen: list[str] = []
        second = coord.submit_task(
            PythonTask(_reads, ("prep.csv",)),
            _on("delta", StageIn(site="local", path=out[0].path, size_bytes=out[0].size_bytes)),
            on_event=lambda ev: seen.append(ev.kind),
        )
        assert second.site == "delta"
        assert second.wait(30) and second.state == "completed", second.error
        assert coord.get_result(second.id).value == "a,b\n1,2\n"
        assert seen.index("task.staging") < seen.index("task.staged") < seen.index("task.started")
        events = {ev.kind: ev for ev in coord.history(second.id)}
        queued = events["task.queued"].detail
        assert queued["workspace"] == "workspaces/local/default"
        assert queued["stage_in"] == ["local:prep.csv"]
        staged = events["task.staged"].detail
        assert staged["bytes"] == 8 and len(staged["transfers"]) == 1
        moved = coord.get_transfer(staged["transfers"][0])
        assert moved.owner == "local" and moved.state == "succeeded"
        assert moved.request.destination.path == "workspaces/local/default/prep.csv"
        assert (_ws(tmp_path, "delta") / "prep.csv").read_text() == "a,b\n1,2\n"
    finally:
        coord.close()


def test_an_input_on_the_tasks_own_site_moves_nothing(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    try:
        _ws(tmp_path, "local").mkdir(parents=True)
        (_ws(tmp_path, "local") / "here.txt").write_text("here")
        h = coord.submit_task(
            PythonTask(_reads, ("here.txt",)),
            _on("local", StageIn(site="local", path="here.txt", size_bytes=4)),
        )
        assert h.wait(30) and coord.get_result(h.id).value == "here"
        assert "task.staging" not in {ev.kind for ev in coord.history(h.id)}
        assert coord.transfers.handles() == []
    finally:
        coord.close()


def test_a_missing_input_is_refused_naming_it_with_nothing_recorded(tmp_path: Path) -> None:
    coord = _coordinator(tmp_path)
    try:
        with pytest.raises(DataNotFoundError, match=r"local:nope\.csv cannot be staged to delta"):
            coord.submit_task(
                PythonTask(_reads, ("nope.csv",)),
                _on("delta", StageIn(site="local", path="nope.csv", size_bytes=10)),
            )
        assert coord.store.tasks() == [] and coord.transfers.handles() == []  # type: ignore[union-attr]
    finally:
        coord.close()


def test_an_input_that_fails_on_its_way_fails_the_task_naming_it(tmp_path: Path) -> None:
    go = threading.Event()
    coord = _coordinator(tmp_path, HeldCopies(["local", "delta"], tmp_path, go))
    try:
        _ws(tmp_path, "local").mkdir(parents=True)
        src = _ws(tmp_path, "local") / "gone.txt"
        src.write_text("here at submit, gone when copied")
        h = coord.submit_task(
            PythonTask(_reads, ("gone.txt",)),
            _on("delta", StageIn(site="local", path="gone.txt", size_bytes=32)),
        )
        src.unlink()
        go.set()
        assert h.wait(10) and h.state == "failed"
        assert "could not be staged to delta" in (h.error or ""), h.error
        assert h.compute_task_id is None  # never shipped
        row = next(r for r in coord.store.tasks() if r["id"] == h.id)  # type: ignore[union-attr]
        assert row["state"] == "failed" and row["error"] == h.error
    finally:
        go.set()
        coord.close()


def test_an_input_outside_the_workspace_is_refused_before_anything_moves(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workspace"):
        StageIn(site="local", path="../bob/default/secret", size_bytes=1)
    with pytest.raises(ValueError, match="workspace"):
        StageIn(site="local", path="/etc/passwd", size_bytes=1)


def test_a_task_cancelled_while_its_input_moves_never_runs(tmp_path: Path) -> None:
    go = threading.Event()
    coord = _coordinator(tmp_path, HeldCopies(["local", "delta"], tmp_path, go))
    try:
        _ws(tmp_path, "local").mkdir(parents=True)
        (_ws(tmp_path, "local") / "big.bin").write_bytes(b"x" * 1000)
        h = coord.submit_task(
            PythonTask(_reads, ("big.bin",)),
            _on("delta", StageIn(site="local", path="big.bin", size_bytes=1000)),
        )
        assert h.state == "queued" and h.compute_task_id is None
        assert coord.cancel(h, "not needed any more")
        assert h.state == "failed" and h.error == "not needed any more"
        go.set()
        transfer = coord.transfers.handles()[0] if coord.transfers.handles() else None
        if transfer is not None:
            assert transfer.wait(10)
        assert h.compute_task_id is None  # the arrival did not ship it
    finally:
        go.set()
        coord.close()


def test_a_restart_while_an_input_moves_stages_it_again_and_runs_the_task(tmp_path: Path) -> None:
    never = threading.Event()
    first = _coordinator(tmp_path, HeldCopies(["local", "delta"], tmp_path, never))
    _ws(tmp_path, "local").mkdir(parents=True)
    (_ws(tmp_path, "local") / "in.txt").write_text("carried over a restart")
    h = first.submit_task(
        PythonTask(_reads, ("in.txt",)),
        _on("delta", StageIn(site="local", path="in.txt", size_bytes=22)),
    )
    task_id = h.id
    assert h.state == "queued" and h.compute_task_id is None
    for staged in first._staging._open.values():  # the process "dies" here: its arrivals
        staged.over = True  # ship nothing
    never.set()  # its copy thread may now finish; the new coordinator must not rely on it
    first.close()

    second = _coordinator(tmp_path)
    try:
        second.recover()
        back = second.task(task_id)
        assert back is not None
        assert back.wait(30) and back.state == "completed", back.error
        assert second.get_result(task_id).value == "carried over a restart"
        kinds = [ev.kind for ev in second.history(task_id)]
        assert "task.staged" in kinds
    finally:
        second.close()


def _reads_unless_on(bad_site: str, name: str) -> str:
    import os

    if os.environ["FEDERATION_SITE"] == bad_site:
        raise RuntimeError("batch job ended: NODE_FAIL")  # an infrastructure failure: retried
    with open(os.path.join(os.environ["FEDERATION_WORKSPACE"], name)) as f:
        return f.read()


def test_a_retry_on_another_site_moves_the_inputs_there_first(tmp_path: Path) -> None:
    sites = [ThreadSite(s) for s in load_sites(["local", "delta", "anvil"])]
    coord = FixedCoordinator(
        sites,
        store=Store(tmp_path / "coordinator.db"),
        result_storage=lambda s: site_storage(s, tmp_path),
        transfer_backends=LocalCopyBackend(["local", "delta", "anvil"], tmp_path),
    )
    for s in sites:
        s.coord = coord
    try:
        _ws(tmp_path, "local").mkdir(parents=True)
        (_ws(tmp_path, "local") / "in.txt").write_text("wherever it runs")
        env = ResourceEnvelope(
            sites=("delta", "anvil"),
            walltime_s=60,
            stage_in=(StageIn(site="local", path="in.txt", size_bytes=16),),
        )
        first = coord.plan(env).chosen.shape.site
        h = coord.submit_task(PythonTask(_reads_unless_on, (first, "in.txt")), env)
        assert h.wait(30) and h.state == "completed", h.error
        assert coord.get_result(h.id).value == "wherever it runs"
        second = h.site
        assert second != first and h.attempts[0]["site"] == first
        events = coord.history(h.id)
        staged = [e.site for e in events if e.kind == "task.staged"]
        assert staged == [first, second], [(e.kind, e.site) for e in events]
        assert (_ws(tmp_path, second) / "in.txt").read_text() == "wherever it runs"
    finally:
        coord.close()


def test_an_input_on_a_site_no_transfer_reaches_is_refused_saying_so(tmp_path: Path) -> None:
    sites = [ThreadSite(s) for s in load_sites(["local", "delta", "anvil"])]
    coord = FixedCoordinator(  # anvil has no data path: no transfer backend serves it
        sites,
        store=Store(tmp_path / "coordinator.db"),
        result_storage=lambda s: site_storage(s, tmp_path),
        transfer_backends=dict.fromkeys(
            ("local", "delta"), LocalCopyBackend(["local", "delta"], tmp_path)
        ),
    )
    for s in sites:
        s.coord = coord
    try:
        with pytest.raises(TransferError, match=r"input anvil:in\.txt cannot be staged to delta"):
            coord.submit_task(
                PythonTask(_reads, ("in.txt",)),
                _on("delta", StageIn(site="anvil", path="in.txt", size_bytes=1)),
            )
        assert coord.store.tasks() == []  # type: ignore[union-attr]
    finally:
        coord.close()
