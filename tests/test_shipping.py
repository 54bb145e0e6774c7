"""Everything the coordinator ships runs on a worker that has nothing of this repository.

The worker here is a real one's Python: the strict worker environment (``.venv-worker``,
made by ``scripts/bootstrap.sh`` with just what docs/deploy.md tells a site to install),
started in an empty folder with a bare environment, so neither ``functions`` nor
``federation`` can be imported. Each shipped function is serialized exactly as a site's
Executor serializes it (:func:`federation.sites.shipping.executor_serializer`; Python tasks
inside :func:`functions.results.run_and_spill`), deserialized there by the SDK's own
deserializer, as the worker does, and run.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from globus_compute_sdk.serialize import ComputeSerializer

from federation.core.tasks import PythonTask
from federation.endpoint.worker_env import WorkerEnvMissing, worker_venv
from federation.runtime.catalog import default_catalog
from federation.runtime.results import shipped
from federation.sites import jobtags
from federation.sites.shipping import code_payload, executor_serializer, is_own
from functions.accounting import sacct_jobs
from functions.doctor import worker_facts
from functions.faults import garbage_probe
from functions.jobs import claim_then_run
from functions.probes import probe_slurm
from functions.results import make_bytes

_RUNNER = """
import json, sys, traceback
from globus_compute_sdk.serialize import ComputeSerializer
serde = ComputeSerializer()
jobs = json.load(open(sys.argv[1]))
out = {"sys_path": sys.path}
for mod in ("functions", "federation"):
    try:
        __import__(mod)
        out["import_" + mod] = "importable"
    except ImportError as e:
        out["import_" + mod] = type(e).__name__
for name, job in jobs.items():
    try:
        fn = serde.deserialize(job["fn"])
        args = serde.deserialize(job["args"])
        kwargs = serde.deserialize(job["kwargs"])
        value = fn(*args, **kwargs)
        out[name] = {"ok": True, "value": serde.serialize(value)}
    except BaseException as e:
        out[name] = {"ok": False, "error": type(e).__name__ + ": " + str(e)[:500]}
print(json.dumps(out))
"""


def _strict_python() -> Path:
    try:
        return worker_venv() / "bin" / "python"
    except WorkerEnvMissing as e:
        pytest.skip(f"no strict worker environment: {e}")


def _run_on_worker(tmp_path: Path, jobs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Run the serialized ``jobs`` in the strict worker Python; its report."""
    work = tmp_path / "worker"  # also the worker's home
    work.mkdir(exist_ok=True)
    (work / "jobs.json").write_text(json.dumps(jobs))
    (work / "runner.py").write_text(_RUNNER)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    proc = subprocess.run(
        [str(_strict_python()), "runner.py", "jobs.json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))


def _job(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, str]:
    """What the site's Executor sends: the function and its arguments, serialized."""
    serde = executor_serializer()
    return {
        "fn": serde.serialize(fn),
        "args": serde.serialize(args),
        "kwargs": serde.serialize(kwargs),
    }


def _python_task(task: PythonTask, storage: Path | None = None) -> dict[str, str]:
    """A Python task as the coordinator ships it (inside run_and_spill)."""
    root = (lambda site: storage) if storage is not None else None
    sent = shipped(task, "local", "result-1", root, 1000)
    assert isinstance(sent, PythonTask)
    return _job(sent.fn, *sent.args, **sent.kwargs)


def _guarded(task: PythonTask, tag: str) -> dict[str, str]:
    """A Python task as a cloud site ships it: tagged, claiming its tag before it runs."""
    sent = shipped(task, "local", "result-1", None, 1000)
    assert isinstance(sent, PythonTask)
    payload = code_payload(sent.fn)
    return _job(claim_then_run, jobtags.claim_path(tag), payload, tuple(sent.args), sent.kwargs)


def _value(report: dict[str, Any], name: str) -> Any:
    entry = report[name]
    assert entry["ok"], entry
    return ComputeSerializer().deserialize(entry["value"])


def test_every_shipped_function_runs_where_this_repository_is_not(tmp_path: Path) -> None:
    cat = default_catalog()
    jobs = {
        "probe_slurm": _job(probe_slurm, timeout_s=5.0, account=None),
        "sacct_jobs": _job(sacct_jobs, ["1"], timeout_s=5.0),
        "garbage_probe": _job(garbage_probe),
        "worker_facts": _job(worker_facts),
        "square": _python_task(cat.bind("square", [7])),
        "report_allocation": _python_task(cat.bind("report_allocation", [], {"work_s": 0.01})),
        "fail_with": _python_task(cat.bind("fail_with", ["the task's own words"])),
        "spilled": _python_task(PythonTask(make_bytes, (5000,)), storage=tmp_path / "spill"),
        "tagged": _guarded(cat.bind("square", [8]), "0123456789abcdef"),
        "withdrawn": _guarded(cat.bind("square", [9]), "fedcba9876543210"),
    }
    claim = tmp_path / "worker" / jobtags.CLAIM_DIR / "fedcba9876543210"
    claim.parent.mkdir(parents=True)
    claim.write_text("withdrawn\n")  # as a withdrawal that won the claim leaves it
    report = _run_on_worker(tmp_path, jobs)
    # the worker is strict: nothing of this repository is importable there
    assert report["import_functions"] == "ModuleNotFoundError"
    assert report["import_federation"] == "ModuleNotFoundError"
    repo = str(Path(__file__).resolve().parents[1])
    venv = str(_strict_python().parents[1])  # the worker environment may sit in the repo
    leaked = [p for p in report["sys_path"] if p.startswith(repo) and not p.startswith(venv)]
    assert not leaked, report["sys_path"]

    probe = _value(report, "probe_slurm")
    assert probe["format"] == 1 and "sinfo" in probe and probe["hostname"]
    assert probe["python_version"].count(".") == 2  # the workers' own Python
    acct = _value(report, "sacct_jobs")
    assert acct["fields"][0] == "JobID"
    assert _value(report, "garbage_probe")["sinfo"]["rc"] == 0
    facts = _value(report, "worker_facts")  # what `federation doctor` reads
    assert facts["importable"] == {"functions": False, "federation": False}
    assert _value(report, "square") == 49
    alloc = _value(report, "report_allocation")
    assert {"host", "slurm_job_id", "cpus", "gpus"} <= set(alloc)
    assert not report["fail_with"]["ok"]
    assert report["fail_with"]["error"] == "RuntimeError: the task's own words"
    assert _value(report, "tagged") == 64
    assert not report["withdrawn"]["ok"]
    assert "withdrawn before it started" in report["withdrawn"]["error"]
    # the tagged task claimed its tag before it ran: (Slurm job id, Globus Compute id)
    assert (tmp_path / "worker" / jobtags.CLAIM_DIR / "0123456789abcdef").read_text() == (
        "none none\n"  # run outside Slurm and an engine: neither is set
    )
    ref = _value(report, "spilled")
    assert ref["__federation_result_ref__"] == 1 and ref["size_bytes"] > 5000
    assert Path(ref["path"]).is_file()


def test_by_reference_fails_on_the_strict_worker(tmp_path: Path) -> None:
    """The control: the SDK's default for a module function (by reference) cannot run
    there, so the first test passing means shipping by source is what made it work."""
    by_ref = ComputeSerializer()  # the SDK's default code strategy
    jobs = {
        "probe_by_reference": {
            "fn": by_ref.serialize(probe_slurm),
            "args": by_ref.serialize(()),
            "kwargs": by_ref.serialize({}),
        }
    }
    report = _run_on_worker(tmp_path, jobs)
    entry = report["probe_by_reference"]
    assert not entry["ok"] and "No module named 'functions'" in entry["error"], entry


def test_own_functions_travel_as_source_and_scientists_functions_by_the_sdk_default() -> None:
    assert is_own(probe_slurm) and is_own(make_bytes)
    payload = code_payload(make_bytes)
    assert "def make_bytes(n_bytes: int) -> bytes:" in payload  # readable source text

    def mine(x: int) -> int:
        return x + 1

    assert not is_own(mine)
    assert code_payload(mine) == ComputeSerializer().serialize(mine)


def test_worker_env_missing_says_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDERATION_WORKER_VENV", os.devnull + "-nowhere")
    with pytest.raises(WorkerEnvMissing, match=r"scripts/bootstrap\.sh"):
        worker_venv()
