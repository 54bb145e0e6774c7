"""A three-step workflow driven as an agent would, through the MCP tools, on both paths.

    .venv/bin/python bench/workflow.py                     # embedded and cloud, 1 round
    .venv/bin/python bench/workflow.py --paths cloud --rounds 3

The agent (an in-memory MCP client session over the real MCP server, the coordinator over
the local Slurm federation) runs, waiting only on ``await_event`` (no status calls):

1. **CPU preparation** on Delta: a shell task writes ``prep/table.csv`` in the agent's
   workspace; ``get_result`` lists it in ``outputs`` (path, size, sha256).
2. **GPU step** on Vista: a shell task that names that output in its envelope's
   ``stage_in``; the coordinator moves the file to Vista (``task.staging``,
   ``task.staged``) and then ships the task, which checks the file and writes
   ``gpu/summary.txt``.
3. **Results back**: ``move_data`` copies the GPU step's output (named from its manifest) to
   the ``local`` site.

Prints, per path, the time from the first call to the last result and the share of it spent
moving data (the staging transfer and the results' transfer), and writes
``bench/results/workflow-latest.json``. Needs the local federation (``federation sites up``).
``tests/test_mcp_workflow.py`` runs the same :func:`three_step` in the ``slurm`` suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
ROWS = 20_000
PREPARE = (
    "mkdir -p prep && seq 1 {rows} | awk '{{print $1\",\"$1*$1}}' > prep/table.csv"
    " && echo rows=$(wc -l < prep/table.csv) site=$FEDERATION_SITE"
)
GPU_STEP = (
    "test -f prep/table.csv || { echo 'input missing' >&2; exit 4; }; mkdir -p gpu"
    " && { echo rows=$(wc -l < prep/table.csv); echo sha256=$(sha256sum prep/table.csv"
    " | cut -c1-64); echo site=$FEDERATION_SITE; } > gpu/summary.txt && cat gpu/summary.txt"
)


class Agent:
    """An MCP client session's tool calls, counted, failing loudly on a tool error."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: Counter[str] = Counter()

    async def call(self, name: str, args: dict[str, Any]) -> Any:
        self.calls[name] += 1
        res = await self.client.call_tool(name, args)
        if res.is_error:
            raise AssertionError(f"{name} failed: {res.content}")
        return res.structured_content

    async def until(self, cursor: int, oid: str, kinds: set[str], timeout_s: float) -> list[Any]:
        """Events of ``oid`` after ``cursor`` until one of ``kinds`` (await_event only)."""
        seen: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while not kinds & {e["kind"] for e in seen}:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {sorted(kinds)} for {oid} within {timeout_s:.0f} s")
            page = await self.call(
                "await_event", {"after": cursor, "task_ids": [oid], "timeout_s": 20}
            )
            cursor = page["cursor"]
            seen += page["events"]
        return seen

    async def run(
        self, command: str, name: str, envelope: dict[str, Any], timeout_s: float
    ) -> tuple[Any, list[Any], Any]:
        """One step: submit it, wait on its events until it ends, read its result once;
        the submission, its events and the result (an AssertionError if it failed)."""
        sub = await self.call(
            "submit_task", {"command": command, "name": name, "envelope": envelope}
        )
        events = await self.until(
            sub["cursor"], sub["task_id"], {"task.completed", "task.failed"}, timeout_s
        )
        result = (await self.call("get_result", {"task_id": sub["task_id"]}))["result"]
        if result["status"] != "completed":
            raise AssertionError(f"step {name} failed: {result['error']} {result['stderr']}")
        return sub, events, result


def _at(ev: dict[str, Any]) -> float:
    return datetime.fromisoformat(ev["at"]).timestamp()


async def three_step(client: Any, timeout_s: float = 300) -> dict[str, Any]:
    """Run the workflow through ``client`` (an initialized MCP client session); returns what
    each step reported and the timings."""
    agent = Agent(client)
    t0 = time.monotonic()
    snap = await agent.call("inspect_federation", {"refresh": True})
    workspaces = {s["site"]: s["workspace"] for s in snap["sites"]}
    cpu_env = {"sites": ["delta"], "cpus_min": 1, "mem_gb_min": 1, "walltime_s": 300}
    prep, prep_events, r1 = await agent.run(
        PREPARE.format(rows=ROWS), "prepare", cpu_env, timeout_s
    )
    table = next(o for o in r1["outputs"] if o["path"].endswith("table.csv"))

    gpu_env = {
        "sites": ["vista"],
        "gpus_min": 1,
        "mem_gb_min": 1,
        "walltime_s": 300,
        "stage_in": [{"site": "delta", "path": table["path"], "size_bytes": table["size_bytes"]}],
    }
    gpu, gpu_events, r2 = await agent.run(GPU_STEP, "gpu-step", gpu_env, timeout_s)
    summary = next(o for o in r2["outputs"] if o["path"].endswith("summary.txt"))

    back = await agent.call(
        "move_data",
        {
            "source_site": "vista",
            "source_path": summary["path"],
            "dest_site": "local",
            "dest_path": f"results/{summary['path']}",
            "label": "results back",
        },
    )
    back_events = await agent.until(
        back["cursor"], back["transfer_id"], {"transfer.completed", "transfer.failed"}, timeout_s
    )
    total_s = time.monotonic() - t0
    if back_events[-1]["kind"] != "transfer.completed":
        raise AssertionError(f"the results' transfer failed: {back_events[-1]['detail']}")
    staged = next(e for e in gpu_events if e["kind"] == "task.staged")
    back_s = _at(back_events[-1]) - _at(back_events[0])
    moving_s = float(staged["detail"]["staging_s"]) + back_s
    return {
        "workspaces": workspaces,
        "prepare": {"task_id": prep["task_id"], "site": prep["site"], "result": r1},
        "gpu": {"task_id": gpu["task_id"], "site": gpu["site"], "result": r2},
        "back": {"transfer_id": back["transfer_id"], "events": back_events},
        "kinds": {
            "prepare": [e["kind"] for e in prep_events],
            "gpu": [e["kind"] for e in gpu_events],
            "back": [e["kind"] for e in back_events],
        },
        "calls": dict(agent.calls),
        "total_s": round(total_s, 2),
        "staging_s": round(float(staged["detail"]["staging_s"]), 3),
        "results_back_s": round(back_s, 3),
        "moving_share": round(moving_s / total_s, 4),
    }


def run_on(path: str) -> dict[str, Any]:
    """One round of :func:`three_step` on ``path`` (a coordinator of its own)."""
    import anyio
    from mcp import Client

    from federation.deploy.local import LocalSites
    from federation.interfaces.mcp_server import build_server
    from federation.interfaces.service.ops import LocalOps

    sites = LocalSites(path=path)
    sites.up()
    coord = sites.connect(telemetry=False, probe_timeout_s=60)
    ops = LocalOps(coord, refresh_s=3600)

    async def get_ops() -> Any:
        return ops

    async def main() -> dict[str, Any]:
        async with Client(build_server(get_ops)) as c:
            return await three_step(c)

    try:
        return anyio.run(main)
    finally:
        ops.close()
        coord.close()
        sites.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", default="embedded,cloud")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    rows: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for path in args.paths.split(","):
            out = run_on(path)
            rows.append(
                {"path": path}
                | {
                    k: out[k]
                    for k in ("total_s", "staging_s", "results_back_s", "moving_share", "calls")
                }
            )
    table = Table(title="three-step workflow over MCP (events only)")
    for col in ("path", "first call to last result", "staging", "results back", "moving data"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["path"],
            f"{r['total_s']:.1f} s",
            f"{r['staging_s']:.2f} s",
            f"{r['results_back_s']:.2f} s",
            f"{100 * r['moving_share']:.1f}%",
        )
    Console().print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "workflow-latest.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
