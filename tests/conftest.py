"""Shared fixtures. Tests that need the real local Slurm federation are marked ``slurm``.

After the whole session, a **secret scan** reads every file the session wrote (pytest's
basetemp, and the files of the federation home modified during the session: logs, event
logs, manifests, SQLite databases and their write-ahead logs) for every token issued and
client secret set during the run, and for token-shaped text
(:mod:`federation.security.scan`). A finding fails the session (exit status 1) with a
report naming each file and offset, and the secret's first characters only.
``FEDERATION_SECRET_SCAN=0`` turns it off. Under pytest-xdist (``-n N``, as ``scripts/test``
runs) the workers hand the secrets they saw to the controller, which scans once, its
basetemp holding every worker's; and every test on the real federation runs on one worker,
serially, beside the others (:data:`SLURM_GROUP`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import time
from collections.abc import Generator, Iterator
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


# --- parallel runs (pytest-xdist) ------------------------------------------------------------

SLURM_GROUP = "slurm"
"""The work unit of every test on the real federation under xdist (``-n N``): one worker
runs them all, one after another, in collection order (they share its clusters, endpoints
and queues), while the other workers share out the rest, module by module
(``scripts/test`` runs ``-n 3``; docs/getting-started.md). xdist's own ``loadgroup`` names
grouped tests by editing a private attribute pytest 9 no longer reads, so the grouping is
done here: each worker writes the node ids of the federation's tests to a file the
controller's scheduler reads."""

_SLURM_IDS_KEY = "federation_slurm_ids"


def _on_the_federation(item: pytest.Item) -> bool:
    return item.get_closest_marker("slurm") is not None or "local_federation" in getattr(
        item, "fixturenames", ()
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: tell each worker where to write the federation's tests' node ids."""
    basetemp = node.config._tmp_path_factory.getbasetemp()
    node.workerinput[_SLURM_IDS_KEY] = str(Path(basetemp) / "slurm-nodeids.txt")


PATH_PARAMS = ("local", "path", "local_path")
"""The parameters that name the path to the sites in the Slurm tests (``slurm_scene.BOTH_PATHS``
parametrizes the ``local`` fixture; some tests take ``path`` or ``local_path``)."""


def _path_of(item: pytest.Item) -> str | None:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((str(params[p]) for p in PATH_PARAMS if p in params), None)


def _keep_the_marked_paths(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test of a both-paths module marked ``@pytest.mark.paths("cloud")`` runs on that
    path only: its other path's item is deselected (counted in the summary). The test's
    docstring says why the path it keeps stands for the other."""
    dropped = []
    for item in items:
        mark = item.get_closest_marker("paths")
        path = _path_of(item)
        if mark is not None and path is not None and path not in mark.args:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the marked paths; then, on an xdist worker, write the node ids of the tests on
    the real federation (every worker collects the same; the last write wins, whole)."""
    _keep_the_marked_paths(config, items)
    where = getattr(config, "workerinput", {}).get(_SLURM_IDS_KEY)
    if where is None:
        return
    ids = "".join(f"{item.nodeid}\n" for item in items if _on_the_federation(item))
    part = Path(f"{where}.{config.workerinput['workerid']}")  # type: ignore[attr-defined]
    part.write_text(ids)
    os.replace(part, where)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Controller: module-by-module scheduling (xdist's ``loadscope``) but for the tests on
    the real federation, which are one unit (any ``--dist`` mode but ``each``)."""
    if config.getoption("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FederationScheduling(LoadScopeScheduling):  # type: ignore[misc]
        slurm_ids: set[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.slurm_ids is None:  # read once every worker has collected
                basetemp = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
                where = Path(basetemp) / "slurm-nodeids.txt"
                if not where.exists():
                    raise pytest.UsageError(f"no worker wrote {where}: cannot group Slurm tests")
                self.slurm_ids = set(where.read_text().splitlines())
            if nodeid in self.slurm_ids:
                return SLURM_GROUP
            return str(super()._split_scope(nodeid))

    return FederationScheduling(config, log)


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


# --- the secret scan ------------------------------------------------------------------------

SECRET_ENV = re.compile(r"SECRET|^FEDERATION_TOKEN$")
"""Environment variables whose values, seen during a test, are secrets to look for."""


class SecretRegistry:
    """Every secret the session handed out: tokens :meth:`TokenStore.issue` issued (and
    their secret parts), client secrets tests put in the environment, and anything a test
    adds (the ``secret_registry`` fixture)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.secrets: set[str] = set()

    def add(self, secret: str) -> None:
        self.secrets.add(secret)
        if secret.startswith("fedtok_") and secret.count("_") >= 2:
            self.secrets.add(secret.split("_", 2)[2])  # the secret part alone

    def add_environment(self) -> None:
        for name, value in os.environ.items():
            if SECRET_ENV.search(name) and len(value) >= 8:
                self.add(value)


_REGISTRY = SecretRegistry()


@pytest.fixture(scope="session")
def secret_registry() -> SecretRegistry:
    """Add secrets a test creates some other way; the session's scan looks for them."""
    return _REGISTRY


def pytest_configure(config: pytest.Config) -> None:
    from federation.security.tokens import TokenStore

    issue = TokenStore.issue
    if getattr(issue, "_records_secrets", False):
        return

    @functools.wraps(issue)
    def recording_issue(self: TokenStore, *args: Any, **kwargs: Any) -> Any:
        issued = issue(self, *args, **kwargs)
        _REGISTRY.add(issued.token)
        return issued

    recording_issue._records_secrets = True  # type: ignore[attr-defined]
    TokenStore.issue = recording_issue  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    try:
        return (yield)
    finally:  # before teardown undoes a monkeypatch.setenv
        _REGISTRY.add_environment()


def _scanned_places(session: pytest.Session) -> tuple[list[Path], list[Path]]:
    """(whole folders, folders whose files modified during the session count)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    whole = [Path(basetemp)] if basetemp is not None else []
    from federation.core.paths import federation_home

    return whole, [federation_home()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """An xdist worker ended: its secrets join the controller's, whose scan covers the
    workers' temporary folders (under its basetemp) and the federation home."""
    for secret in getattr(node, "workeroutput", {}).get("federation_secrets", ()):
        _REGISTRY.add(secret)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller scans, once, for all
        _REGISTRY.add_environment()
        workeroutput["federation_secrets"] = sorted(_REGISTRY.secrets)
        config._federation_exitstatus = session.exitstatus  # type: ignore[attr-defined]
        return
    if os.environ.get("FEDERATION_SECRET_SCAN", "1") != "0" and not config.option.collectonly:
        from federation.security.scan import scan

        _REGISTRY.add_environment()
        whole, recent = _scanned_places(session)
        report = scan(whole, _REGISTRY.secrets)
        later = scan(recent, _REGISTRY.secrets, since=_REGISTRY.started - 2)
        report.findings += later.findings
        report.files += later.files
        report.bytes += later.bytes
        report.credential_stores += later.credential_stores
        config._federation_secret_scan = report  # type: ignore[attr-defined]
        if not report.clean:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    config._federation_exitstatus = session.exitstatus  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = getattr(config, "_federation_secret_scan", None)
    if report is None:
        return
    if report.clean:
        terminalreporter.write_line(report.summary().splitlines()[0] + ": clean")
        return
    terminalreporter.write_sep("=", "secrets left on disk", red=True)
    terminalreporter.write_line(report.summary(), red=True)
    terminalreporter.write_line(
        "A token or secret was written to a file during the session: find what wrote it "
        "(the file names the test), and redact or stop writing it.",
        red=True,
    )
    terminalreporter.stats.setdefault("secrets found", []).extend(report.findings)
