"""Each tagged copy's Slurm job, watched on the site: its start, and its withdrawal.

:class:`TaggedJobs` belongs to one site. ``track`` records a task's tag when it is shipped;
while any tracked task has not been seen starting, one thread asks the site every
``check_s`` seconds (a ``squeue`` shell function through the endpoint's probe profile) and
reports each start once to the listeners, with the Slurm job id. This is the only place the
coordinator asks a site about its tasks: the Globus Compute service announces no start. The
interval is the site's to choose (TACC asks polling scripts to run every few minutes).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from federation.sites import jobtags

logger = logging.getLogger(__name__)

ShellRunner = Callable[[str], "Future[Any]"]
"""Runs a shell command on the site's login node; resolves to the SDK's ``ShellResult``."""
StartListener = Callable[[str, "str | None"], None]
"""Called with (compute task id, Slurm job id) when a tracked task's job started."""

SHELL_TIMEOUT_S = 120.0


@dataclass
class _Tracked:
    tag: str
    future: Future[Any]
    state: str = ""
    job_id: str | None = None
    reported: bool = False
    withdrawn: bool = False

    @property
    def task_id(self) -> str | None:
        tid = getattr(self.future, "task_id", None)
        return None if tid is None else str(tid)


class TaggedJobs:
    """The tagged tasks of one site and the thread that learns when they start."""

    def __init__(self, site: str, run_shell: ShellRunner, check_s: float) -> None:
        self.site = site
        self._run = run_shell
        self.check_s = check_s
        self._lock = threading.Lock()
        self._tracked: dict[str, _Tracked] = {}
        self._listeners: list[StartListener] = []
        self._last_looks: set[str] = set()
        """Tags of tasks that ended unseen: looked for once more, then forgotten."""
        self._wake = threading.Event()
        self._urgent = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.checks = 0
        """How many ``squeue`` rounds ran (the cost of learning starts this way)."""

    def on_started(self, listener: StartListener) -> None:
        self._listeners.append(listener)

    def track(self, tag: str, future: Future[Any]) -> None:
        x = _Tracked(tag=tag, future=future)
        with self._lock:
            self._tracked[tag] = x
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, daemon=True, name=f"starts-{self.site}"
                )
                self._thread.start()
        self._wake.set()
        future.add_done_callback(lambda _f: self._ended(x))

    def _ended(self, x: _Tracked) -> None:
        """A task ended before its start was seen: its job lingers a few seconds (the
        block idles before it is released), so one last look can still name it."""
        with self._lock:
            if x.reported or x.withdrawn or self._closed:
                return
            self._last_looks.add(x.tag)
        self._urgent.set()
        self._wake.set()

    def _find(self, task_id: str) -> _Tracked | None:
        with self._lock:
            for t in self._tracked.values():
                if t.task_id == task_id:
                    return t
        return None

    # --- starts ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            # the first read one interval after a task is shipped: none starts sooner
            if self._wait_closed(self.check_s):
                return
            while not self._closed and self._check_once():
                # one round per interval while something is waiting to start
                if self._wait_closed(self.check_s):
                    return

    def _wait_closed(self, seconds: float) -> bool:
        """Wait out the interval (tasks tracked meanwhile join the next round); a last look
        for a task that ended unseen cuts it short, as its job is released soon."""
        self._urgent.wait(seconds)
        self._urgent.clear()
        return self._closed

    def _check_once(self) -> bool:
        """One ``squeue`` round; True while tracked tasks remain unstarted."""
        with self._lock:
            last = [self._tracked[t] for t in self._last_looks if t in self._tracked]
            self._last_looks.clear()
            for tag in [t for t, x in self._tracked.items() if x.future.done()]:
                del self._tracked[tag]
            waiting = [x for x in self._tracked.values() if not x.reported and not x.withdrawn]
            waiting += [x for x in last if not x.reported]
        if not waiting or self._closed:  # closed: the site's executors are gone
            return False
        self.checks += 1
        try:
            res = self._run(jobtags.squeue_command(x.tag for x in waiting)).result(
                timeout=SHELL_TIMEOUT_S
            )
        except Exception as e:
            if not self._closed:  # closing stops the result watcher the read waits on
                logger.warning("site %s: could not read squeue for tagged jobs: %s", self.site, e)
            return True
        if getattr(res, "returncode", 0) != 0:
            logger.warning(
                "site %s: squeue for tagged jobs failed (%s): %s",
                self.site,
                getattr(res, "returncode", "?"),
                str(getattr(res, "stderr", "")).strip()[-300:],
            )
            return True
        jobs = jobtags.parse_squeue(str(getattr(res, "stdout", "")))
        for x in waiting:
            job = jobs.get(x.tag)
            if job is None:
                continue
            with self._lock:
                x.state, x.job_id = job.state, job.job_id
                # a task that ended ran in its job, whatever the job's state now (a block
                # released after idling shows CANCELLED)
                started = job.started or (x.future.done() and job.state != "PENDING")
                report = started and not x.reported and x.task_id is not None
                if report:
                    x.reported = True
            if report:
                self._report(x)
        return True

    def _report(self, x: _Tracked) -> None:
        assert x.task_id is not None
        for listener in self._listeners:
            try:
                listener(x.task_id, x.job_id)
            except Exception:
                logger.exception("site %s: start listener failed for %s", self.site, x.task_id)

    # --- withdrawal ------------------------------------------------------------------------
    def withdraw(self, task_id: str) -> bool:
        """Withdraw a task not known to have started: True when it will not run (its marker
        is being left and its pending job cancelled), False when it started or is unknown.

        Does not wait for the site (it may be called from a result callback): the outcome is
        logged when the shell function returns."""
        x = self._find(task_id)
        if x is None or x.future.done() or self._closed:
            return False
        with self._lock:
            if x.reported or x.state in jobtags.STARTED_STATES or x.withdrawn:
                return False
            x.withdrawn = True
        fut = self._run(jobtags.cancel_command(x.tag))
        fut.add_done_callback(lambda f: self._withdrawn(x, f))
        return True

    def _withdrawn(self, x: _Tracked, fut: Future[Any]) -> None:
        try:
            res = fut.result()
        except Exception as e:
            logger.warning("site %s: withdrawing task %s failed: %s", self.site, x.task_id, e)
            return
        before = jobtags.parse_cancel(str(getattr(res, "stdout", "")))
        if before is not None and before in jobtags.STARTED_STATES:
            logger.warning(
                "site %s: task %s had started (job %s) before it was withdrawn; it runs to "
                "its end and its result is discarded",
                self.site,
                x.task_id,
                x.job_id,
            )
        else:
            logger.info("site %s: withdrew task %s (job was %r)", self.site, x.task_id, before)

    def close(self) -> None:
        self._closed = True
        self._urgent.set()
        self._wake.set()
