"""The real Globus Compute SDK (Client, Executor, ComputeFuture, ShellFunction) against the
offline web service and a real endpoint daemon running the real GlobusComputeEngine.

These use the ``probe`` profile (LocalProvider), so they need no Slurm. The workers run in
the strict worker environment (nothing of this repository), so the functions go by source
(:func:`federation.sites.shipping.executor_serializer`), as every site ships them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from globus_compute_sdk import Executor, ShellFunction
from globus_compute_sdk.errors import TaskExecutionFailed

from federation.endpoint.manager import EndpointDaemons, local_endpoint_id
from federation.sites.shipping import executor_serializer
from federation.standin.compute_service import LocalComputeService
from functions.workloads import fail_with, square

PROBE = {"profile": "probe"}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalComputeService]:
    home = Path(tmp_path_factory.mktemp("fedhome"))
    daemons = EndpointDaemons(home)
    daemons.start("local", {})
    svc = LocalComputeService()
    svc.add_endpoint(local_endpoint_id("local"), "local", daemons.run_dir("local"))
    try:
        yield svc
    finally:
        svc.close()
        daemons.stop("local")


@pytest.fixture(scope="module")
def executor(service: LocalComputeService) -> Iterator[Executor]:
    client = service.client()
    client.fx_serializer = executor_serializer()  # as every site ships: our functions by source
    ex = service.executor(local_endpoint_id("local"), client, user_endpoint_config=PROBE)
    try:
        yield ex
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def test_submit_returns_compute_future_with_task_id_and_result(executor: Executor) -> None:
    fut = executor.submit(square, 7)
    assert fut.result(timeout=180) == 49  # a first result: a cold engine on a loaded machine
    uuid.UUID(fut.task_id)  # a real task id from the (offline) web service


def test_done_callback_fires_without_polling(executor: Executor) -> None:
    fired = threading.Event()
    seen: list[int] = []

    def cb(f: object) -> None:
        seen.append(f.result())  # type: ignore[attr-defined]
        fired.set()

    executor.submit(square, 3).add_done_callback(cb)
    assert fired.wait(60)
    assert seen == [9]


def test_remote_exception_arrives_with_traceback(executor: Executor) -> None:
    fut = executor.submit(fail_with, "remote failure, on purpose")
    with pytest.raises(TaskExecutionFailed) as err:
        fut.result(timeout=60)
    text = str(err.value)
    assert "RuntimeError: remote failure, on purpose" in text
    assert "fail_with" in text  # the remote traceback names the function


def test_shell_function(executor: Executor) -> None:
    res = executor.submit(ShellFunction("echo hello-from-endpoint; exit 3")).result(timeout=60)
    assert res.returncode == 3
    assert "hello-from-endpoint" in res.stdout


def test_reload_tasks_reattaches_by_task_group(
    service: LocalComputeService, executor: Executor
) -> None:
    futs = [executor.submit(square, i) for i in range(5)]
    assert [f.result(timeout=60) for f in futs] == [i * i for i in range(5)]
    other = service.executor(
        local_endpoint_id("local"),
        service.client(),
        user_endpoint_config=PROBE,
        task_group_id=executor.task_group_id,
    )
    try:
        reloaded = list(other.reload_tasks())
        by_id = {f.task_id: f for f in reloaded}
        for f in futs:
            assert by_id[f.task_id].result(timeout=10) == f.result()
    finally:
        other.shutdown(wait=False)


def test_unknown_endpoint_is_a_clear_error(service: LocalComputeService) -> None:
    ex = service.executor(uuid.uuid4(), service.client(), user_endpoint_config=PROBE)
    try:
        fut = ex.submit(square, 2)
        with pytest.raises(Exception, match="not registered"):
            fut.result(timeout=30)
    finally:
        ex.shutdown(wait=False)


def test_invalid_template_variable_fails_the_task_with_reason(service: LocalComputeService) -> None:
    ex = service.executor(
        local_endpoint_id("local"),
        service.client(),
        user_endpoint_config={"profile": "task", "partition": "nope"},
    )
    try:
        with pytest.raises(TaskExecutionFailed, match="partition"):
            ex.submit(square, 2).result(timeout=30)
    finally:
        ex.shutdown(wait=False)
