"""Continuation benchmark: how fast a waiting caller is resumed, and what waiting costs.

    python bench/bench_events.py

1. Completion-to-resume latency: tiny tasks through the real SDK Executor, the offline web
   service and a real endpoint engine; latency = the caller's ``add_done_callback`` firing
   minus the moment the endpoint recorded the result (same clock, same machine).
2. Monitoring cost while N tasks wait (10, 100, 1,000): web-service requests made and CPU
   time used by the coordinator process over a fixed window, with nobody polling. Waiting
   tasks are sleeps queued behind the engine's two workers; the endpoint is torn down after.
Runs without Slurm (the endpoint's LocalProvider profile), in a temporary home.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from federation.endpoint.manager import EndpointDaemons, local_endpoint_id  # noqa: E402
from federation.globus.offline import LocalComputeService  # noqa: E402
from functions.faults import slow_probe  # noqa: E402
from functions.workloads import square  # noqa: E402

PROBE = {"profile": "probe"}


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="fed-bench-"))
    daemons = EndpointDaemons(home)
    daemons.start("local", {})
    svc = LocalComputeService()
    eid = local_endpoint_id("local")
    svc.add_endpoint(eid, "local", daemons.run_dir("local"))
    arrived: dict[str, float] = {}
    orig = svc._on_endpoint_event

    def spy(msg: dict[str, object]) -> None:  # when the endpoint's result reached us
        if msg.get("op") == "task.result":
            arrived[str(msg["task_id"])] = float(msg["at"])  # type: ignore[arg-type]
        orig(msg)

    svc._endpoints[str(eid)].conn.on_event = spy
    ex = svc.executor(eid, svc.client(), user_endpoint_config=PROBE)
    try:
        ex.submit(square, 1).result(timeout=120)  # warm the engine
        lat: list[float] = []
        done = threading.Semaphore(0)

        def cb(f: object) -> None:
            lat.append(time.time() - arrived[str(f.task_id)])  # type: ignore[attr-defined]
            done.release()

        def report(what: str) -> None:
            lat.sort()
            print(
                f"completion-to-resume latency, {what} ({len(lat)} tasks): "
                f"median {statistics.median(lat) * 1000:.2f} ms, "
                f"P95 {lat[int(0.95 * len(lat)) - 1] * 1000:.2f} ms (target: median < 100 ms)"
            )
            lat.clear()

        for i in range(100):  # one caller waiting on one task at a time
            ex.submit(square, i).add_done_callback(cb)
            done.acquire(timeout=120)
        report("one at a time")
        n = 300
        for i in range(n):  # a burst: results queue behind each other
            ex.submit(square, i).add_done_callback(cb)
        for _ in range(n):
            done.acquire(timeout=120)
        report("burst of 300")
        print("\nwaiting tasks | service requests in 10 s | coordinator CPU in 10 s")
        for waiting in (10, 100, 1000):
            futs = [ex.submit(slow_probe, 600.0) for _ in range(waiting)]
            while any(f.task_id is None for f in futs):
                time.sleep(0.05)
            r0, c0 = svc.requests_served, time.process_time()
            time.sleep(10)
            r1, c1 = svc.requests_served, time.process_time()
            print(f"{waiting:>13} | {r1 - r0:>24} | {1000 * (c1 - c0):>8.1f} ms")
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        svc.close()
        daemons.stop("local")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
