"""Running the MCP server: the operations behind it (an embedded coordinator, or a running
service), built in the background so the MCP handshake answers at once, over stdio or
streamable HTTP. The tools themselves are :mod:`federation.interfaces.mcp_server`; the
command line is :mod:`federation.interfaces.mcp_cli`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from federation.interfaces.mcp_server import (
    DEFAULT_HTTP_PORT,
    READY_TIMEOUT_S,
    SNAPSHOT_MAX_AGE_S,
    build_server,
    ops_probe,
)
from federation.interfaces.service.ops import Operations
from federation.interfaces.snapshot_cache import SnapshotKeeper

if TYPE_CHECKING:
    from federation.security.globus_callers import GlobusCallers

logger = logging.getLogger(__name__)


class Backend:
    """Builds the operations in a background thread, so the MCP handshake answers at once.

    Tools wait for it (the first call after start may take the few seconds of connecting).
    """

    def __init__(self, factory: Callable[[], Operations]) -> None:
        self._factory = factory
        self._ops: Operations | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._build, name="federation-backend", daemon=True).start()

    def _build(self) -> None:
        try:
            self._ops = self._factory()
        except BaseException as e:
            logger.exception("could not connect to the federation")
            self._error = e
        finally:
            self._ready.set()

    async def get(self) -> Operations:
        if not self._ready.is_set():
            await anyio.to_thread.run_sync(self._ready.wait, READY_TIMEOUT_S)
        if self._ops is None:
            why = self._error or TimeoutError(f"not connected after {READY_TIMEOUT_S:.0f} s")
            raise ToolError(
                f"the federation is not available: {type(why).__name__}: {why}. "
                "Check `federation sites status` (or the --service URL and token)."
            )
        return self._ops

    def close(self) -> None:
        if self._ops is not None:
            self._ops.close()


def embedded_ops(
    home: Path | None = None,
    sites: list[str] | None = None,
    bring_up: bool = True,
    tokens_db: Path | None = None,
    config: Path | None = None,
    callers: GlobusCallers | None = None,
    *,
    in_memory: bool = False,
    store_path: Path | None = None,
) -> Operations:
    """A coordinator in this process, as :class:`LocalOps`: over the sites of ``config``
    (or ``$FEDERATION_CONFIG``), else the embedded local federation; callers' policies from
    ``tokens_db`` (default: the home's token database) and ``home/policy.yaml``;
    ``callers``: Globus callers, whose work goes out under their own identities.

    Durable unless ``in_memory``, as ``serve`` is: tasks, groups, transfers and events in
    ``coordinator.db`` of the home (``store_path``: elsewhere, embedded only), held for this
    server alone, the tasks left in flight re-attached on restart."""
    from federation.deploy.connect import connect
    from federation.deploy.local import federation_home
    from federation.interfaces.service.ops import LocalOps
    from federation.security.policy import PolicyGate

    gate = PolicyGate.from_home(home or federation_home(), tokens_db=tokens_db)
    more: dict[str, Any] = {} if callers is None else {"callers": callers}
    conn = connect(
        config,
        home=home,
        sites=sites,
        bring_up=bring_up,
        durable=not in_memory,
        exclusive=not in_memory,
        store_path=store_path,
        gate=gate,
        **more,
    )
    return LocalOps(conn.coord, on_close=conn.close)


def run(
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
    home: Path | None = None,
    sites: list[str] | None = None,
    bring_up: bool = True,
    service: str | None = None,
    token: str | None = None,
    tokens_db: Path | None = None,
    config: Path | None = None,
    in_memory: bool = False,
) -> None:
    """Serve the MCP tools until the client goes away (stdio) or interrupted (HTTP)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from federation.security.tokens import default_token_db, install_redaction

    install_redaction()
    callers: GlobusCallers | None = None
    if service:
        if not token:
            raise SystemExit("--service needs --token (or $FEDERATION_TOKEN)")
        from federation.interfaces.service.client import ServiceClient

        url, tok = service, token

        def factory() -> Operations:
            return ServiceClient(url, tok)
    else:
        callers = _globus_callers(config, home) if transport == "http" else None

        def factory() -> Operations:
            db = tokens_db if transport == "http" else None
            return embedded_ops(home, sites, bring_up, db, config, callers, in_memory=in_memory)

    backend = Backend(factory)
    keeper = SnapshotKeeper(ops_probe(backend.get), max_age_s=SNAPSHOT_MAX_AGE_S)
    server = build_server(backend.get, keeper=keeper)  # probing starts now, in the background
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            _serve_http(server, host, port, tokens_db or default_token_db(home), callers)
    finally:
        keeper.close()
        backend.close()


def _globus_callers(config: Path | None, home: Path | None) -> GlobusCallers | None:
    """The Globus callers of a config whose ``service.auth`` is ``globus`` (else None)."""
    from federation.deploy.config import load_config
    from federation.deploy.connect import configured
    from federation.deploy.local import federation_home
    from federation.security.globus_callers import GlobusCallers

    path = configured(config)
    if path is None:
        return None
    cfg = load_config(path)
    if cfg.service.auth != "globus":
        return None
    return GlobusCallers(cfg.service, home or cfg.home or federation_home())


def _serve_http(
    server: MCPServer, host: str, port: int, tokens_db: Path, callers: GlobusCallers | None
) -> None:
    import uvicorn

    from federation.interfaces.service.app import Guard
    from federation.interfaces.service.server import log_config
    from federation.security.tokens import TokenStore

    who = callers or TokenStore(tokens_db)
    app = Guard(server.streamable_http_app(host=host), who, max_body_bytes=1_000_000)
    uvicorn.run(app, host=host, port=port, log_config=log_config("warning"))
