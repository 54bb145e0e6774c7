"""One site's endpoint process: a multi-user endpoint manager behind a unix socket.

Run as ``python -m federation.endpoint.daemon --site NAME --run-dir DIR --endpoint-id UUID``
with the site's Slurm environment (``SLURM_CONF``) in its environment, as a real endpoint
runs on the site's login node. As a real multi-user endpoint (Globus Compute 4.x) forks
one user endpoint process per (identity, ``user_endpoint_config``), it renders the site's
``user_config_template.yaml.j2`` through the endpoint's own loader and hands each task to
the user endpoint process (UEP) of its (identity, rendered config), starting one if there
is none (:mod:`federation.endpoint.uep_pool`, :mod:`federation.endpoint.user_endpoint`):
the UEP builds the engine with ``load_config_yaml``, so shaped tasks reach Slurm through
the engine's own SlurmProvider and ``sbatch``, and ends ``idle_heartbeats_soft``
heartbeats after its last task. Results are kept in SQLite until the service has them, so
a coordinator restart loses nothing. Subscribers get a ``heartbeat`` on subscribing and
every ``FEDERATION_EP_HEARTBEAT_S`` seconds (default 30, the real endpoint's
``heartbeat_period``); the service shows the endpoint offline when they stop.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import signal
import socket
import sqlite3
import sys
import threading
import time
import uuid
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from federation.core.errors import FederationError
from federation.core.spec import SiteSpec, load_site, load_site_folder
from federation.endpoint import protocol
from federation.endpoint.proc_stats import rss_kb
from federation.endpoint.uep_pool import UserEndpointPool

logger = logging.getLogger(__name__)

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


class Task(NamedTuple):
    """A received task waiting for its user endpoint process."""

    task_id: str
    packed_task: bytes
    user_opts: dict[str, Any]
    user_runtime: dict[str, Any] | None
    identity: str | None
    """Who submitted it (the service's optional ``identity``; None: anonymous)."""


class SiteEndpoint:
    """One site's user endpoint processes, the task table and the subscribers to its events."""

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
        self._subscribers: list[Connection] = []
        self._stopping = threading.Event()
        self.heartbeat_s = protocol.heartbeat_period_s()
        self.pool = UserEndpointPool(
            site,
            endpoint_id,
            run_dir,
            self._lock,
            on_started=self._started,
            on_result=self._finish,
            on_lost=lambda tid, code, msg: self._finish(tid, protocol.error_result(tid, code, msg)),
        )
        self._inbox: queue.Queue[Task] = queue.Queue()
        """Received tasks in order, for the one dispatching thread (the real endpoint's
        task-processing thread): a task is rendered and handed to its UEP there."""
        threading.Thread(target=self._dispatch, daemon=True, name="dispatch").start()

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
                (protocol.b64(protocol.error_result(tid, "ENDPOINT_LOST", msg)), now, tid),
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
        """One endpoint heartbeat: the UEPs' idle clocks advance, then the report goes out."""
        self.pool.tick()
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

    def shutdown(self) -> None:
        """Stop every user endpoint process (their engines shut down, blocks cancelled)."""
        self._stopping.set()
        self.pool.shutdown()

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
        identity: str | None = None,
    ) -> None:
        """Record a task and queue it for its user endpoint process (a resend is ignored)."""
        if self.receive(task_id):
            self.enqueue(Task(task_id, packed_task, user_opts, user_runtime, identity))

    def enqueue(self, task: Task) -> None:
        """Queue a received task for dispatching (in the order received)."""
        self._inbox.put(task)

    def _dispatch(self) -> None:
        while True:
            task = self._inbox.get()
            try:
                self.run(task)
            except Exception:  # one task must not stop the dispatching
                logger.exception("task %s was not dispatched", task.task_id)

    def run(self, task: Task) -> None:
        """Hand a received task to the UEP of its (identity, config), starting one if needed."""
        tid = task.task_id
        try:
            spec = self.pool.spec_for(task.user_opts, task.user_runtime, task.identity)
        except FederationError as e:
            self._finish(tid, protocol.error_result(tid, "INVALID_CONFIG", str(e)))
            return
        except Exception as e:
            msg = f"endpoint {self.site.name} could not render a config for {task.user_opts}: {e}"
            logger.exception(msg)
            self._finish(tid, protocol.error_result(tid, "ENGINE_START_FAILED", msg))
            return
        with self._lock:
            assigned = self._db.execute(
                "UPDATE tasks SET config_key=? WHERE task_id=? AND status='received'",
                (spec.key, tid),
            ).rowcount
            self._db.commit()
            if not assigned:
                return  # cancelled while it waited
            try:
                uep = self.pool.take(spec, tid)
            except Exception as e:
                msg = f"endpoint {self.site.name} could not start a user endpoint process: {e}"
                logger.exception(msg)
                self._finish(tid, protocol.error_result(tid, "ENGINE_START_FAILED", msg))
                return
        self.pool.send(uep, tid, task.packed_task)

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

    def _finish(self, task_id: str, packed_result: bytes) -> None:
        """Keep ``task_id``'s result and push it (the first result of a task stands)."""
        now = time.time()
        with self._lock:
            done = self._db.execute(
                "UPDATE tasks SET status='done', result_b64=?, completed_at=? "
                "WHERE task_id=? AND status!='done'",
                (protocol.b64(packed_result), now, task_id),
            ).rowcount
            self._db.commit()
        if not done:
            logger.info("task %s already finished; a later result is dropped", task_id)
            return
        self._broadcast(
            {
                "op": "task.result",
                "task_id": task_id,
                "result": protocol.b64(packed_result),
                "at": now,
            }
        )

    def cancel(self, task_id: str, wait_s: float = 30.0) -> tuple[bool, str]:
        """Cancel a task that has not started: ends its user endpoint process (whose engine
        shutdown cancels the queued batch job) if that holds nothing else."""
        with self._lock:
            row = self._db.execute(
                "SELECT status, config_key FROM tasks WHERE task_id=?", (task_id,)
            ).fetchone()
            if row is None:
                return False, "unknown task"
            status, key = row
            if status != "received":
                return False, f"task is {status}; only queued tasks can be cancelled"
            uep, why = self.pool.withdraw(key, task_id) if key else (None, "")
            if why:
                return False, why
        if uep is not None:
            self.pool.stop(uep, "cancel")
            if not self.pool.wait(uep, wait_s):  # its engine cancels the job (scancel)
                logger.warning("UEP %s still shutting down after a cancel", uep.pid)
        self._finish(task_id, protocol.error_result(task_id, "CANCELLED", "task cancelled"))
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
        """The status report (``ping`` reply, heartbeat): the manager and each UEP."""
        ueps = self.pool.report()
        return {
            "site": self.site.name,
            "endpoint_id": str(self.endpoint_id),
            "pid": os.getpid(),
            "rss_mb": round(rss_kb(os.getpid()) / 1024, 1),
            "engines": len(ueps),
            "outstanding": sum(u["outstanding"] for u in ueps),
            "user_endpoints": ueps,
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
                    ep.enqueue(
                        Task(
                            msg["task_id"],
                            protocol.unb64(msg["packed_task"]),
                            msg.get("user_endpoint_config") or {},
                            msg.get("user_runtime"),
                            msg.get("identity"),
                        )
                    )
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
    site: Annotated[str, typer.Option(help="the site's name")],
    run_dir: Annotated[
        Path, typer.Option(help="socket, key, SQLite results and endpoint.log go here")
    ],
    endpoint_id: Annotated[uuid.UUID, typer.Option(help="the endpoint id the service knows")],
    site_dir: Annotated[
        Path | None,
        typer.Option(help="the site's folder (default: the package's example of that name)"),
    ] = None,
) -> None:
    """Serve one site's endpoint on RUN_DIR/endpoint.sock until SIGTERM."""
    run_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=run_dir / "endpoint.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    spec = load_site(site) if site_dir is None else load_site_folder(site_dir, site)
    serve(spec, endpoint_id, run_dir)


def main(argv: list[str] | None = None) -> None:
    """``python -m federation.endpoint.daemon --site NAME --run-dir DIR --endpoint-id UUID``."""
    cli(args=argv, prog_name="python -m federation.endpoint.daemon")


if __name__ == "__main__":
    sys.argv[0] = sys.argv[0] or "/federation-endpoint"  # endpoint.cli import quirk
    main()
