"""The endpoint daemon hands tasks to an engine one at a time.

The real endpoint calls ``engine.submit`` from its one task-processing thread; the engine's
HighThroughputExecutor counts task ids (``_task_counter += 1``) and sends on a ZeroMQ
socket, neither of them thread-safe. The daemon serves each connection in a thread of its
own, so it must serialize: a 3,000-task load run lost one task (it reached the endpoint and
never the interchange) when several submissions met a newly started engine at once.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from federation.core.spec import load_site
from federation.endpoint.daemon import EngineSlot, SiteEndpoint


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


def test_submissions_reach_the_engine_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = SiteEndpoint(load_site("local"), uuid.uuid4(), tmp_path / "ep")
    engine = CountingEngine()
    slot = EngineSlot(key="k", engine=engine)
    monkeypatch.setattr(ep, "_slot_for", lambda opts, runtime: slot)
    ids = [str(uuid.uuid4()) for _ in range(32)]
    threads = [
        threading.Thread(target=ep.submit, args=(tid, b"task", {"profile": "task"}, None))
        for tid in ids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert engine.most == 1, f"{engine.most} submissions were inside the engine at once"
    assert sorted(engine.seen) == sorted(ids)  # each once
    status = ep.status(ids)
    assert {s["status"] for s in status.values()} == {"done"} and len(status) == len(ids)
    assert not slot.outstanding
