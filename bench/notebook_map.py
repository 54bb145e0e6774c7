"""A notebook's map of tiny calls: ``FederatedExecutor.map`` beside the SDK's own Executor.

    .venv/bin/python bench/notebook_map.py                 # 200 calls each, both paths
    .venv/bin/python bench/notebook_map.py --tasks 40 --order sdk-first

Both paths start cold, in one run, one after the other (the queues drained between them,
the sites' probe processes warm as in a running deployment):

* **federated**: a fresh ``FederatedExecutor()`` (its own coordinator over the embedded
  local federation: no snapshot, no block of ours warm, no runtime learned; the sites'
  cold starts measured by earlier coordinators are read from the deployment's telemetry)
  maps ``functions.workloads.square`` over ``range(N)`` with the envelope drafted from the
  function's docstring, its walltime made unique to this run so that no block or user
  endpoint process of the shape is left from an earlier run. Timed from the ``map`` call
  (its first snapshot and every placement included) to the last result.
* **sdk**: a plain ``globus_compute_sdk.Executor`` straight to one site's endpoint
  (``--site``; by default the site the federated map put its calls on, when it ran first,
  else ``local``) with the ``user_endpoint_config`` the coordinator would give the
  smallest shape of the same envelope there (its walltime unique too, so its user endpoint
  process and first block start cold), ``submit`` per call, timed from the first
  ``submit`` to the last result: what the issue calls "one warm block", paid cold.

Printed and written to ``bench/results/notebook-map-latest.json``: each path's wall time,
the ratio, the federated calls per site and shape, the cold-start figures the coordinator
measured, and the first and a later decision's trace. Target (issue 33): the federated map
within 45 s, every result right.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.fanout import drain  # noqa: E402
from bench.perf import RESULTS  # noqa: E402
from federation.core.envelope import ResourceEnvelope  # noqa: E402

TARGET_S = 45.0
OUT = RESULTS / "notebook-map-latest.json"


def unique_walltime_s(salt: int) -> int:
    """A walltime (10-59 min, every site's partitions allow it) that no run of the last
    two days used: the minute of the clock, plus ``salt`` per path."""
    return 600 + (int(time.time()) // 60 * 2 + salt) % 3000


def warm_probes(local: Any) -> None:
    """One probe round through a throwaway coordinator: the sites' probe processes are up,
    as a running deployment's are (an endpoint restarted by a code change starts them
    again; the first round after takes tens of seconds here). The task shape's user
    endpoint process and blocks stay cold."""
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    try:
        coord.inspect_federation()
    finally:
        coord.close()
        local.close()


def run_federated(
    n: int, walltime_s: int, timeout_s: float, only: tuple[str, ...] = (), measured: bool = True
) -> dict[str, Any]:
    from federation.deploy.connect import connect
    from federation.interfaces.jupyter.executor import FederatedExecutor
    from federation.runtime.warmth import warmth_of
    from functions.workloads import square

    t_make = time.perf_counter()
    if measured:
        ex = FederatedExecutor()  # a fresh coordinator over the embedded local federation
    else:  # as a new deployment: no telemetry, so no cold start measured anywhere yet
        conn = connect(telemetry=False)
        ex = FederatedExecutor(conn.coord)
    made_s = time.perf_counter() - t_make
    try:
        env = ex.draft(square).envelope.model_copy(update={"walltime_s": walltime_s, "sites": only})
        t0 = time.perf_counter()
        results = list(ex.map(square, range(n), envelope=env, timeout=timeout_s))
        wall_s = time.perf_counter() - t0
        futs = ex.futures
        sites = Counter(f.placement.site for f in futs)
        shapes = Counter(f.decision.chosen.shape.describe() for f in futs)
        first, later = futs[0].decision.explain(), futs[min(n - 1, 10)].decision.explain()
        figures = warmth_of(ex.coordinator).starts.figures()
        t_map = datetime.now(UTC).timestamp() - (time.perf_counter() - t0)
        starts = sorted(
            f.handle.started_at.timestamp() - t_map for f in futs if f.handle.started_at
        )
        placed_at = sorted(f.handle.submitted_at.timestamp() - t_map for f in futs)
        calls = [
            {
                "i": i,
                "site": f.placement.site,
                "placed_s": round(f.handle.submitted_at.timestamp() - t_map, 2),
                "start_s": round(f.handle.started_at.timestamp() - t_map, 2)
                if f.handle.started_at
                else None,
                "attempts": len(f.handle.attempts),
                "why": f.decision.chosen.why[:160],
            }
            for i, f in enumerate(futs)
        ]
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
        if not measured:
            conn.close()
    return {
        "telemetry": measured,
        "first_placed_s": round(placed_at[0], 2),
        "last_placed_s": round(placed_at[-1], 2),
        "first_start_s": round(starts[0], 2) if starts else None,
        "last_start_s": round(starts[-1], 2) if starts else None,
        "tasks": n,
        "right": sum(1 for i, r in enumerate(results) if r == i * i),
        "wall_s": round(wall_s, 2),
        "executor_made_s": round(made_s, 2),
        "envelope": env.model_dump(mode="json", exclude={"rationale"}),
        "sites": dict(sites),
        "shapes": dict(shapes),
        "cold_start_measured_s": {s: round(v, 2) for s, v in figures.items()},
        "calls": calls,
        "first_decision": first.splitlines()[:3],
        "later_decision": later.splitlines()[:3],
    }


def run_sdk(n: int, site: str, envelope: ResourceEnvelope, timeout_s: float) -> dict[str, Any]:
    from federation.deploy.local import LocalSites
    from federation.endpoint.manager import local_endpoint_id
    from federation.sites.user_config import shape_to_user_config
    from functions.workloads import square

    local = LocalSites()
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    assert local.service is not None
    ex = None
    try:
        env = envelope.model_copy(update={"sites": (site,)})
        sh = min(
            (c.shape for c in coord.plan(env).candidates),
            key=lambda s: (s.gpus, s.cpus, s.mem_gb),
        )
        uec = shape_to_user_config(
            partition=sh.partition,
            nodes=sh.nodes,
            cpus=sh.cpus,
            mem_gb=sh.mem_gb,
            gpus=sh.gpus,
            walltime_s=sh.walltime_s,
            account=sh.account,
        )
        client = coord.backends[site].client  # type: ignore[attr-defined]
        ex = local.service.executor(local_endpoint_id(site), client, user_endpoint_config=uec)
        t0 = time.perf_counter()
        futs = [ex.submit(square, i) for i in range(n)]
        results = [f.result(timeout=timeout_s) for f in futs]
        wall_s = time.perf_counter() - t0
    finally:
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)
        coord.close()
        local.close()
    return {
        "tasks": n,
        "right": sum(1 for i, r in enumerate(results) if r == i * i),
        "wall_s": round(wall_s, 2),
        "site": site,
        "shape": sh.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument(
        "--site",
        default="same",
        help="the SDK path's site: 'same' (default) is the site the federated map put most of "
        "its calls on when it ran first, else local",
    )
    ap.add_argument("--order", choices=("federated-first", "sdk-first"), default="federated-first")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--paths", default="federated,sdk", help="which paths to run")
    ap.add_argument(
        "--federated-sites", default="", help="restrict the map to these sites (default: all)"
    )
    ap.add_argument(
        "--new-deployment",
        action="store_true",
        help="the federated coordinator without telemetry: no cold start measured yet",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    console = Console()

    from federation.deploy.local import LocalSites
    from federation.interfaces.jupyter.executor import describe_function
    from federation.placement.drafting import draft_envelope
    from functions.workloads import square

    local = LocalSites()
    console.print(f"sites up: {local.up()}")
    sites = [s.name for s in local.specs]
    drafted = draft_envelope(describe_function(square), list(local.specs)).envelope
    runs: dict[str, dict[str, Any]] = {}
    order = ("federated", "sdk") if args.order == "federated-first" else ("sdk", "federated")
    order = tuple(p for p in order if p in args.paths.split(","))
    for i, path in enumerate(order):
        warm_probes(local)
        drain(local, sites)  # nothing of an earlier path's still running or queued
        wall = unique_walltime_s(salt=i)
        console.print(f"{path}: {args.tasks} calls of square, cold (walltime {wall} s) ...")
        load = os.getloadavg()[0]
        if path == "federated":
            only = tuple(x for x in args.federated_sites.split(",") if x)
            runs[path] = run_federated(
                args.tasks, wall, args.timeout_s, only, measured=not args.new_deployment
            )
        else:
            env = drafted.model_copy(update={"walltime_s": wall})
            site = args.site
            if site == "same":
                fed_sites = runs.get("federated", {}).get("sites") or {"local": 1}
                site = max(fed_sites, key=fed_sites.__getitem__)
            runs[path] = run_sdk(args.tasks, site, env, args.timeout_s)
        runs[path]["load_1min"] = [round(load, 1), round(os.getloadavg()[0], 1)]
        console.print(f"  { ({k: v for k, v in runs[path].items() if k != 'calls'}) }")
    if len(runs) < 2:
        args.out.write_text(json.dumps(runs, indent=2) + "\n")
        return 0
    fed, sdk = runs["federated"], runs["sdk"]
    result = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "order": list(order),
        "tasks": args.tasks,
        "federated": fed,
        "sdk": sdk,
        "ratio_federated_to_sdk": round(fed["wall_s"] / sdk["wall_s"], 2),
        "target_s": TARGET_S,
        "target_met": fed["wall_s"] <= TARGET_S and fed["right"] == args.tasks,
    }
    table = Table(title=f"map of {args.tasks} tiny calls, cold, side by side")
    for col in ("path", "wall s", "right", "where"):
        table.add_column(col)
    table.add_row(
        "FederatedExecutor.map",
        f"{fed['wall_s']:.1f}",
        str(fed["right"]),
        ", ".join(f"{s} {k}" for s, k in sorted(fed["sites"].items())),
    )
    table.add_row("SDK Executor", f"{sdk['wall_s']:.1f}", str(sdk["right"]), sdk["shape"])
    console.print(table)
    console.print(
        f"ratio federated / SDK: {result['ratio_federated_to_sdk']}x; target "
        f"{TARGET_S:.0f} s: {'met' if result['target_met'] else 'MISSED'}; shapes "
        f"{fed['shapes']}; cold starts measured {fed['cold_start_measured_s']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"written: {args.out}")
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
