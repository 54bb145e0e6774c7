"""A user endpoint process hands tasks to its engine one at a time.

The real endpoint calls ``engine.submit`` from its one task-processing thread; the engine's
HighThroughputExecutor counts task ids (``_task_counter += 1``) and sends on a ZeroMQ
socket, neither of them thread-safe. The stand-in's user endpoint process
(:mod:`federation.endpoint.user_endpoint`) keeps a per-engine lock around ``engine.submit``
whoever calls it: a 3,000-task load run lost one task (it reached the endpoint and never
the interchange) when several submissions met a newly started engine at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from federation.endpoint import protocol
from federation.endpoint.user_endpoint import EngineSlot, UserEndpoint


class CountingEngine:
    """Stands in for the engine's submit only: counts submissions in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.seen: list[str] = []

    def submit(self, fut: Any, packed: bytes, resource_specification: dict[str, Any]) -> None:
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.005)  # a send that takes a moment, as a ZeroMQ send under load does
        with self.lock:
            self.inside -= 1
            self.seen.append(str(fut.gc_task_id))
        fut.set_result(b"packed result")

    def shutdown(self) -> None:
        pass


def test_submissions_reach_the_engine_one_at_a_time() -> None:
    engine = CountingEngine()
    slot = EngineSlot(key="k", engine=engine)
    sent: list[protocol.Message] = []
    uep = UserEndpoint(slot, sent.append)
    ids = [str(uuid.uuid4()) for _ in range(32)]
    threads = [threading.Thread(target=uep.submit, args=(tid, b"task")) for tid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert engine.most == 1, f"{engine.most} submissions were inside the engine at once"
    assert sorted(engine.seen) == sorted(ids)  # each once
    results = [m["task_id"] for m in sent if m["op"] == "task.result"]
    assert sorted(results) == sorted(ids)  # each reported to the manager once
    assert not slot.outstanding
