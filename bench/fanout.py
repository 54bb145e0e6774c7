"""Fan-out benchmark: many tasks of few shapes, both paths side by side, SDK limits on.

    .venv/bin/python bench/fanout.py                       # every scenario, both paths
    .venv/bin/python bench/fanout.py --only tiny200 --paths cloud

A durable coordinator (scratch store), as a deployment runs, with the SDK's own client-side
limits as it ships them and the stand-in service's request rate limit on. Scenarios:

* ``sleep64``: 64 tasks ``sleep 10`` (1 CPU) on site ``local`` (16 idle CPUs): the ideal is
  4 waves of 10 s; the target is 1.5x that (60 s) from the first ``submit_task`` to the last
  result.
* ``tiny200``: 200 tasks ``true`` of one shape on ``local``: wall time (the cloud path's
  against the embedded one's), ``submit_task`` latency (P50/P95), submission requests the
  service received, and the most user endpoint processes the site ran at once.
* ``shapes4``: 200 tasks over 4 shapes on 2 sites (``local``, ``delta``): user endpoint
  processes per site at most (shapes + 1 for the probe).
* ``hedged``: Delta's CPU nodes full (filler jobs), 12 tasks ``sleep 2`` placed on Delta
  first with a hedged copy on ``local`` (a policy that prefers Delta whatever its queue):
  every task is won by its ``local`` copy, and the Delta copies are withdrawn. Then Delta
  frees up (the fillers cancelled, 45 s waited): ``sacct`` lists every batch job of ours
  since the start, none of which may have started, and each task's own file shows how
  often it ran (twice: a copy whose withdrawal did not hold).
* ``sleep8`` and ``tiny30``: the issue's own tables (8 tasks ``sleep 10`` and 30 tasks
  ``echo`` on ``local``), ``submit_task`` called as a new user would, without a snapshot.

Before each scenario the sites' queues are left to drain. Writes
``bench/results/fanout-latest.json`` and prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench.load import Tally  # noqa: E402
from bench.perf import RESULTS, quantile  # noqa: E402
from federation.core.envelope import ResourceEnvelope  # noqa: E402
from federation.core.tasks import ShellTask  # noqa: E402

SCENARIOS = ("sleep8", "tiny30", "sleep64", "tiny200", "shapes4", "hedged")
AS_A_NEW_USER = ("sleep8", "tiny30")
"""Scenarios of the issue's own tables: ``submit_task`` called as a new user would (no
snapshot passed: the coordinator probes when its snapshot is older than 2 s)."""


def identity_for(path: str) -> str:
    """The identity the run's tasks reach the endpoints with (the stand-in's client has no
    token: ``anonymous``; the embedded path's service marks its own)."""
    return "anonymous" if path == "cloud" else "embedded:anonymous"


class Sampler:
    """Samples, every 0.5 s, how many user endpoint processes each site runs for the run's
    own identity (from the endpoint's status report: another path's processes, still
    idling out, are not the run's)."""

    def __init__(self, local: Any, sites: list[str], identity: str) -> None:
        self.local = local
        self.identity = identity
        self.most: dict[str, int] = dict.fromkeys(sites, 0)
        self.seen: dict[str, set[int]] = {s: set() for s in sites}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for site in self.most:
                report = self.local.daemons.report(site) or {}
                pids = {
                    int(u["pid"])
                    for u in report.get("user_endpoints", [])
                    if u.get("identity") == self.identity and u.get("state") != "stopping"
                }
                self.most[site] = max(self.most[site], len(pids))
                self.seen[site] |= pids
            self._stop.wait(0.5)


class Requests:
    """Counts the submission requests (and 429 answers) the stand-in service receives."""

    def __init__(self, service: Any) -> None:
        self.submits = 0
        self.refused_429 = 0
        self.all = 0
        inner = service.handle

        def handle(method: str, path: str, body: Any, *args: Any, **kwargs: Any) -> Any:
            answer = inner(method, path, body, *args, **kwargs)  # (status, payload, headers)
            status = answer[0]
            self.all += 1
            if method == "POST" and path.endswith("/submit"):
                uec = (body or {}).get("user_endpoint_config") or {}
                if uec.get("profile") != "probe":
                    self.submits += 1
            if status == 429:
                self.refused_429 += 1
            return answer

        service.handle = handle


def drain(local: Any, sites: list[str], timeout_s: float = 300.0) -> None:
    """Wait until the sites' queues hold none of our batch jobs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = False
        for s in sites:
            out = local.slurm.run(s, ["squeue", "--noheader", "--format=%j|%r"]).stdout
            busy = busy or any(  # a withdrawn copy's held block uses nothing: not waited for
                ln.startswith(("fed.", "parsl")) and not ln.endswith("|JobHeldUser")
                for ln in out.splitlines()
            )
        if not busy:
            return
        time.sleep(1.0)


def run_scenario(local: Any, coord: Any, name: str, timeout_s: float) -> dict[str, Any]:
    plans: list[tuple[ShellTask, ResourceEnvelope]] = []
    if name == "sleep8":
        env = ResourceEnvelope(sites=("local",), cpus_min=1, walltime_s=600)
        plans = [(ShellTask(command="sleep 10"), env)] * 8
        sites = ["local"]
    elif name == "tiny30":
        env = ResourceEnvelope(sites=("local",), cpus_min=1, walltime_s=600)
        plans = [(ShellTask(command=f"echo {i}"), env) for i in range(30)]
        sites = ["local"]
    elif name == "sleep64":
        env = ResourceEnvelope(sites=("local",), cpus_min=1, walltime_s=600)
        # each task says its batch job and when it ran (where the time went: the timeline)
        timed = 'echo "$SLURM_JOB_ID $(date +%s.%N)"; sleep 10; date +%s.%N'
        plans = [(ShellTask(command=timed), env)] * 64
        sites = ["local"]
    elif name == "tiny200":
        env = ResourceEnvelope(sites=("local",), cpus_min=1, walltime_s=600)
        plans = [(ShellTask(command="true"), env)] * 200
        sites = ["local"]
    else:
        sites = ["local", "delta"]
        shapes = [
            ResourceEnvelope(sites=(s,), cpus_min=c, walltime_s=w)
            for s in sites
            for c in (1, 2)
            for w in (600, 900)
        ]
        plans = [(ShellTask(command="true"), shapes[i % len(shapes)]) for i in range(200)]
    drain(local, sites)
    snap = None if name in AS_A_NEW_USER else coord.inspect_federation()
    tally = Tally()
    req = Requests(local.service)
    latencies: list[float] = []
    placed: dict[str, int] = {}
    handles: list[Any] = []
    with Sampler(local, sites, identity_for(local.path)) as sampler:
        t0 = time.perf_counter()
        for task, env in plans:
            a = time.perf_counter()
            h = coord.submit_task(task, env, on_event=tally, snapshot=snap)
            latencies.append(time.perf_counter() - a)
            handles.append(h)
            key = f"{h.site}/{h.decision.chosen.shape.describe()}"
            placed[key] = placed.get(key, 0) + 1
        t_sub = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while tally.terminal < len(plans) and time.monotonic() < deadline:
            time.sleep(0.1)
        t_end = time.perf_counter()
    n = len(plans)
    timeline = _timeline(coord, handles, time.time() - (time.perf_counter() - t0))
    return {
        **timeline,
        "tasks": n,
        "completed": tally.completed,
        "failed": tally.failed,
        "errors": tally.errors[:5],
        "unaccounted": n - tally.terminal,
        "wall_s": round(t_end - t0, 2),
        "submit_s": round(t_sub - t0, 2),
        "submit_p50_ms": round(1000 * quantile(latencies, 0.5), 2),
        "submit_p95_ms": round(1000 * quantile(latencies, 0.95), 2),
        "submit_max_ms": round(1000 * max(latencies), 2),
        "submit_requests": req.submits,
        "requests_429": req.refused_429,
        "requests_all": req.all,
        "shapes": len(placed),
        "placed": placed,
        "user_endpoints_most": sampler.most,
        "user_endpoints_seen": {s: len(p) for s, p in sampler.seen.items()},
    }


def _timeline(coord: Any, handles: list[Any], t0_epoch: float) -> dict[str, Any]:
    """For tasks that print ``<job> <start>`` and ``<end>`` (``sleep64``): when the first
    task started, when the 16th did (every CPU busy), the last start, and how many batch
    jobs ran them, in seconds from the first ``submit_task``."""
    starts, jobs = [], set()
    for h in handles:
        try:
            r = coord.get_result(h, timeout_s=1)
            first = (r.stdout or "").strip().splitlines()[0].split()
            if len(first) != 2:
                return {}
            jobs.add(first[0])
            starts.append(float(first[1]) - t0_epoch)
        except Exception:
            return {}
    if not starts:
        return {}
    starts.sort()
    return {
        "first_start_s": round(starts[0], 1),
        "sixteenth_start_s": round(starts[min(15, len(starts) - 1)], 1),
        "last_start_s": round(starts[-1], 1),
        "batch_jobs": len(jobs),
    }


FILL_TAG = "fed-bench-fill"


def run_hedged(local: Any, scratch: Path, timeout_s: float, n: int = 12) -> dict[str, Any]:
    """Hedged copies on a full site: the Delta copies are withdrawn, and none started."""
    from federation.placement.policies import Policy

    drain(local, ["delta", "local"])
    since = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")  # the clusters' local time
    delta_first = Policy(
        name="delta-first-hedge",
        key=lambda c: (0.0 if c.site == "delta" else 1.0, c.predicted_wait_s),
        hedge_within=0.0,
    )
    coord = local.connect(
        telemetry=False, durable=True, store_path=scratch / "hedged.db", policy=delta_first
    )
    for _ in range(4):  # Delta's CPU nodes full, with more waiting behind
        local.slurm.run(
            "delta",
            [
                "sbatch",
                f"--job-name={FILL_TAG}",
                "--partition=cpu",
                "--cpus-per-task=128",
                "--mem=8G",
                "--time=00:30:00",
                "--output=/dev/null",
                "--wrap=sleep 600",
            ],
        )
    time.sleep(1.5)
    env = ResourceEnvelope(sites=("delta", "local"), cpus_min=1, walltime_s=600)
    tally = Tally()
    try:
        t0 = time.perf_counter()
        marks = scratch / "ran"
        marks.mkdir(exist_ok=True)
        handles = [  # each run of task i adds a line to its own file: two lines, two runs
            coord.submit_task(
                ShellTask(command=f"echo $SLURM_CLUSTER_NAME >> {marks / str(i)}; sleep 2"),
                env,
                on_event=tally,
            )
            for i in range(n)
        ]
        deadline = time.monotonic() + timeout_s
        while tally.terminal < n and time.monotonic() < deadline:
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        copies: dict[str, int] = {}
        for h in handles:
            for c in h.copies:
                key = f"{c.site}:{c.state}"
                copies[key] = copies.get(key, 0) + 1
        time.sleep(5)  # withdrawals of the last copies land
        # then Delta frees up: a copy whose withdrawal did not hold would start now
        local.slurm.run("delta", ["scancel", f"--name={FILL_TAG}"])
        time.sleep(45)
        acct = local.slurm.run(
            "delta",
            ["sacct", "-X", "-a", "-n", "-P", "-S", since, "-o", "JobID,JobName,State,Start"],
        ).stdout
        ours = [ln.split("|") for ln in acct.splitlines() if ln and FILL_TAG not in ln]
        started = [r for r in ours if r[3] not in ("Unknown", "None", "")]
        runs = [len(f.read_text().split()) for f in marks.iterdir()]
    finally:
        local.slurm.run("delta", ["scancel", f"--name={FILL_TAG}"])
        coord.close()
    return {
        "tasks": n,
        "completed": tally.completed,
        "failed": tally.failed,
        "errors": tally.errors[:5],
        "wall_s": round(wall, 2),
        "copies": copies,
        "won_at_local": sum(1 for h in handles if h.site == "local"),
        "delta_jobs": len(ours),
        "delta_jobs_started": len(started),
        "ran_twice": sum(1 for r in runs if r > 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--paths", default="embedded,cloud")
    ap.add_argument("--policy", default=None, help="placement policy (default: auto)")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "fanout-latest.json")
    args = ap.parse_args(argv)
    console = Console()
    from federation.deploy.local import LocalSites

    out: dict[str, Any] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "policy": args.policy or "auto",
        "cpus": os.cpu_count(),
        "runs": {},
    }
    scenarios = [s for s in args.only.split(",") if s]
    for path in [p for p in args.paths.split(",") if p]:
        local = LocalSites(path=path)
        local.up()
        with tempfile.TemporaryDirectory() as scratch:
            policy = {"policy": args.policy} if args.policy else {}
            coord = local.connect(
                telemetry=False,
                durable=True,
                store_path=Path(scratch) / "coordinator.db",
                **policy,
            )
            try:
                for name in scenarios:
                    console.print(f"[bold]{path}[/]: {name} ...")
                    if name == "hedged":
                        res = run_hedged(local, Path(scratch), args.timeout_s)
                        out["runs"][f"{path}/{name}"] = res
                        console.print(json.dumps(res))
                        continue
                    res = run_scenario(local, coord, name, args.timeout_s)
                    out["runs"][f"{path}/{name}"] = res
                    console.print(json.dumps(res))
            finally:
                coord.close()
                local.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    console.print(summary_table(out))
    console.print(
        f"written: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
    )
    return 0


def summary_table(out: dict[str, Any]) -> Table:
    t = Table(title=f"fan-out ({out['policy']}, SDK limits on, durable coordinator)")
    for col in (
        "run",
        "done/tasks",
        "wall s",
        "target",
        "submit P95 ms",
        "requests",
        "429s",
        "UEPs most",
    ):
        t.add_column(col)
    runs = out["runs"]
    for key, r in runs.items():
        path, name = key.split("/")
        if name == "hedged":
            t.add_row(
                key,
                f"{r['completed']}/{r['tasks']}",
                f"{r['wall_s']:.1f}",
                f"Delta jobs started: {r['delta_jobs_started']} of {r['delta_jobs']} (0); "
                f"ran twice: {r.get('ran_twice', '?')} (0)",
                "",
                "",
                "",
                ", ".join(f"{k}: {v}" for k, v in sorted(r["copies"].items())),
            )
            continue
        target = ""
        if name == "sleep64":
            target = f"<= 60 s: {'met' if r['wall_s'] <= 60 and not r['failed'] else 'MISSED'}"
        elif name == "tiny200" and path == "cloud" and "embedded/tiny200" in runs:
            ratio = r["wall_s"] / max(runs["embedded/tiny200"]["wall_s"], 1e-9)
            target = f"{ratio:.2f}x embedded (<= 1.5x)"
        t.add_row(
            key,
            f"{r['completed']}/{r['tasks']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
            f"{r['wall_s']:.1f}",
            target,
            f"{r['submit_p95_ms']:.1f}",
            str(r["submit_requests"]),
            str(r["requests_429"]),
            ", ".join(f"{s}: {n}" for s, n in r["user_endpoints_most"].items()),
        )
    return t


if __name__ == "__main__":
    sys.exit(main())
