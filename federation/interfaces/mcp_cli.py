"""``federation mcp``: the MCP server as a typer command (also the ``federation-mcp`` script).

Kept apart from :mod:`federation.interfaces.mcp_server` so that the CLI can list the command
without importing the MCP SDK; the server is imported when the command runs.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_HTTP_PORT = 8766


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


def mcp_command(
    transport: Annotated[
        Transport, typer.Option(help="stdio (for a local agent) or http (streamable HTTP)")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option(help="HTTP transport: bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP transport: port")] = DEFAULT_HTTP_PORT,
    home: Annotated[
        Path | None,
        typer.Option(help="federation home ($FEDERATION_HOME)", show_default=False),
    ] = None,
    site: Annotated[
        list[str] | None,
        typer.Option("--site", help="limit to these sites (repeatable)", show_default=False),
    ] = None,
    no_up: Annotated[bool, typer.Option("--no-up", help="do not bring the local sites up")] = False,
    tokens: Annotated[
        Path | None,
        typer.Option(
            help="HTTP transport: token database (default: <home>/service/tokens.db)",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            envvar="FEDERATION_CONFIG",
            help="federation.yaml: act on the sites it names ($FEDERATION_CONFIG; default: "
            "the embedded local federation)",
            show_default=False,
        ),
    ] = None,
    service: Annotated[
        str | None,
        typer.Option(help="use the HTTP service at this URL", show_default=False),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="FEDERATION_TOKEN",
            help="bearer token for --service ($FEDERATION_TOKEN)",
            show_default=False,
        ),
    ] = None,
    in_memory: Annotated[
        bool,
        typer.Option(
            "--in-memory",
            help="own coordinator: keep tasks, groups, transfers and events in memory only "
            "(default: durable in <home>/coordinator.db, re-attached and resumed on restart)",
        ),
    ] = False,
) -> None:
    """Serve the federation as MCP tools for agents (stdio by default, or streamable HTTP).

    Its own coordinator (without --service) is durable unless --in-memory: tasks and events
    are kept in <home>/coordinator.db, and a restarted server re-attaches to the tasks left
    in flight; agents' await_event cursors continue."""
    from federation.interfaces.mcp_run import run

    run(
        transport=transport.value,
        host=host,
        port=port,
        home=home,
        sites=site or None,
        bring_up=not no_up,
        service=service,
        token=token,
        tokens_db=tokens,
        config=config,
        in_memory=in_memory,
    )


def standalone(argv: list[str] | None = None) -> None:
    """Run :func:`mcp_command` as a program of its own (``federation-mcp``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)
    app.command(help="The federation as MCP tools (stdio or HTTP).")(mcp_command)
    app(args=argv, prog_name="federation-mcp")


def main() -> None:
    """The ``federation-mcp`` console script (``python -m federation.interfaces.mcp_cli``)."""
    standalone()


if __name__ == "__main__":
    main()
