"""``draft``, ``submit``, ``result``, ``watch`` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from federation.interfaces.cli.tasks import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, register

runner = CliRunner()


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


APP = _app()


def _flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def test_register_adds_the_commands() -> None:
    names = {c.name for c in APP.registered_commands}
    assert names == {"draft", "submit", "group", "move", "result", "watch"}


def test_draft_prints_envelope_rationale_and_validation() -> None:
    r = runner.invoke(APP, ["draft", "fine-tune a 7B model with DDP", "--gpus", "4"])
    assert r.exit_code == EXIT_OK, r.output
    assert "ddp-training" in r.output
    assert "gpus" in r.output and "2-4" in r.output
    assert "feasible on" in r.output
    assert "not local/debug: no GPUs" in r.output


def test_draft_json_is_the_validated_draft() -> None:
    r = runner.invoke(
        APP, ["draft", "tokenize CSV shards", "--input-gb", "6", "--site", "local", "--json"]
    )
    assert r.exit_code == EXIT_OK, r.output
    doc = json.loads(r.stdout)
    assert doc["workload_class"] == "cpu-prep"
    assert doc["envelope"]["mem_gb_min"] == 12.0
    assert doc["validation"]["feasible"] == ["local/debug"]


def test_draft_reports_the_bound_to_relax() -> None:
    r = runner.invoke(APP, ["draft", "x", "--gpus", "8", "--gpu-type", "h100", "--json"])
    assert r.exit_code == EXIT_OK
    v = json.loads(r.stdout)["validation"]
    assert v["feasible"] == [] and v["unsatisfiable_bound"] == "gpus_min"
    assert v["nearest"]["gpus_min"] == 4


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["draft", "x", "--hint-class", "bogus"], "workload_class"),
        (["draft", "x", "--site", "nowhere"], "unknown site 'nowhere'"),
        (["draft", "x", "--gpu-type", "A100", "--gpus", "1"], "gpu_types"),
        (["submit", "--cmd", "true", "--cpus", "8", "--cpus-max", "2"], "cpus_min=8"),
        (["submit", "--cmd", "true", "--walltime-s", "5"], "walltime_s"),
    ],
)
def test_usage_errors_exit_2_with_a_message(args: list[str], needle: str) -> None:
    r = runner.invoke(APP, args)
    assert r.exit_code == EXIT_ERROR, r.output
    assert needle in _flat(r.output)


def test_usage_error_in_json_mode_is_json() -> None:
    r = runner.invoke(APP, ["draft", "x", "--site", "nowhere", "--json"])
    assert r.exit_code == EXIT_ERROR
    assert "unknown site" in json.loads(r.stdout)["error"]


@pytest.mark.parametrize("cmd", ["result", "watch"])
def test_result_and_watch_say_they_need_the_service(
    cmd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDERATION_SERVICE", raising=False)
    r = runner.invoke(APP, [cmd, "1234"])
    assert r.exit_code == EXIT_ERROR
    out = _flat(r.output)
    assert "running coordinator service" in out and "--service URL" in out
    assert "federation serve" in out
    help_text = _flat(runner.invoke(APP, [cmd, "--help"]).output)
    assert "Exit codes" in help_text and "--service" in help_text


# --- on the real local federation -------------------------------------------------------------
# Each invocation closes its in-process service; the endpoint connections' reader threads
# then die with a TypeError inside multiprocessing (federation/endpoint/connection.py does
# not treat a connection closed under it as EOF). Harmless here; ignored until fixed there.
closed_reader_ok = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)


@pytest.fixture(scope="module")
def home(local_federation: Any) -> str:
    from federation.deploy.local import LocalSites

    LocalSites(home=local_federation.home).up()
    return str(local_federation.home)


@pytest.mark.slurm
@closed_reader_ok
def test_submit_wait_streams_events_and_prints_the_result(home: str) -> None:
    r = runner.invoke(
        APP,
        [
            *("submit", "--cmd", "echo part=$SLURM_JOB_PARTITION", "--site", "local"),
            *("--wait", "--home", home, "--walltime-s", "300"),
        ],
    )
    assert r.exit_code == EXIT_OK, r.output
    out = _flat(r.output)
    assert "placed on local/debug" in out and "decision trace" in out
    for kind in ("queued", "started", "completed"):
        assert kind in out
    assert "part=debug" in out


@pytest.mark.slurm
@closed_reader_ok
def test_submit_json_wait_failure_exits_1(home: str) -> None:
    r = runner.invoke(
        APP,
        [
            *("submit", "--cmd", "echo oops >&2; exit 3", "--site", "local", "--wait"),
            *("--json", "--home", home, "--walltime-s", "300", "--name", "fails"),
        ],
    )
    assert r.exit_code == EXIT_TASK_FAILED, r.output
    doc = json.loads(r.stdout)
    res = doc["result"]
    assert res["status"] == "failed" and res["returncode"] == 3
    assert "oops" in res["stderr"]
    assert [e["kind"] for e in res["events"]][-1] == "task.failed"
    assert doc["placement"]["site"] == "local" and doc["compute_task_id"]


@pytest.mark.slurm
@closed_reader_ok
def test_submit_without_wait_and_infeasible_envelope(home: str, tmp_path: Path) -> None:
    r = runner.invoke(APP, ["submit", "--cmd", "true", "--site", "local", "--home", home])
    assert r.exit_code == EXIT_OK, r.output
    assert "not waiting" in r.output and "--wait" in _flat(r.output)
    r = runner.invoke(APP, ["submit", "--cmd", "true", "--gpus", "64", "--home", home])
    assert r.exit_code == EXIT_ERROR
    assert "no site can run this envelope" in _flat(r.output)
    # an envelope drafted by `draft --json` can be submitted as is
    draft = runner.invoke(APP, ["draft", "clean CSV files", "--site", "local", "--json"])
    path = tmp_path / "env.json"
    path.write_text(draft.stdout)
    r = runner.invoke(
        APP, ["submit", "--cmd", "nproc", "--envelope", str(path), "--home", home, "--wait"]
    )
    assert r.exit_code == EXIT_OK, r.output
    assert "local/debug" in r.output
