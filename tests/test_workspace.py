"""A caller's workspace on a site (issue 28): where tasks run, what they wrote, by name.

The shell side runs in a real bash; the Python side is ``run_and_spill`` as the worker calls
it; the manifest side goes through an in-process coordinator with a store."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from federation.core.workspace import (
    MAX_OUTPUTS,
    folder_name,
    inside,
    split_outputs,
    workspace_rel,
    wrap_shell,
)
from federation.sites.shipping import code_payload
from functions.results import OUTPUTS_KEY, run_and_spill


def test_each_caller_and_workflow_has_a_folder_of_its_own() -> None:
    assert workspace_rel("alice") == PurePosixPath("workspaces/alice/default")
    assert workspace_rel("alice", "sweep-1") == PurePosixPath("workspaces/alice/sweep-1")
    odd = [folder_name(x) for x in ("alice@uchicago.edu", "alice@uchicago.ed", "../x", "..")]
    assert len(set(odd)) == 4 and all("/" not in x and x not in (".", "..") for x in odd)
    ws = workspace_rel("bob")
    assert inside(ws, "data/in.csv") == ws / "data" / "in.csv"
    for bad in ("/etc/passwd", "../alice/default/x", "a/../../b", ""):
        with pytest.raises(ValueError, match="inside the workspace"):
            inside(ws, bad)


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)


def test_a_shell_task_runs_in_its_workspace_and_lists_what_it_wrote(tmp_path: Path) -> None:
    root = tmp_path / "storage" / "workspaces" / "alice" / "default"
    root.mkdir(parents=True)
    (root / "old.txt").write_text("before the task")
    cmd = (
        'echo "$FEDERATION_SITE $(pwd)"; printf data > out.csv; mkdir -p sub; '
        "printf x > sub/y; printf changed > old.txt; cat missing 2>/dev/null; exit 4"
    )
    res = _bash(wrap_shell(cmd, str(root), "delta"))
    assert res.returncode == 4, res.stderr  # the command's own exit code
    own, outputs, more = split_outputs(res.stdout)
    assert own == f"delta {root}\n" and more == 0
    assert [(o.path, o.size_bytes) for o in outputs] == [
        ("old.txt", 7),
        ("out.csv", 4),
        ("sub/y", 1),
    ]
    import hashlib

    assert outputs[1].sha256 == hashlib.sha256(b"data").hexdigest()
    assert sorted(os.listdir(root)) == ["old.txt", "out.csv", "sub"]  # nothing of ours left


def test_a_listing_is_capped_and_counts_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    res = _bash(wrap_shell(f"for i in $(seq {MAX_OUTPUTS + 7}); do : > f$i; done", str(root), "x"))
    own, outputs, more = split_outputs(res.stdout)
    assert res.returncode == 0 and own == ""
    assert len(outputs) == MAX_OUTPUTS and more == 7


def test_output_without_a_listing_is_left_as_it_is() -> None:
    assert split_outputs("plain\n") == ("plain\n", [], 0)


def _writes(name: str, text: str) -> int:
    import os

    with open(os.path.join(os.environ["FEDERATION_WORKSPACE"], name), "w") as f:
        f.write(text)
    return len(text)


def test_a_python_task_is_told_its_workspace_and_its_files_come_back(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.delenv("FEDERATION_WORKSPACE", raising=False)
    monkeypatch.delenv("FEDERATION_SITE", raising=False)
    ws = tmp_path / "ws"
    out = run_and_spill(
        code_payload(_writes), ("result.txt", "hello"), {}, 1 << 20, None, "n", str(ws), "vista"
    )
    assert out[OUTPUTS_KEY] == 1 and out["value"] == 5 and out["more"] == 0
    (f,) = out["outputs"]
    assert f["path"] == "result.txt" and f["size_bytes"] == 5 and len(f["sha256"]) == 64
    assert os.environ["FEDERATION_SITE"] == "vista"
    assert os.getcwd() != str(ws)  # named, not entered (a worker may run others)


def test_the_manifest_lists_a_tasks_outputs_and_keeps_them_after_it_leaves_memory(
    tmp_path: Path,
) -> None:
    from inprocess import FixedCoordinator, ThreadSite

    from federation.core.envelope import ResourceEnvelope
    from federation.core.spec import load_sites
    from federation.core.tasks import PythonTask
    from federation.runtime.store import Store

    site = ThreadSite(load_sites(["local"])[0])
    coord = FixedCoordinator(
        [site], store=Store(tmp_path / "c.db"), result_storage=lambda s: tmp_path / "storage" / s
    )
    site.coord = coord
    try:
        env = ResourceEnvelope(sites=("local",), walltime_s=60)
        h = coord.submit_task(PythonTask(_writes, ("prepared.csv", "a,b\n1,2\n")), env)
        assert h.wait(30)
        r = coord.get_result(h.id, timeout_s=5)
        assert r.value == 8 and [(o.path, o.size_bytes) for o in r.outputs] == [("prepared.csv", 8)]
        written = tmp_path / "storage" / "local" / "workspaces" / "local" / "default"
        assert (written / "prepared.csv").read_text() == "a,b\n1,2\n"
        del h, r
        back = coord.task(coord.store.tasks()[0]["id"])  # type: ignore[union-attr]
        assert back is not None and back.manifest().outputs[0].path == "prepared.csv"
    finally:
        coord.close()


def test_the_probe_reports_the_sites_storage_and_its_free_space(tmp_path: Path) -> None:
    from federation.parsing.snapshot_builder import build_storage
    from functions.probes import probe_slurm

    raw = probe_slurm(timeout_s=2.0, storage_root=str(tmp_path))
    warnings: list[str] = []
    storage = build_storage(raw, warnings)
    assert storage is not None and storage.root == str(tmp_path) and not warnings
    assert storage.free_bytes is not None and 0 < storage.free_bytes <= (storage.total_bytes or 0)
    gone = build_storage(probe_slurm(timeout_s=2.0, storage_root=str(tmp_path / "no")), [])
    assert (
        gone is not None and gone.free_bytes is None and "FileNotFoundError" in (gone.error or "")
    )
    for damaged in (
        {"root": 5},
        {"root": "/x", "free_bytes": -1},
        {"root": "/x", "free_bytes": True},
    ):
        warnings = []
        assert build_storage({"storage": damaged}, warnings) is None and warnings
    assert build_storage({}, []) is None  # a probe not told where the storage is
