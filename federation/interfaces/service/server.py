"""Run the HTTP service: a coordinator over the local sites, served by uvicorn."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI

from federation.security.globus_callers import GlobusCallers
from federation.security.tokens import RedactTokens, TokenStore, default_token_db

if TYPE_CHECKING:
    from federation.deploy.connect import Connection

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging, with every handler filtered through :class:`RedactTokens`."""
    cfg: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": {"()": RedactTokens}},
        "formatters": {
            "default": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "default",
                "filters": ["redact"],
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "federation": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }
    return cfg


def service_connection(
    home: Path | None = None,
    sites: list[str] | None = None,
    *,
    bring_up: bool = True,
    config: Path | str | None = None,
    placement: str | None = None,
    in_memory: bool = False,
    store_path: Path | None = None,
    **coordinator_kwargs: Any,
) -> tuple[Connection, GlobusCallers | None]:
    """The coordinator ``serve`` serves, and the Globus callers of its config (if any).

    Durable unless ``in_memory``: tasks, groups, transfers and events are kept in
    ``home/coordinator.db`` (``store_path``: elsewhere, embedded only), the tasks an earlier
    service left in flight are re-attached, and callers' event cursors continue across
    restarts. The store is held for this service alone (:func:`hold_store`): a second
    service on it is refused with :class:`~federation.core.errors.StoreInUseError`.
    ``coordinator_kwargs`` go to the coordinator (``probe_timeout_s``, ...).
    """
    from federation.deploy.connect import STORE_HANDOVER_S, Connection, connect, hold_store
    from federation.deploy.local import federation_home
    from federation.security.policy import PolicyGate

    chosen: dict[str, Any] = {} if placement is None else {"policy": placement}
    chosen.update(coordinator_kwargs)
    durable = not in_memory
    if config is None:
        gate = PolicyGate.from_home(home or federation_home())
        conn = connect(
            None,
            home=home,
            sites=sites,
            bring_up=bring_up,
            durable=durable,
            exclusive=durable,
            store_path=store_path,
            gate=gate,
            **chosen,
        )
        return conn, None
    from federation.deploy.config import Deployment, load_config

    if store_path is not None:
        raise ValueError(f"with a config the store is the one in {config}'s home")
    cfg = load_config(config)
    deployment = Deployment(cfg, home=home)
    callers = GlobusCallers(cfg.service, deployment.home) if cfg.service.auth == "globus" else None
    release = hold_store(deployment.home / "coordinator.db", STORE_HANDOVER_S) if durable else None
    try:
        if bring_up:
            deployment.up()
        coord = deployment.connect(
            durable=durable,
            gate=PolicyGate.from_home(deployment.home),
            callers=callers,
            **chosen,
        )
    except BaseException:
        if release is not None:
            release()
        raise
    closers = [deployment.close] + ([release] if release is not None else [])
    return Connection(coord, deployment.home, Path(config), closers), callers


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    home: Path | None = None,
    sites: list[str] | None = None,
    *,
    bring_up: bool = True,
    log_level: str = "info",
    refresh_s: float = 15.0,
    config: Path | str | None = None,
    placement: str | None = None,
    in_memory: bool = False,
) -> None:
    """Connect a coordinator (:func:`service_connection`) and serve it until interrupted.

    Without ``config``: the local sites (the embedded federation). With ``config``: the
    sites of a ``federation.yaml`` (local and Globus Compute cloud sites); with its
    ``service.auth: globus``, callers log in with Globus tokens and each one's work goes out
    under their own identity (:mod:`federation.security.globus_callers`). Either way the
    coordinator is durable (``home/coordinator.db``: a restarted service re-attaches to the
    tasks in flight and callers' cursors continue) unless ``in_memory``; every submission
    passes the caller policy gate (``home/policy.yaml``, token policies) and is written to
    the audit log. ``placement`` names the placement policy (default: the config's
    ``placement``, else ``auto``).
    """
    from federation.interfaces.service.app import create_app

    conn, callers = service_connection(
        home,
        sites,
        bring_up=bring_up,
        config=config,
        placement=placement,
        in_memory=in_memory,
    )
    coord = conn.coord
    store = coord.store
    if store is not None:
        logger.info("tasks and events are kept in %s", store.path)
    else:
        logger.warning("--in-memory: tasks and events are lost when the service stops")
    tokens = TokenStore(default_token_db(conn.home))
    if callers is not None:
        logger.info("callers log in with Globus tokens for scope %s", callers.scope)
    elif not tokens.list_tokens():
        logger.warning("no tokens yet: issue one with `federation token issue NAME`")
    app = create_app(coord, callers or tokens, refresh_s=refresh_s)
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_config=log_config(log_level),
            timeout_graceful_shutdown=5,
        )
    finally:
        conn.close()


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def running(app: FastAPI | Any, host: str = DEFAULT_HOST, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields its base URL."""
    port = port or free_port(host)
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, lifespan="on", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
