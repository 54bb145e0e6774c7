"""One site's endpoint process: real Globus Compute engines behind a unix socket.

Run as ``python -m federation.endpoint.daemon --site NAME --run-dir DIR --endpoint-id UUID``
with the site's Slurm environment (``SLURM_CONF``) in its environment, as a real endpoint
runs on the site's login node. For each distinct ``user_endpoint_config`` it renders the
site's ``user_config_template.yaml.j2`` through the endpoint's own loader, builds the engine
with ``load_config_yaml`` and starts it; shaped tasks therefore reach Slurm through the
engine's own SlurmProvider and ``sbatch``. Results are kept in SQLite until the service
has them, so a coordinator restart loses nothing. Subscribers get a ``heartbeat`` on
subscribing and every ``FEDERATION_EP_HEARTBEAT_S`` seconds (default 30, the real
endpoint's ``heartbeat_period``); the service shows the endpoint offline when they stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import signal
import socket
import sqlite3
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Annotated, Any

import typer

from federation.core.errors import FederationError
from federation.core.spec import SiteSpec, load_site
from federation.endpoint import protocol

logger = logging.getLogger(__name__)

ENGINE_IDLE_S = float(os.environ.get("FEDERATION_ENGINE_IDLE_S", "60"))
TAGGED_IDLE_S = 5.0
"""An engine made for one tagged task is shut down this soon after it (no other task shares
its config), rather than lingering ``ENGINE_IDLE_S`` with its interchange."""
RENDER_CACHE_MAX = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    config_key TEXT,
    job_id TEXT,
    block_id TEXT,
    result_b64 TEXT,
    received_at REAL NOT NULL,
    started_at REAL,
    completed_at REAL
);
"""


@dataclass
class EngineSlot:
    """One started engine for one rendered config, and the tasks it holds."""

    key: str
    engine: Any
    outstanding: set[str] = field(default_factory=set)
    last_used: float = field(default_factory=time.monotonic)
    tagged: bool = False
    """Made for one tagged task (its config names the batch job): done once it is idle."""
    submitting: threading.Lock = field(default_factory=threading.Lock)
    """One ``engine.submit`` at a time, as the real endpoint's one task-processing thread
    calls it: the engine's executor sends on a ZeroMQ socket, which is not thread-safe
    (tasks submitted at once as a new engine came up were lost: one never reached the
    interchange and stayed 'received' forever)."""


def _error_result(task_id: str, code: str, message: str) -> bytes:
    from globus_compute_common import messagepack
    from globus_compute_common.messagepack.message_types import Result

    res = Result(
        task_id=uuid.UUID(task_id),
        data=message,
        error_details={"code": code, "user_message": message},
    )
    packed: bytes = messagepack.pack(res)
    return packed


class SiteEndpoint:
    """The engines of one site, the task table and the subscribers to its events."""

    def __init__(self, site: SiteSpec, endpoint_id: uuid.UUID, run_dir: Path) -> None:
        self.site = site
        self.endpoint_id = endpoint_id
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(run_dir / "tasks.db", check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._settle_lost_tasks()
        self._lock = threading.RLock()
        self._slots: dict[str, EngineSlot] = {}
        self._subscribers: list[Connection] = []
        self._stopping = threading.Event()
        self.heartbeat_s = protocol.heartbeat_period_s()
        self._rendered: dict[str, str] = {}
        self._starting: dict[str, threading.Lock] = {}
        """Rendered config per (user_opts, user_runtime): rendering takes tens of ms, and a
        real endpoint renders once per user endpoint process, not once per task."""

    def _settle_lost_tasks(self) -> None:
        """Tasks an earlier run of this endpoint held died with its engines: say so."""
        rows = self._db.execute(
            "SELECT task_id FROM tasks WHERE status IN ('received', 'running')"
        ).fetchall()
        now = time.time()
        for (tid,) in rows:
            msg = (
                f"endpoint {self.site.name} restarted while this task was queued or "
                "running; its batch job was cancelled. Resubmit it."
            )
            self._db.execute(
                "UPDATE tasks SET status='done', result_b64=?, completed_at=? WHERE task_id=?",
                (protocol.b64(_error_result(tid, "ENDPOINT_LOST", msg)), now, tid),
            )
        self._db.commit()
        if rows:
            logger.warning("settled %d task(s) lost in the previous run", len(rows))

    # --- subscribers -------------------------------------------------------------------
    def subscribe(self, conn: Connection) -> None:
        with self._lock:
            self._subscribers.append(conn)
        self._send(conn, self.heartbeat_message())  # as a real endpoint does on connecting

    def heartbeat_message(self) -> protocol.Message:
        """The status report pushed every ``heartbeat_s`` (a real endpoint's heartbeat)."""
        return {
            "op": "heartbeat",
            "at": time.time(),
            "period_s": self.heartbeat_s,
            "active": not self._stopping.is_set(),
            **self.info(),
        }

    def heartbeat(self) -> None:
        self._broadcast(self.heartbeat_message())

    def _send(self, conn: Connection, msg: protocol.Message) -> None:
        try:
            with self._lock:
                protocol.send(conn, msg)
        except (OSError, ValueError):
            self.unsubscribe(conn)

    def unsubscribe(self, conn: Connection) -> None:
        with self._lock:
            if conn in self._subscribers:
                self._subscribers.remove(conn)

    def _broadcast(self, msg: protocol.Message) -> None:
        with self._lock:
            subs = list(self._subscribers)
        for conn in subs:
            self._send(conn, msg)

    # --- engines -------------------------------------------------------------------------
    def _slot_for(
        self, user_opts: dict[str, Any], user_runtime: dict[str, Any] | None
    ) -> EngineSlot:
        from globus_compute_endpoint.endpoint.config.utils import load_config_yaml

        from federation.sites.endpoint_config import render_user_config

        opts_key = json.dumps([user_opts, user_runtime], sort_keys=True, default=str)
        rendered = self._rendered.get(opts_key)
        if rendered is None:
            rendered = render_user_config(self.site, user_opts, user_runtime)
            if len(self._rendered) >= RENDER_CACHE_MAX:
                self._rendered.clear()
            self._rendered[opts_key] = rendered
        key = hashlib.sha256(rendered.encode()).hexdigest()[:16]
        with self._lock:
            slot = self._slots.get(key)
            if slot is not None:
                return slot
            starting = self._starting.setdefault(key, threading.Lock())
        # Start the engine outside the endpoint lock: replies and results to every caller
        # wait on that lock, and an engine start takes seconds (over 30 s under load).
        with starting:
            with self._lock:
                slot = self._slots.get(key)
            if slot is not None:
                return slot
            config = load_config_yaml(rendered)
            engine = config.engine
            try:
                engine.start(
                    endpoint_id=self.endpoint_id,
                    run_dir=str(self.run_dir / "engines" / key),
                    monitored=True,
                )
            except Exception:
                engine.shutdown()
                raise
            slot = EngineSlot(key=key, engine=engine, tagged="job_tag" in user_opts)
            with self._lock:
                self._slots[key] = slot
            logger.info("started engine %s for %s", key, user_opts)
            return slot

    def reap_idle(self) -> None:
        """Shut down engines that held no task for ``ENGINE_IDLE_S`` (probe engines stay)."""
        now = time.monotonic()
        with self._lock:
            idle = [
                s
                for s in self._slots.values()
                if not s.outstanding
                and now - s.last_used > (TAGGED_IDLE_S if s.tagged else ENGINE_IDLE_S)
            ]
            for s in idle:
                del self._slots[s.key]
        for s in idle:
            logger.info("engine %s idle; shutting down", s.key)
            s.engine.shutdown()

    def shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for s in slots:
            try:
                s.engine.shutdown()
            except Exception:
                logger.exception("engine %s did not shut down cleanly", s.key)

    # --- tasks ---------------------------------------------------------------------------
    def receive(self, task_id: str) -> bool:
        """Record ``task_id`` as received (before the service hears it was taken, so a
        task the service counts as delivered is never unknown here); False for a resend."""
        with self._lock:
            known = self._db.execute(
                "SELECT status FROM tasks WHERE task_id=?", (task_id,)
            ).fetchone()
            if known is not None:
                logger.info("task %s already received (%s); ignoring resend", task_id, known[0])
                return False
            self._db.execute(
                "INSERT INTO tasks(task_id, status, received_at) VALUES (?, 'received', ?)",
                (task_id, time.time()),
            )
            self._db.commit()
        return True

    def submit(
        self,
        task_id: str,
        packed_task: bytes,
        user_opts: dict[str, Any],
        user_runtime: dict[str, Any] | None,
    ) -> None:
        if self.receive(task_id):
            self.run(task_id, packed_task, user_opts, user_runtime)

    def run(
        self,
        task_id: str,
        packed_task: bytes,
        user_opts: dict[str, Any],
        user_runtime: dict[str, Any] | None,
    ) -> None:
        """Hand a received task to the engine for its config (starting it if needed)."""
        from globus_compute_endpoint.engines.base import GCFuture

        try:
            slot = self._slot_for(user_opts, user_runtime)
        except FederationError as e:
            self._finish(task_id, None, _error_result(task_id, "INVALID_CONFIG", str(e)))
            return
        except Exception as e:
            msg = f"endpoint {self.site.name} could not start an engine for {user_opts}: {e}"
            logger.exception(msg)
            self._finish(task_id, None, _error_result(task_id, "ENGINE_START_FAILED", msg))
            return

        fut = GCFuture(uuid.UUID(task_id))
        fut.bind("job_id", lambda f, job_id: self._started(task_id, job_id, f.block_id))
        with self._lock:
            slot.outstanding.add(task_id)
            slot.last_used = time.monotonic()
            self._db.execute("UPDATE tasks SET config_key=? WHERE task_id=?", (slot.key, task_id))
            self._db.commit()
        fut.add_done_callback(lambda f: self._finish(task_id, slot, f.result()))
        try:
            with slot.submitting:
                slot.engine.submit(fut, packed_task, resource_specification={})
        except Exception as e:
            if not fut.done():
                self._finish(task_id, slot, _error_result(task_id, "SUBMIT_FAILED", str(e)))

    def _started(self, task_id: str, job_id: Any, block_id: Any) -> None:
        now = time.time()
        with self._lock:
            self._db.execute(
                "UPDATE tasks SET status='running', job_id=?, block_id=?, started_at=? "
                "WHERE task_id=? AND status='received'",
                (
                    None if job_id is None else str(job_id),
                    None if block_id is None else str(block_id),
                    now,
                    task_id,
                ),
            )
            self._db.commit()
        self._broadcast(
            {
                "op": "task.started",
                "task_id": task_id,
                "job_id": str(job_id),
                "block_id": str(block_id),
                "at": now,
            }
        )

    def _finish(self, task_id: str, slot: EngineSlot | None, packed_result: bytes) -> None:
        now = time.time()
        with self._lock:
            if slot is not None:
                slot.outstanding.discard(task_id)
                slot.last_used = time.monotonic()
            self._db.execute(
                "UPDATE tasks SET status='done', result_b64=?, completed_at=? WHERE task_id=?",
                (protocol.b64(packed_result), now, task_id),
            )
            self._db.commit()
        self._broadcast(
            {
                "op": "task.result",
                "task_id": task_id,
                "result": protocol.b64(packed_result),
                "at": now,
            }
        )

    def cancel(self, task_id: str) -> tuple[bool, str]:
        """Cancel a task that has not started: stops its engine if it holds nothing else."""
        with self._lock:
            row = self._db.execute(
                "SELECT status, config_key FROM tasks WHERE task_id=?", (task_id,)
            ).fetchone()
            if row is None:
                return False, "unknown task"
            status, key = row
            if status != "received":
                return False, f"task is {status}; only queued tasks can be cancelled"
            slot = self._slots.get(key) if key else None
            if slot is not None and slot.outstanding - {task_id}:
                return False, "its engine holds other tasks"
            if slot is not None:
                del self._slots[key]
        if slot is not None:
            slot.engine.shutdown()  # cancels the queued batch job (scancel)
        self._finish(task_id, None, _error_result(task_id, "CANCELLED", "task cancelled"))
        return True, "cancelled"

    def resend_result(self, task_id: str) -> None:
        """Push a finished task's kept result again (subscribers ignore a duplicate)."""
        with self._lock:
            row = self._db.execute(
                "SELECT result_b64, completed_at FROM tasks WHERE task_id=? AND status='done'",
                (task_id,),
            ).fetchone()
        if row is not None and row[0]:
            self._broadcast(
                {"op": "task.result", "task_id": task_id, "result": row[0], "at": row[1]}
            )

    def status(self, task_ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for tid in task_ids:
                row = self._db.execute(
                    "SELECT status, job_id, result_b64, started_at, completed_at FROM tasks "
                    "WHERE task_id=?",
                    (tid,),
                ).fetchone()
                if row is None:
                    continue
                out[tid] = {
                    "status": row[0],
                    "job_id": row[1],
                    "result": row[2],
                    "started_at": row[3],
                    "completed_at": row[4],
                }
        return out

    def info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "site": self.site.name,
                "endpoint_id": str(self.endpoint_id),
                "pid": os.getpid(),
                "engines": len(self._slots),
                "outstanding": sum(len(s.outstanding) for s in self._slots.values()),
                # what a real endpoint reports as its metadata (CloudSite compares Pythons)
                "python_version": platform.python_version(),
                "hostname": socket.gethostname(),
            }


def _serve_connection(ep: SiteEndpoint, conn: Connection) -> None:
    try:
        while True:
            try:
                msg = protocol.recv(conn)
            except (EOFError, OSError):
                return
            req = msg.get("req")
            op = msg["op"]
            reply: protocol.Message = {"op": "reply", "req": req}
            try:
                if op == "ping":
                    reply.update(ep.info())
                elif op == "subscribe":
                    ep.subscribe(conn)
                elif op == "submit" and ep.receive(msg["task_id"]):
                    threading.Thread(
                        target=ep.run,
                        args=(
                            msg["task_id"],
                            protocol.unb64(msg["packed_task"]),
                            msg.get("user_endpoint_config") or {},
                            msg.get("user_runtime"),
                        ),
                        daemon=True,
                        name=f"submit-{msg['task_id'][:8]}",
                    ).start()
                elif op == "submit":  # a resend (the service missed our reply): its result
                    ep.resend_result(msg["task_id"])  # may have gone to nobody meanwhile
                elif op == "status":
                    reply["tasks"] = ep.status(list(msg["task_ids"]))
                elif op == "cancel":
                    reply["ok"], reply["reason"] = ep.cancel(msg["task_id"])
                else:
                    reply["error"] = f"unknown op {op!r}"
            except Exception as e:  # one bad request must not take the endpoint down
                logger.exception("request %s failed", op)
                reply["error"] = f"{type(e).__name__}: {e}"
            with ep._lock:
                protocol.send(conn, reply)
    finally:
        ep.unsubscribe(conn)
        conn.close()


def serve(site: SiteSpec, endpoint_id: uuid.UUID, run_dir: Path) -> None:
    """Listen on ``run_dir/endpoint.sock`` until SIGTERM."""
    sock = run_dir / "endpoint.sock"
    key = protocol.read_or_create_key(run_dir / "endpoint.key")
    if sock.exists():
        sock.unlink()
    ep = SiteEndpoint(site, endpoint_id, run_dir)
    listener = Listener(str(sock), family="AF_UNIX", authkey=key)

    def _stop(*_: object) -> None:
        ep.shutdown()
        listener.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    def _reaper() -> None:
        while not ep._stopping.wait(5):
            ep.reap_idle()

    threading.Thread(target=_reaper, daemon=True, name="reaper").start()

    def _heartbeats() -> None:
        while not ep._stopping.wait(ep.heartbeat_s):
            ep.heartbeat()

    threading.Thread(target=_heartbeats, daemon=True, name="heartbeat").start()
    (run_dir / "endpoint.ready").write_text(str(os.getpid()))
    logger.info("endpoint %s (%s) listening on %s", site.name, endpoint_id, sock)
    while True:
        try:
            conn = listener.accept()
        except OSError:
            if ep._stopping.is_set():
                return
            continue
        except Exception:  # failed authentication and the like
            logger.warning("rejected a connection", exc_info=True)
            continue
        threading.Thread(target=_serve_connection, args=(ep, conn), daemon=True).start()


cli = typer.Typer(
    help=(__doc__ or "").splitlines()[0],
    add_completion=False,
    pretty_exceptions_enable=False,
)


@cli.command()
def run(
    site: Annotated[str, typer.Option(help="the site's name (endpoint_configs/<site>/)")],
    run_dir: Annotated[
        Path, typer.Option(help="socket, key, SQLite results and endpoint.log go here")
    ],
    endpoint_id: Annotated[uuid.UUID, typer.Option(help="the endpoint id the service knows")],
) -> None:
    """Serve one site's endpoint on RUN_DIR/endpoint.sock until SIGTERM."""
    run_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=run_dir / "endpoint.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    serve(load_site(site), endpoint_id, run_dir)


def main(argv: list[str] | None = None) -> None:
    """``python -m federation.endpoint.daemon --site NAME --run-dir DIR --endpoint-id UUID``."""
    cli(args=argv, prog_name="python -m federation.endpoint.daemon")


if __name__ == "__main__":
    sys.argv[0] = sys.argv[0] or "/federation-endpoint"  # endpoint.cli import quirk
    main()
