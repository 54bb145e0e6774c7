"""``federation doctor``: every configured site checked end to end, and what to fix.

For each site, in order (a later check is skipped when an earlier one it needs failed):

* **endpoint**: the site answered a probe (its endpoint is online and its login-node
  workers run);
* **worker**: a shipped function reports the worker's Python (its major.minor must be the
  coordinator's: functions and arguments pickled on one do not load on the other) and
  whether this repository is importable there (it need not be: everything travels by value);
* **task**: a tiny shell task, placed on this site only, runs in a Slurm job and comes back
  (a busy site may not start it within ``task_timeout_s``: a warning, not a failure);
* **cancel**: a queued task can be withdrawn (the Globus Compute cloud has no cancel: there
  the coordinator makes no hedged copies, which is reported, not failed);
* **transfer**: a small file is moved to the site's storage through its data path (local
  copy or Globus Transfer), when it has one.

Each check is ``ok``, ``warn`` or ``fail`` with a line that says what was found and, when
not ``ok``, what to do.
"""

from __future__ import annotations

import platform
import time
import uuid
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from federation.core.envelope import ResourceEnvelope
from federation.core.model import Frozen
from federation.core.snapshot import FederationSnapshot
from federation.core.tasks import ShellTask
from federation.runtime.coordinator import Coordinator

Status = Literal["ok", "warn", "fail", "skipped"]
CHECKS = ("endpoint", "worker", "task", "cancel", "transfer")


class Check(Frozen):
    site: str
    check: str
    status: Status
    detail: str
    seconds: float = Field(ge=0)


class SiteReport(Frozen):
    site: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status in ("ok", "warn", "skipped") for c in self.checks)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


class Doctor:
    """Runs the checks on one coordinator's sites."""

    def __init__(
        self,
        coord: Coordinator,
        *,
        task_timeout_s: float = 300.0,
        on_check: Callable[[Check], None] | None = None,
    ) -> None:
        self.coord = coord
        self.task_timeout_s = task_timeout_s
        self.on_check = on_check

    def run(self, sites: list[str] | None = None) -> list[SiteReport]:
        snap = self.coord.inspect_federation()
        return [self.site(name, snap) for name in (sites or list(self.coord.backends))]

    def site(self, name: str, snap: FederationSnapshot) -> SiteReport:
        checks: list[Check] = []

        def record(check: str, status: Status, detail: str, t0: float) -> Check:
            c = Check(
                site=name,
                check=check,
                status=status,
                detail=detail,
                seconds=round(time.monotonic() - t0, 2),
            )
            checks.append(c)
            if self.on_check is not None:
                self.on_check(c)
            return c

        t0 = time.monotonic()
        s = snap.site(name)
        if s is None or not s.health.reachable:
            why = "no snapshot" if s is None else (s.health.error or "unreachable")
            record("endpoint", "fail", f"probe failed: {why}", t0)
            for c in CHECKS[1:]:
                record(c, "skipped", "needs a reachable endpoint", time.monotonic())
            return SiteReport(site=name, checks=tuple(checks))
        parts = ", ".join(p.partition for p in s.partitions)
        record("endpoint", "ok", f"probe answered: Slurm {s.slurm_version}; {parts}", t0)
        self._worker(name, record)
        self._task(name, record)
        self._cancel(name, record)
        self._transfer(name, record)
        return SiteReport(site=name, checks=tuple(checks))

    # --- the checks ---------------------------------------------------------------------------
    def _worker(self, name: str, record: Callable[[str, Status, str, float], Check]) -> None:
        from functions.doctor import worker_facts

        t0 = time.monotonic()
        backend = self.coord.backends[name]
        executor = getattr(backend, "executor", None)
        if executor is None:
            record("worker", "skipped", "this site runs no functions on its login node", t0)
            return
        try:
            facts = executor({"profile": "probe"}).submit(worker_facts).result(timeout=120)
        except Exception as e:
            record(
                "worker",
                "fail",
                f"a shipped function did not run: {type(e).__name__}: {e}. Check the "
                "endpoint's worker_init (FEDERATION_WORKER_INIT) and its Python",
                t0,
            )
            return
        mine, theirs = platform.python_version(), str(facts.get("python"))
        where = f"Python {theirs} at {facts.get('executable')}, SDK {facts.get('sdk')}"
        imports = facts.get("importable") or {}
        repo = [k for k, v in dict(imports).items() if v] if isinstance(imports, dict) else []
        if _major_minor(mine) != _major_minor(theirs):
            record(
                "worker",
                "fail",
                f"{where}; the coordinator runs Python {mine}: start the endpoint's workers "
                f"with Python {_major_minor(mine)}",
                t0,
            )
        elif repo:
            record(
                "worker",
                "warn",
                f"{where}; the workers can import {', '.join(repo)} from this repository: "
                "not needed (everything is shipped by value), and a stale copy there is "
                "never used",
                t0,
            )
        else:
            record("worker", "ok", f"{where}; nothing of this repository needed", t0)

    def _task(self, name: str, record: Callable[[str, Status, str, float], Check]) -> None:
        t0 = time.monotonic()
        env = ResourceEnvelope(sites=(name,), walltime_s=120)
        try:
            h = self.coord.submit_task(ShellTask(command="hostname", name="doctor"), env)
        except Exception as e:
            record("task", "fail", f"could not place or ship a tiny task: {e}", t0)
            return
        try:
            r = self.coord.get_result(h, timeout_s=self.task_timeout_s)
        except TimeoutError:
            self.coord.cancel(h)
            record(
                "task",
                "warn",
                f"a tiny task on {h.shape.describe()} did not start within "
                f"{self.task_timeout_s:.0f} s (the queue is busy); withdrawn",
                t0,
            )
            return
        if r.status != "completed":
            record("task", "fail", f"a tiny task failed on {r.site}: {r.error}", t0)
            return
        record(
            "task",
            "ok",
            f"ran in Slurm job {r.slurm_job_id} on {h.shape.describe()} "
            f"(waited {r.queue_wait_s or 0:.1f} s)",
            t0,
        )

    def _cancel(self, name: str, record: Callable[[str, Status, str, float], Check]) -> None:
        t0 = time.monotonic()
        if not self.coord.backends[name].can_cancel:
            record(
                "cancel",
                "warn",
                "queued tasks cannot be withdrawn here (the Globus Compute cloud has no task "
                "cancel): the coordinator makes no hedged or watched copies on this site",
                t0,
            )
            return
        env = ResourceEnvelope(sites=(name,), walltime_s=120)
        h = self.coord.submit_task(ShellTask(command="sleep 20", name="doctor-cancel"), env)
        deadline = time.monotonic() + 30
        while h.compute_task_id is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the site acknowledges the submission first
        ok = self.coord.cancel(h)
        if ok:
            record("cancel", "ok", "a queued task was withdrawn", t0)
            return
        h.wait(60)
        record(
            "cancel",
            "warn",
            f"the task started before it could be withdrawn ({h.state}); cancel works only "
            "for queued tasks",
            t0,
        )

    def _transfer(self, name: str, record: Callable[[str, Status, str, float], Check]) -> None:
        from federation.core.errors import FederationError

        t0 = time.monotonic()
        mgr = self.coord.transfers
        try:
            backend = mgr.backend_for(name, name)
        except FederationError as e:
            record("transfer", "warn", f"no data path ({e}); move_data cannot reach it", t0)
            return
        if backend.name != "local":
            record(
                "transfer",
                "ok",
                f"served by {backend.name} (not exercised: it needs a file on the collection)",
                t0,
            )
            return
        from federation.core.storage import site_storage

        home = self.coord.store.path.parent if self.coord.store is not None else None
        src = f"doctor/{uuid.uuid4().hex[:8]}.txt"
        path = site_storage(name, getattr(backend, "home", None) or home) / src
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("federation doctor\n")
        h = self.coord.move_data(name, src, name, src + ".copy", paths="storage")
        if not h.wait(60) or h.state != "succeeded":
            record("transfer", "fail", f"a small copy did not succeed: {h.state} {h.error}", t0)
            return
        record("transfer", "ok", f"{backend.name}: copied and checksummed a small file", t0)
