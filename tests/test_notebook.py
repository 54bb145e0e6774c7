"""notebooks/quickstart.ipynb runs top to bottom against the local federation (nbclient).

The kernel is this interpreter (the project venv): a kernelspec named ``federation`` is
written to a temporary Jupyter data dir put first on ``JUPYTER_PATH``, so the test works from
a clean clone where no kernel has been registered.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def test_committed_notebook_has_no_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert nb.metadata["kernelspec"]["name"] == "federation"


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_quickstart_runs_top_to_bottom(
    local_federation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from federation.deploy.local import LocalSites

    LocalSites(home=local_federation.home).up()
    spec_dir = tmp_path / "jupyter" / "kernels" / "federation"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python (federation, test)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("FEDERATION_HOME", str(local_federation.home))
    monkeypatch.delenv("MPLBACKEND", raising=False)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="federation",
        timeout=300,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()

    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(
        o.get("text", "") if o.output_type == "stream" else str(o.get("data", {}))
        for c in code
        for o in c.outputs
    )
    assert "4 done, 0 not done" in text
    assert "count_primes -> 17984" in text  # primes below 200,000
    assert "ZeroDivisionError" in text
    # the recorded events, printed after the wait: every kind, the failure on `divide`
    recorded = re.findall(r"^(\S+)\s+events: (.*)$", text, flags=re.M)
    assert len(recorded) == 4, recorded  # one line per future
    assert [k.split() for label, k in recorded if label.startswith("divide")] and all(
        "task.failed" in k.split() for label, k in recorded if label.startswith("divide")
    ), recorded
    kinds = " ".join(k for _, k in recorded).split()
    for kind in ("task.queued", "task.started", "task.completed", "task.failed"):
        assert kind in kinds, kind
    # the callbacks printed live too: each submission's task.queued comes during cell 10
    assert len(re.findall(r"^\d\d:\d\d:\d\d  task\.queued ", text, flags=re.M)) >= 4
    html_tables = [c for c in code if any("text/html" in o.get("data", {}) for o in c.outputs)]
    assert len(html_tables) >= 4  # snapshot, draft, tasks, history DataFrames
    images = [c for c in code if any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(images) == 3  # capacity, timeline, predicted vs actual
    # the three-step workflow: staged, prepared, GPU step, results back, all from events
    assert "finished: True" in text
    assert "succeeded -> rows=20000" in text and "site=vista" in text
