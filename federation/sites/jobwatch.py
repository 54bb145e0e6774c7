"""Each tagged task on a site, watched through its claim: its start, and its withdrawal.

:class:`TaggedJobs` belongs to one site. ``track`` records a task's tag (and its shape) when
it is shipped; while any tracked task has not been seen starting, one thread looks at the
site every ``check_s`` seconds: one shell function through the endpoint's probe profile that
lists the claims of the waiting tags (:func:`jobtags.look_command`), and reports each start
once to the listeners, with the Slurm job id the task wrote into its claim. This is the only
place the coordinator asks a site about its tasks: the Globus Compute service announces no
start. The interval is the site's to choose (TACC asks polling scripts to run every few
minutes).

A withdrawal claims the tag before the task can (:func:`jobtags.withdraw_command`); the one
that wins holds the shape's pending blocks beyond the work still waiting for them. While a
withdrawn copy is still outstanding in its user endpoint process, later looks keep the
shape's unheld pending blocks at the work waiting: they release held blocks the shape needs
again, and hold the ones its engine asks for the withdrawn copies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
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
    shape: str | None = None
    job_id: str | None = None
    claimed_by: str | None = None
    """The Globus Compute id written into the claim (known before the acknowledgement)."""
    reported: bool = False
    withdrawn: bool = False

    @property
    def task_id(self) -> str | None:
        tid = getattr(self.future, "task_id", None)
        if tid is None:
            return self.claimed_by
        return str(tid)


class TaggedJobs:
    """The tagged tasks of one site and the thread that learns when they start."""

    def __init__(
        self, site: str, run_shell: ShellRunner, check_s: float, *, watch_starts: bool = True
    ) -> None:
        self.site = site
        self.watch_starts = watch_starts
        """Look for starts in the claims; False where the site reports starts itself (the
        embedded federation's endpoints do: :meth:`mark_started`), so looks run only to
        release held blocks."""
        self._run = run_shell
        self.check_s = check_s
        self._lock = threading.Lock()
        self._tracked: dict[str, _Tracked] = {}
        self._listeners: list[StartListener] = []
        self._held: set[str] = set()
        """Shapes where a withdrawal held pending blocks (looks release them when needed)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.checks = 0
        """How many looks ran (the cost of learning starts this way: one per interval)."""
        self.withdrawals = {"won": 0, "lost": 0, "held_blocks": 0}

    def on_started(self, listener: StartListener) -> None:
        self._listeners.append(listener)

    def track(self, tag: str, future: Future[Any], shape: str | None = None) -> None:
        x = _Tracked(tag=tag, future=future, shape=shape)
        with self._lock:
            self._tracked[tag] = x
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._loop, daemon=True, name=f"starts-{self.site}"
                )
                self._thread.start()
        if not self.watch_starts:  # no look reads its claim: it goes when it ends
            future.add_done_callback(lambda _f: self._forget(tag, x))
            return
        self._wake.set()

    def _forget(self, tag: str, x: _Tracked) -> None:
        with self._lock:
            if self._tracked.get(tag) is x:
                del self._tracked[tag]

    def mark_started(self, task_id: str, job_id: str | None = None) -> None:
        """The site reported ``task_id`` started (where starts are not read from claims):
        it cannot be withdrawn, and no longer waits for a block of its shape."""
        x = self._find(task_id)
        if x is not None:
            with self._lock:
                x.reported, x.job_id = True, job_id or x.job_id

    def _find(self, task_id: str) -> _Tracked | None:
        with self._lock:
            for t in self._tracked.values():
                if t.task_id == task_id:
                    return t
        return None

    def waiting(self, shape: str, but: _Tracked | None = None) -> int:
        """Tasks of ``shape`` not yet seen starting, not withdrawn and not ended."""
        with self._lock:
            return sum(
                1
                for x in self._tracked.values()
                if x.shape == shape
                and x is not but
                and not (x.reported or x.withdrawn or x.future.done())
            )

    def _withdrawn_open(self, shape: str) -> bool:
        """A withdrawn copy of ``shape`` its user endpoint process still holds (its engine
        counts it outstanding, so may ask for a block for it). Called with the lock held."""
        return any(
            x.shape == shape and x.withdrawn and not x.future.done() for x in self._tracked.values()
        )

    # --- starts ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait()
            self._wake.clear()
            # the first look one interval after a task is shipped: none starts sooner
            if self._wait_closed(self.check_s):
                return
            while not self._closed and self._check_once():
                if self._wait_closed(self.check_s):  # one look per interval while waiting
                    return

    def _wait_closed(self, seconds: float) -> bool:
        self._stop.wait(seconds)
        return self._closed

    def _check_once(self) -> bool:
        """One look; True while tracked tasks remain unreported (or holds to settle)."""
        with self._lock:
            # a task that ended without its start seen still gets its look: its claim stays
            for tag in [
                t
                for t, x in self._tracked.items()
                if x.reported or (x.withdrawn and x.future.done())
            ]:
                del self._tracked[tag]
            waiting = [
                x
                for x in self._tracked.values()
                if not x.reported and not x.withdrawn and self.watch_starts
            ]
            held = set(self._held)
        if (not waiting and not held) or self._closed:
            return False
        shapes = {s: self.waiting(s) for s in held}
        self.checks += 1
        try:
            res = self._run(jobtags.look_command((x.tag for x in waiting), shapes)).result(
                timeout=SHELL_TIMEOUT_S
            )
        except Exception as e:
            if not self._closed:  # closing stops the result watcher the look waits on
                logger.warning("site %s: could not read the task claims: %s", self.site, e)
            return True
        if getattr(res, "returncode", 0) != 0:
            logger.warning(
                "site %s: reading the task claims failed (%s): %s",
                self.site,
                getattr(res, "returncode", "?"),
                str(getattr(res, "stderr", "")).strip()[-300:],
            )
            return True
        look = jobtags.parse_look(str(getattr(res, "stdout", "")))
        for shape, jobs in look.shapes.items():
            with self._lock:  # watched while a withdrawn copy may still ask for a block
                if jobs.held == 0 and not self._withdrawn_open(shape):
                    self._held.discard(shape)
        for x in waiting:
            claim = look.claims.get(x.tag)
            if claim is None or claim.withdrawn:
                continue
            with self._lock:
                x.job_id, x.claimed_by = claim.job_id, claim.compute_task_id
                report = not x.reported and x.task_id is not None
                if report:
                    x.reported = True
            if report:
                self._report(x)
        return True

    def claims(self, tags: list[str]) -> dict[str, jobtags.Claim]:
        """The claims of ``tags`` now (one look, waited for): used after a restart to tell
        which task is which by the Globus Compute id each wrote into its claim."""
        res = self._run(jobtags.look_command(tags)).result(timeout=SHELL_TIMEOUT_S)
        if getattr(res, "returncode", 0) != 0:
            raise RuntimeError(
                f"site {self.site}: reading the task claims failed: "
                f"{str(getattr(res, 'stderr', '')).strip()[-300:]}"
            )
        return jobtags.parse_look(str(getattr(res, "stdout", ""))).claims

    def settle(self, chains: Mapping[str, Sequence[str]]) -> dict[str, jobtags.Settled]:
        """A restart's in-flight shipments (key -> their tags by generation), settled by
        one shell function (:func:`jobtags.settle_command`), waited for."""
        if not chains:
            return {}
        res = self._run(jobtags.settle_command(chains)).result(timeout=SHELL_TIMEOUT_S)
        if getattr(res, "returncode", 0) != 0:
            raise RuntimeError(
                f"site {self.site}: settling in-flight shipments failed: "
                f"{str(getattr(res, 'stderr', '')).strip()[-300:]}"
            )
        return jobtags.parse_settle(str(getattr(res, "stdout", "")))

    def _report(self, x: _Tracked) -> None:
        assert x.task_id is not None
        for listener in self._listeners:
            try:
                listener(x.task_id, x.job_id)
            except Exception:
                logger.exception("site %s: start listener failed for %s", self.site, x.task_id)

    # --- withdrawal ------------------------------------------------------------------------
    def withdraw(self, task_id: str) -> bool:
        """Withdraw a task not known to have started: True when the withdrawal is on its way
        (it wins the claim unless the task claimed first, which is logged), False when it
        started or is unknown.

        Does not wait for the site (it may be called from a result callback)."""
        return self._withdraw(self._find(task_id))

    def withdraw_future(self, future: Future[Any]) -> bool:
        """:meth:`withdraw` for a task known by its future (not acknowledged yet: no id)."""
        with self._lock:
            x = next((t for t in self._tracked.values() if t.future is future), None)
        return self._withdraw(x)

    def _withdraw(self, x: _Tracked | None) -> bool:
        if x is None or x.future.done() or self._closed:
            return False
        with self._lock:
            if x.reported or x.withdrawn:
                return False
            x.withdrawn = True
        waiting = self.waiting(x.shape, but=x) if x.shape else 0
        fut = self._run(jobtags.withdraw_command(x.tag, x.shape, waiting))
        fut.add_done_callback(lambda f: self._withdrawn(x, f))
        return True

    def _withdrawn(self, x: _Tracked, fut: Future[Any]) -> None:
        try:
            res = fut.result()
        except Exception as e:
            logger.warning("site %s: withdrawing task %s failed: %s", self.site, x.task_id, e)
            return
        won, claim, held = jobtags.parse_withdraw(x.tag, str(getattr(res, "stdout", "")))
        if won:
            with self._lock:
                self.withdrawals["won"] += 1
                self.withdrawals["held_blocks"] += held
                if x.shape:  # later looks hold the blocks its engine asks for it
                    self._held.add(x.shape)
            if x.shape:
                self._wake.set()
            logger.info("site %s: withdrew task %s (held %d block(s))", self.site, x.task_id, held)
        elif claim is not None:
            with self._lock:
                self.withdrawals["lost"] += 1
                x.job_id = claim.job_id
            logger.warning(
                "site %s: task %s claimed its start (job %s) before it was withdrawn; it runs "
                "to its end and its result is discarded",
                self.site,
                x.task_id,
                claim.job_id,
            )
        else:
            logger.warning(
                "site %s: withdrawing task %s: unreadable answer %r",
                self.site,
                x.task_id,
                str(getattr(res, "stdout", ""))[-300:],
            )

    def close(self) -> None:
        self._closed = True
        self._stop.set()
        self._wake.set()
