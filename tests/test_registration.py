"""Function registration off the caller's path (:mod:`federation.sites.registration`).

The real SDK ``Client`` and ``Executor`` against the offline web service, with its request
limit set low so a registration waits for a 429's ``Retry-After`` as it can against the real
service, and a real endpoint daemon (the ``probe`` profile: no Slurm).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from globus_compute_sdk import Client

from federation.endpoint.manager import EndpointDaemons, local_endpoint_id
from federation.sites.registration import DeferredFuture, Registrar, registrar_for
from federation.sites.shipping import executor_serializer
from federation.standin.compute_service import LocalComputeService
from federation.standin.rate_limit import RateLimit
from functions.workloads import fail_with, square

WINDOW_S = 3.0


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalComputeService]:
    home = Path(tmp_path_factory.mktemp("fedhome"))
    daemons = EndpointDaemons(home)
    daemons.start("local", {})
    svc = LocalComputeService(rate_limit=RateLimit(requests=2, window_s=WINDOW_S))
    svc.add_endpoint(local_endpoint_id("local"), "local", daemons.run_dir("local"))
    try:
        yield svc
    finally:
        svc.close()
        daemons.stop("local")


def _client(service: LocalComputeService) -> Client:
    client = service.client()
    client.fx_serializer = executor_serializer()
    return client


def _spent(service: LocalComputeService, client: Client) -> None:
    """Use up the client's requests in this window (endpoint status asks are requests)."""
    for _ in range(2):
        client.get_endpoint_status(str(local_endpoint_id("local")))


def test_an_unregistered_function_returns_at_once_and_runs(
    service: LocalComputeService,
) -> None:
    client = _client(service)
    reg = Registrar()
    ex = service.executor(
        local_endpoint_id("local"), client, user_endpoint_config={"profile": "probe"}
    )
    try:
        _spent(service, client)  # the registration will wait for the limit's window
        t0 = time.monotonic()
        fut = reg.submit(ex, square, (6,), {})
        returned_s = time.monotonic() - t0
        assert isinstance(fut, DeferredFuture)
        assert returned_s < 0.5, f"submit waited {returned_s:.2f} s for the registration"
        assert fut.result(timeout=120) == 36
        uuid.UUID(str(fut.task_id))  # the SDK future's id, once acknowledged
        assert reg.requests == 1
        # known now: the next submission goes straight to the SDK's own future
        again = reg.submit(ex, square, (7,), {})
        assert not isinstance(again, DeferredFuture)
        assert again.result(timeout=120) == 49
        assert reg.requests == 1
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def test_one_registration_serves_every_executor_of_a_client(
    service: LocalComputeService,
) -> None:
    """A function id is not tied to an executor: two executors on one client (two sites'
    shapes) share one registration request."""

    client = _client(service)
    reg = registrar_for(client)
    assert registrar_for(client) is reg
    assert registrar_for(_client(service)) is not reg  # another client registers on its own
    eid = local_endpoint_id("local")
    a = service.executor(eid, client, user_endpoint_config={"profile": "probe"})
    b = service.executor(eid, client, user_endpoint_config={"profile": "probe"})
    try:
        reg.warm(a, [square])
        fa = reg.submit(a, square, (2,), {})
        fb = reg.submit(b, square, (3,), {})
        assert (fa.result(timeout=120), fb.result(timeout=120)) == (4, 9)
        assert reg.requests == 1
    finally:
        a.shutdown(wait=False, cancel_futures=True)
        b.shutdown(wait=False, cancel_futures=True)


def test_a_remote_failure_reaches_the_deferred_future(service: LocalComputeService) -> None:
    client = _client(service)
    reg = Registrar()
    ex = service.executor(
        local_endpoint_id("local"), client, user_endpoint_config={"profile": "probe"}
    )
    try:
        fut = reg.submit(ex, fail_with, ("on purpose",), {})
        assert isinstance(fut, DeferredFuture)
        with pytest.raises(Exception, match="on purpose"):
            fut.result(timeout=120)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def test_a_refused_registration_fails_the_task_not_the_caller(
    service: LocalComputeService,
) -> None:
    """The executor was shut down before its registration: the caller had its future at
    once, and the future carries the refusal."""
    client = _client(service)
    reg = Registrar()
    ex = service.executor(
        local_endpoint_id("local"), client, user_endpoint_config={"profile": "probe"}
    )
    _spent(service, client)
    fut = reg.submit(ex, square, (5,), {})
    ex.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(RuntimeError, match="shutdown"):
        fut.result(timeout=60)
