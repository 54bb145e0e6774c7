"""What an agent and a notebook wait for, side by side in one run.

    .venv/bin/python bench/agent_latency.py             # 3 rounds
    .venv/bin/python bench/agent_latency.py --rounds 5

1. MCP over stdio, as an agent drives it, each session on freshly restarted endpoints (as
   right after ``federation sites up``: their engines not started yet): start
   ``federation-mcp`` (embedded coordinator over the local sites), initialize, and time the
   first call. Session A calls ``inspect_federation`` as an agent does (answered from the
   snapshot kept by the server's background probing, or ``probing`` while the first round
   is still out); session B calls ``inspect_federation(refresh=true)``, a blocking probe
   round of every site: what every first call cost before the server probed in the
   background.
2. ``FederatedExecutor.submit``: the time until ``submit`` returns the future beside the
   time until the task is placed and shipped (``wait_placed``), per task.

Needs the local federation (``federation sites up``). Writes
``bench/results/agent-latency-latest.json`` and prints a table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from federation.core.paths import federation_home  # noqa: E402
from federation.deploy.local import LocalSites  # noqa: E402
from federation.interfaces.jupyter.executor import FederatedExecutor  # noqa: E402
from functions.workloads import square  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _cold_endpoints() -> None:
    """Restart every local endpoint daemon: their engines start again on the next probe."""
    local = LocalSites()
    for spec in local.specs:
        local.daemons.stop(spec.name)
    local.up()


async def _mcp_session(refresh: bool) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "federation.interfaces.mcp_cli", "--no-up"],
        env={**os.environ, "FEDERATION_HOME": str(federation_home()), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    t_start = time.perf_counter()
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        t_init = time.perf_counter()
        res = await s.call_tool("inspect_federation", {"refresh": True} if refresh else {})
        t_first = time.perf_counter()
        assert not res.is_error, res.content
        first = res.structured_content or {}
    return {
        "start_to_initialized_s": t_init - t_start,
        "first_inspect_s": t_first - t_init,
        "status": first.get("status"),
    }


def _mcp_round() -> dict[str, Any]:
    _cold_endpoints()
    agent = anyio.run(_mcp_session, False)
    _cold_endpoints()
    blocking = anyio.run(_mcp_session, True)
    return {
        "first_inspect_s": agent["first_inspect_s"],
        "first_inspect_status": agent["status"],
        "blocking_probe_round_s": blocking["first_inspect_s"],
        "start_to_initialized_s": agent["start_to_initialized_s"],
    }


def _executor_round(n: int) -> dict[str, list[float]]:
    returned, placed = [], []
    with FederatedExecutor() as ex:
        ex.snapshot()  # connected and probed once: what is timed is submit itself
        for i in range(n):
            t0 = time.perf_counter()
            f = ex.submit(square, i, hints={"known_runtime_s": 5})
            returned.append(time.perf_counter() - t0)
            f.wait_placed()
            placed.append(time.perf_counter() - t0)
            f.result(timeout=300)
    return {"submit_returned_s": returned, "placed_and_shipped_s": placed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=5, help="executor tasks per round")
    args = ap.parse_args(argv)
    mcp_rows = [_mcp_round() for _ in range(args.rounds)]
    ex_rows = [_executor_round(args.tasks) for _ in range(args.rounds)]

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    first = med([r["first_inspect_s"] for r in mcp_rows])
    blocking = med([r["blocking_probe_round_s"] for r in mcp_rows])
    ret = med([x for r in ex_rows for x in r["submit_returned_s"]])
    placed = med([x for r in ex_rows for x in r["placed_and_shipped_s"]])
    table = Table(title=f"agent and notebook latency (medians of {args.rounds} rounds)")
    for col in ("measure", "this", "beside it", "ratio"):
        table.add_column(col)
    table.add_row(
        "MCP first inspect_federation (cold endpoints) vs a blocking probe round",
        f"{first:.3f} s",
        f"{blocking:.3f} s",
        f"{blocking / first:.1f}x" if first > 0 else "-",
    )
    table.add_row(
        "FederatedExecutor.submit returns vs placed and shipped",
        f"{ret * 1000:.2f} ms",
        f"{placed * 1000:.0f} ms",
        f"{placed / ret:.0f}x" if ret > 0 else "-",
    )
    Console().print(table)
    statuses = [r["first_inspect_status"] for r in mcp_rows]
    print(f"first inspect status per round: {statuses}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "agent-latency-latest.json"
    out.write_text(json.dumps({"mcp": mcp_rows, "executor": ex_rows}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
