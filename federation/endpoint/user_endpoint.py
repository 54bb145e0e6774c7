"""One user endpoint process (UEP): the engine of one rendered config, fed by its manager.

A real multi-user endpoint (Globus Compute 4.x) forks one user endpoint process per
distinct (identity, ``user_endpoint_config``); the site's endpoint daemon
(:mod:`federation.endpoint.daemon`, through :mod:`federation.endpoint.uep_pool`) starts one
of these per (identity, rendered config): ``python -m federation.endpoint.user_endpoint
--fd N --run-dir DIR --endpoint-id UUID`` (:func:`command`, which leaves out the
coordinator's imports), N being its end of a socket pair to the manager. Its engine runs
in ``DIR/uep-<pid>`` (its log: ``endpoint.log`` there). The first message is the rendered
config: it is loaded with the endpoint's own ``load_config_yaml`` and its engine started
(the engine's interchange is a further process). Messages
(:mod:`federation.endpoint.protocol` framing):

- manager -> UEP: ``submit`` (``task_id``, ``packed_task``), ``stop``;
- UEP -> manager: ``ready`` (the config's ``idle_heartbeats_soft``/``_hard``: the manager
  counts the idle heartbeats, as the UEP's own main loop does on a real endpoint),
  ``failed`` (``error``: the config did not load or the engine did not start),
  ``stopping`` (``reason``: the engine is in a bad state, so it ends on its own),
  ``task.started`` (``task_id``, ``job_id``, ``block_id``), ``task.result``.

The process shuts its engine down (which cancels its blocks) and exits on ``stop``, on
SIGTERM/SIGINT, and when the manager's end of the pair closes: a killed manager leaves no
UEP behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from federation.endpoint import protocol

logger = logging.getLogger(__name__)

Send = Callable[[protocol.Message], None]


@dataclass
class EngineSlot:
    """The started engine of this process, and the tasks it holds."""

    key: str
    engine: Any
    outstanding: set[str] = field(default_factory=set)
    submitting: threading.Lock = field(default_factory=threading.Lock)
    """One ``engine.submit`` at a time, as the real endpoint's one task-processing thread
    calls it: the engine's executor sends on a ZeroMQ socket, which is not thread-safe
    (tasks submitted at once as a new engine came up were lost: one never reached the
    interchange and stayed 'received' forever)."""


class UserEndpoint:
    """Hands tasks to the engine and reports their start and result through ``send``."""

    def __init__(self, slot: EngineSlot, send: Send) -> None:
        self.slot = slot
        self._send = send
        self._lock = threading.Lock()

    def submit(self, task_id: str, packed_task: bytes) -> None:
        from globus_compute_endpoint.engines.base import GCFuture

        fut = GCFuture(uuid.UUID(task_id))
        fut.bind("job_id", lambda f, job_id: self._started(task_id, job_id, f.block_id))
        with self._lock:
            self.slot.outstanding.add(task_id)
        fut.add_done_callback(lambda f: self._done(task_id, f))
        try:
            with self.slot.submitting:
                self.slot.engine.submit(fut, packed_task, resource_specification={})
        except Exception as e:
            logger.exception("engine refused task %s", task_id)
            if not fut.done():
                self._finish(task_id, protocol.error_result(task_id, "SUBMIT_FAILED", str(e)))

    def _started(self, task_id: str, job_id: Any, block_id: Any) -> None:
        self._send(
            {
                "op": "task.started",
                "task_id": task_id,
                "job_id": None if job_id is None else str(job_id),
                "block_id": None if block_id is None else str(block_id),
            }
        )

    def _done(self, task_id: str, fut: Any) -> None:
        try:
            packed: bytes = fut.result()
        except BaseException as e:  # the engine packs task errors; this is its own failure
            msg = f"the engine failed this task: {type(e).__name__}: {e}"
            packed = protocol.error_result(task_id, "ENGINE_ERROR", msg)
        self._finish(task_id, packed)

    def _finish(self, task_id: str, packed_result: bytes) -> None:
        with self._lock:
            if task_id not in self.slot.outstanding:
                return  # already reported (a submit error, then the future)
            self.slot.outstanding.discard(task_id)
        self._send({"op": "task.result", "task_id": task_id, "result": protocol.b64(packed_result)})


def _idle_limits(config: Any) -> tuple[int, int]:
    return int(getattr(config, "idle_heartbeats_soft", 0)), int(
        getattr(config, "idle_heartbeats_hard", 5760)
    )


def run(conn: Connection, run_dir: Path, endpoint_id: uuid.UUID) -> None:
    """Serve the manager on ``conn`` until told to stop or the manager is gone."""
    send_lock = threading.Lock()
    stop = threading.Event()
    inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()

    def send(msg: protocol.Message) -> None:
        try:
            with send_lock:
                protocol.send(conn, msg)
        except (OSError, ValueError):
            stop.set()  # the manager is gone

    def _stop(*_: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    first = protocol.recv(conn)
    key = str(first.get("key") or "uep")

    def reader() -> None:  # from the start to the end, so the manager's sends never wait
        while True:
            try:
                msg = protocol.recv(conn)
            except (EOFError, OSError, ValueError):
                if not stop.is_set():
                    logger.warning("the manager closed the pipe; shutting down")
                break
            if msg["op"] == "submit" and not stop.is_set():
                inbox.put((msg["task_id"], protocol.unb64(msg["packed_task"])))
            elif msg["op"] == "submit":  # the manager fails it when this process has ended
                logger.warning("task %s arrived while stopping; not run", msg["task_id"])
            elif msg["op"] == "stop":
                logger.info("told to stop (%s)", msg.get("reason"))
                stop.set()
        stop.set()

    threading.Thread(target=reader, daemon=True, name="manager-pipe").start()
    from globus_compute_endpoint.endpoint.config.utils import load_config_yaml

    engine: Any = None
    try:
        config = load_config_yaml(first["rendered"])
        engine = config.engine
        engine.start(endpoint_id=endpoint_id, run_dir=str(run_dir), monitored=True)
    except Exception as e:
        logger.exception("engine did not start")
        send({"op": "failed", "error": f"{type(e).__name__}: {e}"})
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:
                logger.exception("engine did not shut down cleanly")
        os._exit(1)
    soft, hard = _idle_limits(config)
    send({"op": "ready", "idle_heartbeats_soft": soft, "idle_heartbeats_hard": hard})
    logger.info("engine %s started (idle_heartbeats_soft=%d, _hard=%d)", key, soft, hard)
    uep = UserEndpoint(EngineSlot(key=key, engine=engine), send)

    def tasks() -> None:  # the one task-processing thread of a real endpoint
        while not stop.is_set():
            try:
                tid, packed = inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            uep.submit(tid, packed)

    threading.Thread(target=tasks, daemon=True, name="tasks").start()
    while not stop.wait(0.5):
        bad = getattr(engine, "executor_exception", None)
        if bad is not None:  # as the real UEP's BadStateWatcher: the engine cannot go on
            logger.error("engine in a bad state; stopping: %s", bad)
            send({"op": "stopping", "reason": f"its engine is in a bad state: {bad}"})
            stop.set()
    logger.info("shutting down engine %s (%d task(s) outstanding)", key, len(uep.slot.outstanding))
    try:
        engine.shutdown()
    except Exception:
        logger.exception("engine did not shut down cleanly")
    os._exit(0)


def command() -> list[str]:
    """The command that starts a UEP (arguments follow). It imports this module without the
    ``federation`` package's ``__init__`` (the coordinator: ~25 MB and ~0.5 s more per
    process), as a real UEP runs the endpoint's code only."""
    package = str(Path(__file__).resolve().parents[1])
    boot = (
        "import sys, types; pkg = types.ModuleType('federation'); "
        f"pkg.__path__ = [{package!r}]; sys.modules['federation'] = pkg; "
        "from federation.endpoint.user_endpoint import main; main(sys.argv[1:])"
    )
    return [sys.executable, "-c", boot]


def main(argv: list[str] | None = None) -> None:
    """``python -m federation.endpoint.user_endpoint --fd N --run-dir DIR --endpoint-id ID``."""
    parser = argparse.ArgumentParser(prog="python -m federation.endpoint.user_endpoint")
    parser.add_argument("--fd", type=int, required=True, help="this end of the manager pipe")
    parser.add_argument(
        "--run-dir", type=Path, required=True, help="the engine runs in RUN_DIR/uep-<pid>"
    )
    parser.add_argument("--endpoint-id", type=uuid.UUID, required=True)
    args = parser.parse_args(argv)
    run_dir = args.run_dir / f"uep-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=run_dir / "endpoint.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s",
    )
    os.set_inheritable(args.fd, False)  # the engine's own processes do not get it
    run(Connection(args.fd), run_dir, args.endpoint_id)


if __name__ == "__main__":
    sys.argv[0] = sys.argv[0] or "/federation-user-endpoint"  # endpoint.cli import quirk
    main()
