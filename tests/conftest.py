"""Shared fixtures. Tests that need the real local Slurm federation are marked ``slurm``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
SLURM_SAMPLES = Path(os.environ.get("FEDERATION_SLURM_SAMPLES", SHARED / "slurm-samples"))
TRACES = Path(os.environ.get("FEDERATION_TRACES", SHARED / "traces"))
FIXTURES = Path(__file__).parent / "fixtures"


def _slurm_missing_reason() -> str | None:
    for exe in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd"):
        if shutil.which(exe) is None and not Path("/usr/sbin", exe).exists():
            return (
                f"{exe} is not installed: run scripts/test as root (it installs slurm-wlm, "
                "slurmdbd, munge and mariadb-server)"
            )
    return None


@pytest.fixture(scope="session")
def local_federation() -> Iterator[object]:
    """The real local Slurm federation, brought up once per session (idempotent)."""
    reason = _slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    from federation.localslurm import LocalFederation

    fed = LocalFederation()
    fed.up()
    yield fed
    # Left running on purpose: `federation sites down` stops it; re-running tests is fast.


@pytest.fixture(scope="module")
def local(local_federation: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The local sites with their endpoints running (``LocalSites``), per test module (and
    per path, where the module runs on both: :data:`slurm_scene.BOTH_PATHS`)."""
    from federation.deploy.local import LocalSites

    path = getattr(request, "param", "embedded")
    sites = LocalSites(home=local_federation.home, path=path)
    sites.up()
    try:
        yield sites
    finally:
        sites.close()  # the offline services this module's coordinators used


@pytest.fixture(scope="module")
def coord(local: Any) -> Iterator[Any]:
    """A coordinator over the local sites through the real SDK, closed after the module."""
    c = local.connect(telemetry=False, probe_timeout_s=60)
    try:
        yield c
    finally:
        c.close()
        if local.service is not None:
            local.service.close()


def _release_leaked_sdk_executors() -> list[str]:
    """Shut down (without waiting) SDK executors and result watchers still registered.

    The SDK's exit thread (``globus_compute_sdk.sdk.executor.__atexit``) waits for the main
    thread, then calls ``shutdown()`` (wait=True) on every executor still registered, which
    blocks until all of that executor's futures have results: an executor a test left
    behind with a task that will never finish keeps the test process alive forever.
    Returns what was released, so the leak is named rather than hidden."""
    from globus_compute_sdk.sdk import executor as sdk_executor

    names: list[str] = []
    registered = sdk_executor._REGISTERED_EXECUTORS
    while registered:
        _, gce = registered.popitem()
        names.append(f"Executor(endpoint={gce.endpoint_id})")
        gce.shutdown(wait=False, cancel_futures=True)
    watchers = sdk_executor._RESULT_WATCHERS
    while watchers:
        _, rw = watchers.popitem()
        names.append(type(rw).__name__)
        rw.shutdown(wait=False, cancel_futures=True)
    return names


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process even if a non-daemon thread would keep it alive, naming what
    was left running on stderr (whole-suite runs were seen to finish every test and then
    never exit: see :func:`_release_leaked_sdk_executors`)."""
    import sys
    import threading

    leaked = _release_leaked_sdk_executors()
    if leaked:
        print(f"\n[conftest] SDK executors left running, shut down: {leaked}", file=sys.stderr)
    others = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread()
        and t.is_alive()
        and not t.daemon
        and not t.name.endswith("(__atexit)")  # the SDK's: ends after the main thread
    ]
    for t in others:
        t.join(timeout=30)
    stuck = [t.name for t in others if t.is_alive()]
    if not stuck:
        return
    print(f"\n[conftest] non-daemon threads still alive at exit: {stuck}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    status = getattr(config, "_federation_exitstatus", 0)
    os._exit(int(status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._federation_exitstatus = exitstatus  # type: ignore[attr-defined]
