"""Run the HTTP service: a coordinator over the local sites, served by uvicorn."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from federation.security.globus_callers import GlobusCallers
from federation.security.tokens import RedactTokens, TokenStore, default_token_db

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
) -> None:
    """Connect a coordinator and serve it until interrupted.

    Without ``config``: the local sites (the embedded federation). With ``config``: the
    sites of a ``federation.yaml`` (local and Globus Compute cloud sites), durable; with its
    ``service.auth: globus``, callers log in with Globus tokens and each one's work goes out
    under their own identity (:mod:`federation.security.globus_callers`). Either way every
    submission passes the caller policy gate (``home/policy.yaml``, token policies) and is
    written to the audit log. ``placement`` names the placement policy (default: the
    config's ``placement``, else ``auto``).
    """
    from federation.interfaces.service.app import create_app
    from federation.security.policy import PolicyGate

    closers: list[Any] = []
    chosen: dict[str, Any] = {} if placement is None else {"policy": placement}
    callers: GlobusCallers | None = None
    if config is not None:
        from federation.deploy.config import Deployment, load_config

        cfg = load_config(config)
        deployment = Deployment(cfg)
        if cfg.service.auth == "globus":
            callers = GlobusCallers(cfg.service, deployment.home)
        if bring_up:
            deployment.up()
        home = deployment.home
        coord = deployment.connect(
            durable=True, gate=PolicyGate.from_home(home), callers=callers, **chosen
        )
        closers.append(deployment.close)
    else:
        from federation.deploy.local import LocalSites

        local = LocalSites(home=home, sites=sites)
        if bring_up:
            local.up()
        home = local.home
        coord = local.connect(gate=PolicyGate.from_home(home), **chosen)
        if local.service is not None:
            closers.append(local.service.close)
    tokens = TokenStore(default_token_db(home))
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
        coord.close()
        for close in closers:
            close()


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
