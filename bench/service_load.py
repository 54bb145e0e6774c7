"""The HTTP service as a center runs it: many callers at once, and a SIGKILL in the middle.

    .venv/bin/python bench/service_load.py                 # every part, local sites up
    .venv/bin/python bench/service_load.py --only callers  # one part: callers|kill|burst

The service runs in a process of its own, as ``federation serve`` builds it (a durable
coordinator over the local sites, the policy gate, tokens), with a store of this run's own
under a temporary folder (the home's ``coordinator.db`` is not touched).

1. **callers**: ``--callers`` (20) callers, each with its own token, submit ``--tasks`` (10)
   shell tasks at once (``echo <caller>-<i>``), then long-poll their own events until every
   task ended. Reported: ``POST /v1/tasks`` latency P50/P95/max, the wall time until the
   last task ended, and the checks: every task completed with its own output, every
   caller's cursor gap-free.
2. **kill**: ``--kill-callers`` (10) callers x ``--kill-tasks`` (6) tasks (``sleep 2; echo``).
   Each submits half, the service is SIGKILLed, restarted on the same store, and each
   submits the rest; then each long-polls from the cursor it held before the kill until
   all its tasks ended. Checked: every task completed once with its own output, nothing
   lost, nothing twice, cursors gap-free across the restart; reported: the restart time.
3. **burst**: one caller's burst of ``--burst`` (1000) submissions through the Python API
   on a durable coordinator, back to back: submissions per second and the latency
   percentiles (the tasks run afterwards; the run waits for none of them).

Writes ``bench/results/service-load-latest.json`` (a part run alone replaces that part's
figures only).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
READY_TIMEOUT_S = 300.0


# --- the service process ------------------------------------------------------------------
def child(port: int, store: Path, tokens: Path) -> None:
    """Serve a durable coordinator over the local sites (what ``federation serve`` runs)."""
    import uvicorn

    from federation.deploy.local import LocalSites
    from federation.interfaces.service.app import create_app
    from federation.security.policy import PolicyGate
    from federation.security.tokens import TokenStore

    local = LocalSites()
    local.up()
    coord = local.connect(durable=True, store_path=store, gate=PolicyGate.from_home(local.home))
    app = create_app(coord, TokenStore(tokens))
    try:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()


class Service:
    """The service process: started, waited for, SIGKILLed, restarted on the same store."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.store = work / "coordinator.db"
        self.tokens = work / "tokens.db"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = (work / "service.log").open("ab")

    def start(self, probe_token: str) -> float:
        """Start it and wait until it answers with a snapshot; returns the seconds taken."""
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child", *map(str, (self.port, self.store, self.tokens))],
            stdout=self.log,
            stderr=self.log,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        headers = {"Authorization": f"Bearer {probe_token}"}
        while time.monotonic() - t0 < READY_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited: see {self.work / 'service.log'}")
            try:
                r = httpx.get(f"{self.url}/v1/federation", headers=headers, timeout=5)
                if r.status_code == 200 and r.json().get("sites"):
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.5)  # waiting for a process to come up: nothing to wait on instead
        raise TimeoutError(f"the service did not answer within {READY_TIMEOUT_S:.0f} s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _issue(tokens: Path, names: list[str]) -> dict[str, str]:
    from federation.security.tokens import TokenStore

    store = TokenStore(tokens)
    return {n: store.issue(n).token for n in names}


# --- one caller -----------------------------------------------------------------------------
class Caller:
    """One caller: its token, its tasks, its cursor and the events it saw."""

    def __init__(self, name: str, token: str, url: str) -> None:
        self.name = name
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        self.tasks: dict[str, str] = {}  # task id -> the output it must print
        self.latencies_s: list[float] = []
        self.cursor: int | None = None
        self.seen: list[dict[str, Any]] = []
        self.errors: list[str] = []

    def submit(self, index: int, command: str, expect: str) -> None:
        body = {"command": command, "name": f"{self.name}-{index}", "envelope": {"cpus_min": 1}}
        t0 = time.monotonic()
        r = self.http.post("/v1/tasks", json=body)
        self.latencies_s.append(time.monotonic() - t0)
        if r.status_code >= 300:
            self.errors.append(f"submit {index}: {r.status_code} {r.text[:200]}")
            return
        data = r.json()
        self.tasks[data["task_id"]] = expect
        if self.cursor is None:
            self.cursor = int(data["cursor"])

    def follow(self, deadline: float) -> None:
        """Long-poll own events from the cursor until every task ended (or the deadline)."""
        ended: set[str] = set()
        cursor = self.cursor or 0
        while ended < set(self.tasks) and time.monotonic() < deadline:
            left = max(1.0, min(30.0, deadline - time.monotonic()))
            r = self.http.get("/v1/events", params={"after": cursor, "timeout_s": left})
            if r.status_code != 200:
                self.errors.append(f"events after {cursor}: {r.status_code} {r.text[:200]}")
                return
            page = r.json()
            for ev in page["events"]:
                self.seen.append(ev)
                if ev["kind"] in ("task.completed", "task.failed"):
                    ended.add(ev["task_id"])
            cursor = int(page["cursor"])
        self.cursor = cursor
        if ended < set(self.tasks):
            self.errors.append(f"{len(set(self.tasks) - ended)} task(s) never ended")

    def check(self) -> None:
        """Own output per task, each ended once, the cursor gap-free."""
        ends = Counter(
            e["task_id"]
            for e in self.seen
            if e["kind"].startswith("task.") and e["kind"] in ("task.completed", "task.failed")
        )
        for tid, expect in self.tasks.items():
            if ends[tid] != 1:
                self.errors.append(f"task {tid} ended {ends[tid]} time(s)")
                continue
            st = self.http.get(f"/v1/tasks/{tid}").json()
            res = st.get("result") or {}
            if res.get("status") != "completed" or (res.get("stdout") or "").strip() != expect:
                self.errors.append(
                    f"task {tid}: {res.get('status')} {res.get('stdout')!r} {res.get('error')!r}"
                )
        seqs = [int(e["seq"]) for e in self.seen]
        if seqs and seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            self.errors.append(f"cursor gaps: {seqs}")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _latency(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50_ms": round(statistics.median(xs) * 1000, 1),
        "p95_ms": round(_pct(xs, 0.95) * 1000, 1),
        "max_ms": round(max(xs) * 1000, 1),
    }


def _run_all(callers: list[Caller], fn: Any) -> None:
    threads = [threading.Thread(target=fn, args=(c,)) for c in callers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --- the parts ---------------------------------------------------------------------------------
def many_callers(work: Path, n_callers: int, n_tasks: int) -> dict[str, Any]:
    svc = Service(work)
    tokens = _issue(svc.tokens, [f"c{i}" for i in range(n_callers)])
    ready_s = svc.start(tokens["c0"])
    callers = [Caller(n, t, svc.url) for n, t in tokens.items()]
    try:
        t0 = time.monotonic()

        def submit_all(c: Caller) -> None:
            for i in range(n_tasks):
                c.submit(i, f"echo {c.name}-{i}", f"{c.name}-{i}")

        _run_all(callers, submit_all)
        submitted_s = time.monotonic() - t0
        deadline = time.monotonic() + 600
        _run_all(callers, lambda c: c.follow(deadline))
        wall_s = time.monotonic() - t0
        _run_all(callers, Caller.check)
    finally:
        svc.stop()
    lat = [x for c in callers for x in c.latencies_s]
    errors = [f"{c.name}: {e}" for c in callers for e in c.errors]
    by_round = [
        _latency([c.latencies_s[i] for c in callers if len(c.latencies_s) > i])
        for i in range(n_tasks)
    ]
    return {
        "callers": n_callers,
        "submit_latency_by_round": by_round,
        "tasks_each": n_tasks,
        "service_ready_s": round(ready_s, 1),
        "submit_latency": _latency(lat),
        "all_submitted_s": round(submitted_s, 2),
        "all_done_s": round(wall_s, 1),
        "tasks": sum(len(c.tasks) for c in callers),
        "errors": errors[:20],
        "ok": not errors,
    }


def kill_in_the_middle(work: Path, n_callers: int, n_tasks: int) -> dict[str, Any]:
    svc = Service(work)
    tokens = _issue(svc.tokens, [f"k{i}" for i in range(n_callers)])
    svc.start(tokens["k0"])
    callers = [Caller(n, t, svc.url) for n, t in tokens.items()]
    half = n_tasks // 2

    def first_half(c: Caller) -> None:
        for i in range(half):
            c.submit(i, f"sleep 2; echo {c.name}-{i}", f"{c.name}-{i}")

    def second_half(c: Caller) -> None:
        for i in range(half, n_tasks):
            c.submit(i, f"sleep 2; echo {c.name}-{i}", f"{c.name}-{i}")

    try:
        _run_all(callers, first_half)
        svc.kill()
        t0 = time.monotonic()
        restart_s = svc.start(tokens["k0"])
        _run_all(callers, second_half)
        deadline = time.monotonic() + 900
        _run_all(callers, lambda c: c.follow(deadline))
        wall_s = time.monotonic() - t0
        _run_all(callers, Caller.check)
    finally:
        svc.stop()
    errors = [f"{c.name}: {e}" for c in callers for e in c.errors]
    return {
        "callers": n_callers,
        "tasks_each": n_tasks,
        "killed_after": half,
        "restart_s": round(restart_s, 1),
        "done_after_restart_s": round(wall_s, 1),
        "tasks": sum(len(c.tasks) for c in callers),
        "errors": errors[:20],
        "ok": not errors and all(len(c.tasks) == n_tasks for c in callers),
    }


def burst(work: Path, n: int) -> dict[str, Any]:
    from federation.core.envelope import ResourceEnvelope
    from federation.core.tasks import ShellTask
    from federation.deploy.local import LocalSites

    local = LocalSites()
    local.up()
    coord = local.connect(durable=True, store_path=work / "burst.db")
    env = ResourceEnvelope(cpus_min=1)
    try:
        coord.submit_task(ShellTask(command="echo first"), env)  # the first snapshot
        lat: list[float] = []
        t0 = time.monotonic()
        for i in range(n):
            t = time.monotonic()
            coord.submit_task(ShellTask(command=f"echo {i}"), env)
            lat.append(time.monotonic() - t)
        wall_s = time.monotonic() - t0
        sites = Counter(h.site for h in coord.live_handles())
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
    return {
        "submissions": n,
        "wall_s": round(wall_s, 2),
        "per_s": round(n / wall_s, 1),
        "latency": _latency(lat),
        "sites": dict(sites),
    }


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["callers", "kill", "burst"], action="append")
    ap.add_argument("--callers", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--kill-callers", type=int, default=10)
    ap.add_argument("--kill-tasks", type=int, default=6)
    ap.add_argument("--burst", type=int, default=1000)
    args = ap.parse_args()
    parts = args.only or ["callers", "kill", "burst"]
    out: dict[str, Any] = {"at": datetime.now(UTC).isoformat(timespec="seconds")}
    with tempfile.TemporaryDirectory(prefix="service-load-") as tmp:
        if "callers" in parts:
            w = Path(tmp, "callers")
            w.mkdir()
            out["callers"] = r = many_callers(w, args.callers, args.tasks)
            lat = r["submit_latency"]
            print(
                f"{r['callers']} callers x {r['tasks_each']} tasks: POST /v1/tasks P50 "
                f"{lat['p50_ms']} ms, P95 {lat['p95_ms']} ms, max {lat['max_ms']} ms; all "
                f"submitted in {r['all_submitted_s']} s, all done in {r['all_done_s']} s; "
                f"{'OK' if r['ok'] else 'ERRORS ' + '; '.join(r['errors'])}",
                flush=True,
            )
        if "kill" in parts:
            w = Path(tmp, "kill")
            w.mkdir()
            out["kill"] = r = kill_in_the_middle(w, args.kill_callers, args.kill_tasks)
            verdict = (
                "OK: nothing lost, nothing twice" if r["ok"] else "ERRORS " + "; ".join(r["errors"])
            )
            print(
                f"{r['callers']} callers x {r['tasks_each']} tasks, SIGKILL after "
                f"{r['killed_after']} each: restarted in {r['restart_s']} s, all done "
                f"{r['done_after_restart_s']} s after the kill; "
                f"{verdict}",
                flush=True,
            )
        if "burst" in parts:
            w = Path(tmp, "burst")
            w.mkdir()
            out["burst"] = r = burst(w, args.burst)
            print(
                f"burst of {r['submissions']} (Python API, durable): {r['per_s']}/s, "
                f"P50 {r['latency']['p50_ms']} ms, P95 {r['latency']['p95_ms']} ms",
                flush=True,
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "service-load-latest.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    for part in parts:  # a part run alone replaces its own figures only, each with its time
        kept[part] = {"at": out["at"], **out[part]}
    path.write_text(json.dumps(kept, indent=2) + "\n")


if __name__ == "__main__":
    main()
