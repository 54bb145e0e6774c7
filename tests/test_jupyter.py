"""FederatedExecutor: a concurrent.futures.Executor over the coordinator."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from inprocess import block_coordinator, inprocess_coordinator

from federation.core.envelope import ResourceEnvelope
from federation.core.errors import NoFeasibleSiteError, TaskFailedError
from federation.interfaces.jupyter.executor import FederatedExecutor, TaskFuture, describe_function
from federation.runtime.events import Event


def square(x: int) -> int:
    return x * x


def explode(msg: str) -> None:
    raise ValueError(msg)


def tokenize_shards(n: int) -> int:
    """Convert and clean CSV shards into parquet."""
    return n


@pytest.fixture
def ex() -> Iterator[FederatedExecutor]:
    coord = inprocess_coordinator()
    with FederatedExecutor(coord) as e:
        yield e
    coord.close()


def test_submit_returns_a_real_future_with_ids_placement_and_events(
    ex: FederatedExecutor,
) -> None:
    done = threading.Event()
    seen: list[Any] = []
    fut = ex.submit(square, 7, envelope=ResourceEnvelope(sites=("local",), walltime_s=300))
    fut.add_done_callback(lambda f: (seen.append(f.result()), done.set()))
    assert isinstance(fut, concurrent.futures.Future) and isinstance(fut, TaskFuture)
    assert fut.result(timeout=10) == 49
    assert done.wait(5) and seen == [49]
    assert fut.task_id == fut.handle.id
    assert fut.compute_task_id is not None and fut.compute_task_id == fut.handle.future.task_id  # type: ignore[union-attr]
    assert fut.placement.site == "local" and fut.placement.partition == "debug"
    assert "local/debug" in str(fut.placement)
    assert fut.decision.chosen.site == "local"
    assert [e.kind for e in fut.events] == ["task.queued", "task.started", "task.completed"]
    kinds: list[str] = []
    fut.add_event_callback(lambda ev: kinds.append(ev.kind))  # replays past events
    assert kinds[-1] == "task.completed"
    assert fut.state == "completed" and fut.slurm_job_id is not None
    assert fut.manifest().value == 49


def test_failure_is_task_failed_error_with_remote_traceback(ex: FederatedExecutor) -> None:
    fut = ex.submit(explode, "bad input")
    err = fut.exception(timeout=10)
    assert isinstance(err, TaskFailedError)
    assert "bad input" in str(err)
    with pytest.raises(TaskFailedError, match="explode"):
        fut.result()


def test_map_and_as_completed(ex: FederatedExecutor) -> None:
    assert list(ex.map(square, range(5), timeout=20)) == [0, 1, 4, 9, 16]
    futs = [ex.submit(square, i) for i in range(3)]
    got = sorted(f.result() for f in concurrent.futures.as_completed(futs, timeout=20))
    assert got == [0, 1, 4]


def test_map_places_its_calls_as_one_batch_on_one_snapshot_and_one_shape() -> None:
    coord = block_coordinator()  # sites that start a block per shape, as endpoints do
    try:
        with FederatedExecutor(coord, snapshot_max_age_s=0) as ex:  # submit: a probe a call
            assert list(ex.map(square, range(40))) == [i * i for i in range(40)]
            batch = [f.decision for f in ex.futures]
            one_by_one = [ex.submit(square, i).decision for i in range(3)]
        assert len({d.snapshot_taken_at for d in batch}) == 1  # one snapshot for the map
        assert len({d.snapshot_taken_at for d in one_by_one}) == 3
        assert len({d.chosen.shape for d in batch}) == 1  # its first call's block, warm
        assert batch[0].chosen.cold_start_s > 0
        assert all("warm block: ours" in d.chosen.why for d in batch[1:])
    finally:
        coord.close()


def test_map_timeout_cancels_the_calls_not_yet_done() -> None:
    gate = threading.Event()  # the sites start nothing until it is set
    coord = inprocess_coordinator(gate=gate)
    ex = FederatedExecutor(coord)
    try:
        results = ex.map(square, range(4), timeout=0.5)
        with pytest.raises(TimeoutError):
            next(results)
        futs = ex.futures
        assert len(futs) == 4 and all(f.cancelled() for f in futs)
    finally:
        gate.set()
        ex.shutdown(wait=True)
        coord.close()


def test_envelope_is_drafted_from_docstring_or_hints(ex: FederatedExecutor) -> None:
    assert describe_function(tokenize_shards).startswith("tokenize shards: Convert")
    env = ex.envelope_for(tokenize_shards)
    assert env.gpus_max == 0 and env.cpus_min == 4  # cpu-prep bounds
    assert "workload_class" in env.rationale
    fut = ex.submit(square, 3, hints={"workload_class": "inference", "gpus": 1})
    assert fut.result(10) == 9
    assert fut.placement.shape.gpus == 1
    refused = ex.submit(square, 1, envelope=ResourceEnvelope(gpus_min=8, walltime_s=300))
    assert isinstance(refused.exception(timeout=10), NoFeasibleSiteError)  # nothing ran
    with pytest.raises(NoFeasibleSiteError):
        refused.result()
    with pytest.raises(NoFeasibleSiteError):
        _ = refused.placement
    assert refused.events == [] and refused.state == "failed"


def test_sites_restrict_placement() -> None:
    coord = inprocess_coordinator()
    with FederatedExecutor(coord, sites=["delta"]) as ex:
        assert ex.submit(square, 2).placement.site == "delta"
    coord.close()


def test_cancel_and_shutdown_semantics() -> None:
    gate = threading.Event()
    coord = inprocess_coordinator(gate=gate)
    ex = FederatedExecutor(coord)
    cancelled: list[bool] = []
    a, b = ex.submit(square, 1), ex.submit(square, 2)
    a.add_done_callback(lambda f: cancelled.append(f.cancelled()))
    assert not a.running()
    assert a.cancel() and a.cancelled() and cancelled == [True]
    assert a.state == "cancelled"
    ex.shutdown(wait=False, cancel_futures=True)
    assert b.cancelled()
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(square, 3)
    gate.set()
    coord.close()


def test_running_task_cannot_be_cancelled_and_shutdown_waits() -> None:
    gate = threading.Event()
    coord = inprocess_coordinator(gate=gate)
    ex = FederatedExecutor(coord)
    started = threading.Event()

    def on(ev: Event) -> None:
        if ev.kind == "task.started":
            started.set()

    fut = ex.submit(square, 5)
    fut.add_event_callback(on)
    gate.set()
    assert started.wait(10)
    assert fut.result(10) == 25 and not fut.cancel()
    ex.shutdown(wait=True)
    assert fut.done()
    coord.close()


def test_dataframes_read_well(ex: FederatedExecutor) -> None:
    snap = ex.snapshot()
    assert isinstance(snap, pd.DataFrame)
    assert snap.index.names == ["site", "partition"]
    assert {"CPUs idle", "GPUs total", "memory total (GB)", "jobs pending"} <= set(snap.columns)
    assert ("local", "gpu") in snap.index
    ex.submit(square, 4).result(10)
    hist = ex.history()
    assert list(hist["event"]) == ["queued", "started", "completed"]
    assert {"time (UTC)", "t (s)", "task", "site", "details"} <= set(hist.columns)
    assert hist["time (UTC)"].dt.tz is None
    tasks = ex.tasks()
    assert list(tasks["task"]) == ["square"] and tasks["queue wait (s)"].notna().all()
    assert {"predicted wait (s)", "runtime (s)", "Slurm job"} <= set(tasks.columns)
    assert not ex.telemetry().empty


def test_submit_returns_before_placement_and_cancel_while_placing() -> None:
    coord = inprocess_coordinator()
    probing, release = threading.Event(), threading.Event()
    real_snapshot = coord.snapshot

    def slow_snapshot(max_age_s: float | None = None) -> Any:
        probing.set()
        assert release.wait(10)
        return real_snapshot(max_age_s=0)

    coord.snapshot = slow_snapshot  # type: ignore[method-assign]
    ex = FederatedExecutor(coord)
    try:
        fut = ex.submit(square, 6)  # returns while the placement thread is still probing
        assert isinstance(fut, TaskFuture) and probing.wait(10)
        assert not fut.placed and not fut.done() and "placing" in repr(fut)
        later = ex.submit(square, 7)  # queued behind the first; cancelled before it is placed
        assert isinstance(later, TaskFuture)
        assert later.cancel() and later.cancelled() and later.state == "cancelled"
        release.set()
        assert fut.placement.site in coord.backends  # waits for the placement
        assert fut.placed and fut.result(timeout=10) == 36
        assert later.wait_placed(10) and later.events == []
        assert len(coord.handles()) == 1  # the cancelled one was never submitted
    finally:
        release.set()
        ex.shutdown(wait=True)
        coord.close()


@pytest.mark.slurm
def test_a_map_of_tiny_calls_lands_on_few_sites_of_the_real_federation(
    local_federation: Any,
) -> None:
    """Issue 33: a map of tiny calls, cold, on every local site, placed as a batch: the
    cold-start charge keeps it where its first block is (200 calls went to 5 sites)."""
    from federation.deploy.local import LocalSites
    from functions import workloads

    local = LocalSites(home=local_federation.home)
    local.up()
    coord = local.connect(telemetry=False, probe_timeout_s=120)
    try:
        with FederatedExecutor(coord) as ex:
            results = list(ex.map(workloads.square, range(40), timeout=540))
            sites = {f.placement.site for f in ex.futures}
            shapes = {f.decision.chosen.shape for f in ex.futures}
        assert results == [i * i for i in range(40)]
        assert len(sites) <= 2, sites
        assert len(shapes) <= 2, shapes
    finally:
        coord.close()
        local.close()


@pytest.mark.slurm
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)  # see test_cli_tasks
def test_executor_on_the_real_federation(local_federation: Any) -> None:
    from federation.deploy.local import LocalSites
    from functions import workloads

    local = LocalSites(home=local_federation.home)
    local.up()
    coord = local.connect(telemetry=False)
    try:
        with FederatedExecutor(coord, sites=["local"]) as ex:
            fut = ex.submit(workloads.square, 9, envelope=ResourceEnvelope(walltime_s=300))
            assert fut.result(timeout=180) == 81
            assert fut.compute_task_id and fut.slurm_job_id
            assert fut.placement.site == "local"
    finally:
        coord.close()
        if local.service is not None:
            local.service.close()
