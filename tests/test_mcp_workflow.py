"""The three-step workflow of issue 28 through the MCP tools, as an agent drives it, on the
local Slurm federation, on the cloud path (:func:`bench.workflow.three_step`): a CPU task on
Delta writes a file in the agent's workspace; a GPU task on Vista names it (from the first
result's ``outputs``) in its envelope's ``stage_in``, and the coordinator moves it there
before shipping the task; ``move_data`` brings the GPU step's output (named from its
manifest) back to ``local``. Only ``await_event`` waits: no status calls.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from slurm_scene import BOTH_PATHS

from federation.core.storage import site_storage

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.workflow import ROWS, three_step  # noqa: E402

pytestmark = [pytest.mark.slurm, BOTH_PATHS]


@pytest.fixture(scope="module")
def ops(local: Any) -> Iterator[Any]:
    from federation.interfaces.service.ops import LocalOps

    coord = local.connect(telemetry=False, probe_timeout_s=60)
    ops = LocalOps(coord, refresh_s=3600)
    try:
        yield ops
    finally:
        ops.close()
        coord.close()


@pytest.mark.paths("cloud")
def test_three_steps_chained_by_their_manifests_with_events_only(local: Any, ops: Any) -> None:
    """On the cloud path (what a real deployment has) only: the MCP tools, the outputs
    manifest (written by the task's wrapper on the worker), the stage-in and the move
    back (the coordinator's, between the sites' storage) are the same on both paths; what
    the path carries (a submission, its start, its result) is checked on both by
    ``test_federation_slurm.py`` and ``test_backends.py``."""
    from mcp import Client

    from federation.interfaces.mcp_server import build_server

    async def get_ops() -> Any:
        return ops

    async def main() -> dict[str, Any]:
        async with Client(build_server(get_ops)) as c:
            return await three_step(c)

    out = anyio.run(main)
    home = Path(local.home)
    ws = "workspaces/mcp/default"  # the stdio / in-memory MCP caller's workspace
    assert out["workspaces"]["delta"] == f"{site_storage('delta', home)}/{ws}"

    # 1. the preparation ran in the workspace on Delta and listed what it wrote
    prep = out["prepare"]["result"]
    assert out["prepare"]["site"] == "delta"
    assert prep["stdout"].strip() == f"rows={ROWS} site=delta", prep["stdout"]
    assert prep["stderr"] == "", prep["stderr"]  # the task's own: no endpoint warning
    table = site_storage("delta", home) / ws / "prep" / "table.csv"
    listed = {o["path"]: o for o in prep["outputs"]}
    assert set(listed) == {"prep/table.csv"}, listed
    digest = hashlib.sha256(table.read_bytes()).hexdigest()
    assert listed["prep/table.csv"]["sha256"] == digest
    assert listed["prep/table.csv"]["size_bytes"] == table.stat().st_size

    # 2. the GPU step started only after its input arrived on Vista
    kinds = out["kinds"]["gpu"]
    assert out["gpu"]["site"] == "vista"
    assert kinds.index("task.staging") < kinds.index("task.staged") < kinds.index("task.started")
    gpu = out["gpu"]["result"]
    assert f"rows={ROWS}" in gpu["stdout"] and f"sha256={digest}" in gpu["stdout"], gpu
    assert "site=vista" in gpu["stdout"]
    assert (site_storage("vista", home) / ws / "prep" / "table.csv").read_bytes() == (
        table.read_bytes()
    )
    assert [o["path"] for o in gpu["outputs"]] == ["gpu/summary.txt"]

    # 3. the results came back to local, named from the GPU step's manifest
    back = site_storage("local", home) / ws / "results" / "gpu" / "summary.txt"
    assert (
        back.read_text() == (site_storage("vista", home) / ws / "gpu" / "summary.txt").read_text()
    )
    assert out["kinds"]["back"][-1] == "transfer.completed"

    # events only: each result read once, after its task.completed; nothing polled
    calls = out["calls"]
    assert calls["get_result"] == 2 and calls["submit_task"] == 2 and calls["move_data"] == 1
    assert not {"get_transfer", "get_group"} & set(calls), calls
    assert 0 < out["moving_share"] < 1
    print(
        f"\nthree-step workflow: {out['total_s']:.1f} s from the first call to the last result; "
        f"moving data {out['staging_s']:.2f} s + {out['results_back_s']:.2f} s "
        f"({100 * out['moving_share']:.1f}%); calls {calls}"
    )
