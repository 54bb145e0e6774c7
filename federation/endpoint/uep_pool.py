"""The manager's side of a site's user endpoint processes (UEPs).

A real multi-user endpoint (Globus Compute 4.x) forks one user endpoint process per
distinct (identity, ``user_endpoint_config``); the UEP holds its engine and shuts down
``idle_heartbeats_soft`` heartbeats after its last task finished, or
``idle_heartbeats_hard`` heartbeats after anything last moved even with tasks outstanding.
:class:`UserEndpointPool` does that for the endpoint daemon: one child process
(:mod:`federation.endpoint.user_endpoint`) per (identity, rendered config), the idle
heartbeats counted as the real UEP's main loop counts them (:class:`IdleClock`, fed by the
daemon's heartbeats), and a child that dies fails its outstanding tasks saying so (the
next task for its key starts a new one). The task table stays with the daemon: the pool
reports through ``on_started``, ``on_result`` and ``on_lost``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from federation.core.spec import SiteSpec
from federation.endpoint import protocol
from federation.endpoint.proc_stats import tree_memory
from federation.endpoint.user_endpoint import command as uep_command

logger = logging.getLogger(__name__)

HOLDS_OTHERS = "its user endpoint process holds other tasks"
"""Why a cancel is refused for a task that shares its process (and blocks) with others:
the caller withdraws it by its claim instead (:mod:`federation.sites.jobtags`)."""

ANONYMOUS = "anonymous"
"""The identity of a submission that names none."""
RENDER_CACHE_MAX = 256
STOP_GRACE_S = 60.0
"""A UEP told to stop that is still there this long after is killed (with its group)."""
SHUTDOWN_WAIT_S = 20.0
"""How long the manager's shutdown waits for its UEPs' engines to shut down."""

OnStarted = Callable[[str, Any, Any], None]
OnResult = Callable[[str, bytes], None]
OnLost = Callable[[str, str, str], None]


@dataclass(frozen=True)
class UepSpec:
    """What one UEP is for: an identity and a rendered config (``key`` names the pair)."""

    key: str
    identity: str
    rendered: str
    user_opts: Mapping[str, Any]

    @property
    def profile(self) -> str:
        return str(self.user_opts.get("profile") or "task")

    @property
    def partition(self) -> str | None:
        p = self.user_opts.get("partition")
        return None if p is None else str(p)

    def describe(self) -> str:
        where = f" on {self.partition}" if self.partition else ""
        return f"identity {self.identity}, profile {self.profile}{where}"


@dataclass
class IdleClock:
    """The idle-heartbeat counting of a real UEP's main loop (``interchange.py``).

    At each heartbeat: if a task arrived or a result left since the last one, both counts
    restart; otherwise the hard count grows, and the soft count too when every task received
    has its result. ``beat`` names the limit reached (``"soft"``, ``"hard"``) or None.
    A soft limit of 0 means always on.
    """

    soft_limit: int
    hard_limit: int
    soft: int = 0
    hard: int = 0
    _last: tuple[int, int] = (0, 0)

    def beat(self, received: int, forwarded: int) -> str | None:
        moved = (received, forwarded) != self._last
        self._last = (received, forwarded)
        if not self.soft_limit:
            return None
        if moved:
            self.soft = self.hard = 0
            return None
        self.hard += 1
        if (received or forwarded) and forwarded >= received:
            self.soft += 1
            if self.soft >= self.soft_limit:
                return "soft"
        elif self.hard > max(self.soft_limit + 1, self.hard_limit):
            return "hard"
        return None


@dataclass
class UepHandle:
    """One UEP child as the manager sees it."""

    spec: UepSpec
    proc: subprocess.Popen[bytes]
    conn: Connection
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    outstanding: set[str] = field(default_factory=set)
    state: str = "starting"
    """``starting`` (engine coming up), ``ready``, ``stopping`` (told to stop)."""
    stop_reason: str | None = None
    stop_at: float = 0.0
    error: str | None = None
    """Why the config did not load or the engine did not start (its ``failed`` message)."""
    clock: IdleClock | None = None
    received: int = 0
    forwarded: int = 0
    started_at: float = field(default_factory=time.monotonic)
    last_moved: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


class UserEndpointPool:
    """One UEP child per (identity, rendered config) of one site's endpoint.

    ``lock`` is the daemon's lock: the daemon takes it around recording a task and
    :meth:`take`, so a task is in exactly one UEP's outstanding set or none.
    """

    def __init__(
        self,
        site: SiteSpec,
        endpoint_id: uuid.UUID,
        run_dir: Path,
        lock: threading.RLock,
        on_started: OnStarted,
        on_result: OnResult,
        on_lost: OnLost,
    ) -> None:
        self.site = site
        self.endpoint_id = endpoint_id
        self.run_dir = run_dir
        self._lock = lock
        self._on_started = on_started
        self._on_result = on_result
        self._on_lost = on_lost
        self._active: dict[str, UepHandle] = {}
        """The UEP taking new tasks, per key."""
        self._live: dict[int, UepHandle] = {}
        """Every UEP not yet exited (stopping ones too), per pid."""
        self._rendered: dict[str, str] = {}
        """Rendered config per (user_opts, user_runtime): rendering takes tens of ms, and a
        real endpoint renders once per user endpoint process, not once per task."""
        self._closing = False

    # --- which UEP ------------------------------------------------------------------------
    def spec_for(
        self,
        user_opts: Mapping[str, Any],
        user_runtime: Mapping[str, Any] | None,
        identity: str | None,
    ) -> UepSpec:
        """Render the site's template for ``user_opts`` (raises FederationError if invalid)."""
        from federation.sites.endpoint_config import render_user_config

        opts_key = json.dumps([user_opts, user_runtime], sort_keys=True, default=str)
        rendered = self._rendered.get(opts_key)
        if rendered is None:
            rendered = render_user_config(self.site, user_opts, user_runtime)
            if len(self._rendered) >= RENDER_CACHE_MAX:
                self._rendered.clear()
            self._rendered[opts_key] = rendered
        ident = identity or ANONYMOUS
        key = hashlib.sha256(f"{ident}\n{rendered}".encode()).hexdigest()[:16]
        return UepSpec(key=key, identity=ident, rendered=rendered, user_opts=dict(user_opts))

    def take(self, spec: UepSpec, task_id: str) -> UepHandle:
        """The UEP for ``spec`` (started if there is none) now holds ``task_id``."""
        with self._lock:
            h = self._active.get(spec.key)
            if h is None:
                h = self._spawn(spec)
            h.outstanding.add(task_id)
            h.received += 1
            h.last_moved = time.monotonic()
            return h

    def send(self, h: UepHandle, task_id: str, packed_task: bytes) -> None:
        """Hand ``task_id`` to ``h`` (if it is gone, its exit fails the task)."""
        msg = {"op": "submit", "task_id": task_id, "packed_task": protocol.b64(packed_task)}
        self._send(h, msg)

    def _send(self, h: UepHandle, msg: protocol.Message) -> None:
        try:
            with h.send_lock:
                protocol.send(h.conn, msg)
        except (OSError, ValueError) as e:
            logger.warning("UEP %s (%s): %s not sent: %s", h.pid, h.spec.key, msg["op"], e)

    def _spawn(self, spec: UepSpec) -> UepHandle:
        """Start a UEP child (called with the lock held; its engine starts on its own)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        home = self.run_dir / "engines" / spec.key
        home.mkdir(parents=True, exist_ok=True)
        try:
            with (home / "uep.stdout").open("ab") as out:
                proc = subprocess.Popen(
                    [
                        *uep_command(),
                        "--fd",
                        str(theirs.fileno()),
                        "--run-dir",
                        str(home),
                        "--endpoint-id",
                        str(self.endpoint_id),
                    ],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own group: its engine's processes with it
                    cwd=home,
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        h = UepHandle(spec=spec, proc=proc, conn=Connection(ours.detach()))
        self._active[spec.key] = h
        self._live[h.pid] = h
        self._send(h, {"op": "config", "key": spec.key, "rendered": spec.rendered})
        threading.Thread(target=self._read, args=(h,), daemon=True, name=f"uep-{h.pid}").start()
        logger.info("started UEP %s for %s (key %s)", h.pid, spec.describe(), spec.key)
        return h

    # --- what a UEP says ------------------------------------------------------------------
    def _read(self, h: UepHandle) -> None:
        """Take ``h``'s messages until it exits, then settle what it held."""
        conn = h.conn
        try:
            while True:
                if conn.poll(0.5):
                    self._handle(h, protocol.recv(conn))
                elif h.proc.poll() is not None:  # exited (a descendant may hold its end)
                    while conn.poll(0):
                        self._handle(h, protocol.recv(conn))
                    break
        except (EOFError, OSError, ValueError):
            pass
        try:
            rc = h.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            logger.warning("UEP %s closed its pipe but did not exit; killing it", h.pid)
            self._kill(h)
            rc = h.proc.wait()
        with h.send_lock:  # no send is writing to this descriptor as it closes
            conn.close()
        self._exited(h, rc)

    def _handle(self, h: UepHandle, msg: protocol.Message) -> None:
        try:
            self._take_message(h, msg)
        except Exception:  # one bad message must not leave the UEP unwatched
            logger.exception("UEP %s: message %s not handled", h.pid, msg.get("op"))

    def _take_message(self, h: UepHandle, msg: protocol.Message) -> None:
        op = msg["op"]
        if op == "task.result":
            tid = str(msg["task_id"])
            with self._lock:
                held = tid in h.outstanding
                h.outstanding.discard(tid)
                h.forwarded += 1
                h.last_moved = time.monotonic()
            if held:
                self._on_result(tid, protocol.unb64(msg["result"]))
        elif op == "task.started":
            self._on_started(str(msg["task_id"]), msg.get("job_id"), msg.get("block_id"))
        elif op == "ready":
            with self._lock:
                soft, hard = int(msg["idle_heartbeats_soft"]), int(msg["idle_heartbeats_hard"])
                h.clock = IdleClock(soft, hard, _last=(h.received, h.forwarded))
                if h.state == "starting":
                    h.state = "ready"
            logger.info("UEP %s ready (idle_heartbeats_soft=%d, _hard=%d)", h.pid, soft, hard)
        elif op == "failed":
            h.error = str(msg.get("error"))
        elif op == "stopping":  # ending on its own (its engine is in a bad state)
            with self._lock:
                if h.state != "stopping":
                    self._retire(h, str(msg.get("reason")))
        else:
            logger.warning("UEP %s sent an unknown message %r", h.pid, op)

    def _exited(self, h: UepHandle, rc: int) -> None:
        with self._lock:
            if self._active.get(h.spec.key) is h:
                del self._active[h.spec.key]
            self._live.pop(h.pid, None)
            lost = sorted(h.outstanding)
            h.outstanding.clear()
            closing = self._closing
        self._kill(h)  # what is left of its group (an engine's interchange, if it died)
        how = _exit_text(rc)
        logger.log(
            logging.INFO if h.stop_reason and rc == 0 else logging.WARNING,
            "UEP %s (%s) ended: %s (%s); %d task(s) outstanding",
            h.pid,
            h.spec.key,
            how,
            h.stop_reason or "unexpected",
            len(lost),
        )
        if closing or not lost:
            return  # on the manager's shutdown a restart settles them, as before
        code, text = self._lost_message(h, how)
        for tid in lost:
            self._on_lost(tid, code, text)

    def _lost_message(self, h: UepHandle, how: str) -> tuple[str, str]:
        """The error code and message for a task ``h`` held when it ended."""
        opts = json.dumps(dict(h.spec.user_opts), sort_keys=True, default=str)
        uep = (
            f"endpoint {self.site.name}: user endpoint process {h.pid} ({h.spec.describe()}, "
            f"config {opts})"
        )
        if h.error is not None:
            return "ENGINE_START_FAILED", (
                f"endpoint {self.site.name} could not start an engine for {opts}: {h.error}"
            )
        if h.stop_reason == "hard" and h.clock is not None:
            return "USER_ENDPOINT_IDLE", (
                f"{uep} shut down after {h.clock.hard} heartbeats in which no task or result "
                "moved (idle_heartbeats_hard) while this task was outstanding. Resubmit it."
            )
        if h.stop_reason is not None:
            return "USER_ENDPOINT_STOPPED", (
                f"{uep} ended ({h.stop_reason}; {how}) while this task was outstanding. "
                "Resubmit it."
            )
        return "USER_ENDPOINT_DIED", (
            f"{uep} died unexpectedly ({how}) while this task was queued or running; its "
            "engine is gone. Resubmit it."
        )

    @staticmethod
    def _kill(h: UepHandle) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(h.pid, signal.SIGKILL)  # its session: it and its engine's processes

    # --- lifetimes ------------------------------------------------------------------------
    def _retire(self, h: UepHandle, reason: str) -> None:
        """``h`` takes no new task (called with the lock held); the caller sends stop."""
        if self._active.get(h.spec.key) is h:
            del self._active[h.spec.key]
        h.state, h.stop_reason, h.stop_at = "stopping", reason, time.monotonic()

    def stop(self, h: UepHandle, reason: str) -> None:
        with self._lock:
            if h.state != "stopping":
                self._retire(h, reason)
        self._send(h, {"op": "stop", "reason": reason})

    def tick(self) -> None:
        """One endpoint heartbeat: stop UEPs whose idle limit came, kill late stoppers."""
        now = time.monotonic()
        with self._lock:
            ending: list[tuple[UepHandle, str]] = []
            for h in list(self._active.values()):
                if h.state == "ready" and h.clock is not None:
                    reason = h.clock.beat(h.received, h.forwarded)
                    if reason:
                        self._retire(h, reason)
                        ending.append((h, reason))
            late = [
                h
                for h in self._live.values()
                if h.state == "stopping" and now - h.stop_at > STOP_GRACE_S
            ]
        for h, reason in ending:
            logger.info(
                "UEP %s (%s): idle_heartbeats_%s reached; stopping it", h.pid, h.spec.key, reason
            )
            self._send(h, {"op": "stop", "reason": f"idle_heartbeats_{reason}"})
        for h in late:
            logger.warning("UEP %s did not stop within %.0f s; killing it", h.pid, STOP_GRACE_S)
            self._kill(h)

    def withdraw(self, key: str, task_id: str) -> tuple[UepHandle | None, str]:
        """For a cancel: take ``task_id`` back from the UEP of ``key`` if it holds only it.

        Called with the lock held. Returns the UEP to stop (None if there is none) and "",
        or None and why not.
        """
        h = self._active.get(key)
        if h is None:
            h = next((x for x in self._live.values() if task_id in x.outstanding), None)
        if h is None:
            return None, ""
        if h.outstanding - {task_id}:
            return None, HOLDS_OTHERS
        h.outstanding.discard(task_id)
        self._retire(h, "cancel")
        return h, ""

    def wait(self, h: UepHandle, timeout_s: float) -> bool:
        """Wait for ``h`` to exit; False if it is still there."""
        try:
            h.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def shutdown(self) -> None:
        """Stop every UEP (their engines shut down, cancelling their blocks)."""
        with self._lock:
            self._closing = True
            handles = list(self._live.values())
            for h in handles:
                if h.state != "stopping":
                    self._retire(h, "endpoint shutdown")
        for h in handles:
            self._send(h, {"op": "stop", "reason": "endpoint shutdown"})
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        for h in handles:
            if not self.wait(h, max(0.0, deadline - time.monotonic())):
                logger.warning("UEP %s did not shut down in time; killing it", h.pid)
                self._kill(h)

    # --- reports --------------------------------------------------------------------------
    def report(self) -> list[dict[str, Any]]:
        """Each live UEP: pid, identity, profile, partition, tasks, memory, age, idle time."""
        now = time.monotonic()
        with self._lock:
            rows = [
                (h, len(h.outstanding), h.received, h.started_at, h.last_moved, h.state)
                for h in self._live.values()
            ]
        mem = tree_memory([h.pid for h, *_ in rows])
        out: list[dict[str, Any]] = []
        for h, outstanding, received, started, moved, state in rows:
            m = mem.get(h.pid)
            out.append(
                {
                    "pid": h.pid,
                    "key": h.spec.key,
                    "identity": h.spec.identity,
                    "profile": h.spec.profile,
                    "partition": h.spec.partition,
                    "state": state,
                    "outstanding": outstanding,
                    "tasks": received,
                    "rss_mb": round(m.tree_kb / 1024, 1) if m else 0.0,
                    "own_rss_mb": round(m.own_kb / 1024, 1) if m else 0.0,
                    "processes": m.processes if m else 0,
                    "age_s": round(now - started, 1),
                    "idle_s": round(0.0 if outstanding else now - moved, 1),
                }
            )
        return sorted(out, key=lambda r: r["pid"])

    def counts(self) -> tuple[int, int]:
        """(live UEPs, tasks they hold)."""
        with self._lock:
            return len(self._live), sum(len(h.outstanding) for h in self._live.values())
