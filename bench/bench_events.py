"""Continuation benchmark: how fast a waiting caller is resumed, and what waiting costs.

    python bench/bench_events.py

1. Completion-to-resume latency: tiny tasks through the real SDK Executor, the offline web
   service and a real endpoint engine; latency = the caller's ``add_done_callback`` firing
   minus the moment the endpoint recorded the result (same clock, same machine).
2. Monitoring cost while N tasks wait (10, 100, 1,000): web-service requests made and CPU
   time used by the coordinator process over a fixed window, with nobody polling. Waiting
   tasks are sleeps queued behind the engine's two workers; the endpoint is torn down after.
Runs without Slurm (the endpoint's LocalProvider profile), in a temporary home.
:func:`local_endpoint` and :func:`resume_latencies` are reused by ``bench/perf.py``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from federation.endpoint.manager import EndpointDaemons, local_endpoint_id  # noqa: E402
from federation.sites.shipping import executor_serializer  # noqa: E402
from federation.standin.compute_service import LocalComputeService  # noqa: E402
from functions.faults import slow_probe  # noqa: E402
from functions.workloads import square  # noqa: E402

PROBE = {"profile": "probe"}
TARGET_MEDIAN_S = 0.1


@dataclass
class ProbeEndpoint:
    """A real endpoint daemon (LocalProvider profile) behind the offline service."""

    svc: LocalComputeService
    ex: Any
    arrived: dict[str, float] = field(default_factory=dict)
    """Task id -> when the endpoint recorded its result (the endpoint's own clock)."""


@contextmanager
def local_endpoint() -> Iterator[ProbeEndpoint]:
    """Start the ``local`` site's endpoint in a temporary home; stopped and removed after."""
    home = Path(tempfile.mkdtemp(prefix="fed-bench-"))
    daemons = EndpointDaemons(home)
    daemons.start("local", {})
    svc = LocalComputeService()
    eid = local_endpoint_id("local")
    svc.add_endpoint(eid, "local", daemons.run_dir("local"))
    ep = ProbeEndpoint(svc=svc, ex=None)
    orig = svc._on_endpoint_event

    def spy(msg: dict[str, object]) -> None:  # when the endpoint's result reached us
        if msg.get("op") == "task.result":
            ep.arrived[str(msg["task_id"])] = float(msg["at"])  # type: ignore[arg-type]
        orig(msg)

    svc._endpoints[str(eid)].link._on_event = spy
    ep.ex = svc.executor(eid, svc.client(), user_endpoint_config=PROBE)
    # by source, as a site's Executor ships: the worker environment has none of this repo
    ep.ex.serializer = executor_serializer()
    try:
        ep.ex.submit(square, 1).result(timeout=120)  # warm the engine
        yield ep
    finally:
        ep.ex.shutdown(wait=False, cancel_futures=True)
        svc.close()
        daemons.stop("local")
        shutil.rmtree(home, ignore_errors=True)


def resume_latencies(ep: ProbeEndpoint, n_tasks: int, burst: bool = False) -> list[float]:
    """Seconds from the endpoint recording each result to the caller's callback, sorted.

    ``burst=False``: one caller waiting on one task at a time; ``True``: all at once.
    """
    lat: list[float] = []
    done = threading.Semaphore(0)

    def cb(f: Any) -> None:
        lat.append(time.time() - ep.arrived[str(f.task_id)])
        done.release()

    if burst:
        for i in range(n_tasks):
            ep.ex.submit(square, i).add_done_callback(cb)
        for _ in range(n_tasks):
            done.acquire(timeout=120)
    else:
        for i in range(n_tasks):
            ep.ex.submit(square, i).add_done_callback(cb)
            done.acquire(timeout=120)
    if len(lat) != n_tasks:
        raise RuntimeError(f"only {len(lat)} of {n_tasks} callbacks fired within 120 s")
    return sorted(lat)


def p95(sorted_values: list[float]) -> float:
    return sorted_values[max(0, int(0.95 * len(sorted_values)) - 1)]


def main() -> int:
    with local_endpoint() as ep:

        def report(what: str, lat: list[float]) -> None:
            print(
                f"completion-to-resume latency, {what} ({len(lat)} tasks): "
                f"median {statistics.median(lat) * 1000:.2f} ms, "
                f"P95 {p95(lat) * 1000:.2f} ms (target: median < 100 ms)"
            )

        report("one at a time", resume_latencies(ep, 100))
        report("burst of 300", resume_latencies(ep, 300, burst=True))
        print("\nwaiting tasks | service requests in 10 s | coordinator CPU in 10 s")
        for waiting in (10, 100, 1000):
            futs = [ep.ex.submit(slow_probe, 600.0) for _ in range(waiting)]
            while any(f.task_id is None for f in futs):
                time.sleep(0.05)
            r0, c0 = ep.svc.requests_served, time.process_time()
            time.sleep(10)
            r1, c1 = ep.svc.requests_served, time.process_time()
            print(f"{waiting:>13} | {r1 - r0:>24} | {1000 * (c1 - c0):>8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
