"""``federation config check``: validate ``federation.yaml`` and print its sites."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

config_app = typer.Typer(
    help="The deployment's federation.yaml (serve it with `federation serve --config`).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@config_app.command("check")
def check(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="federation.yaml (default: $FEDERATION_CONFIG, ./federation.yaml, "
            "$FEDERATION_HOME/federation.yaml)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Validate federation.yaml (naming the file and field of every problem) and print its
    sites, their backends, accounts and folders, and how Globus tokens are kept.

    Exit codes: 0 valid; 2 not found or invalid."""
    from federation.core.errors import ConfigError
    from federation.deploy.config import load_config

    try:
        cfg = load_config(config)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    for name, s in cfg.sites.items():
        eid = f" endpoint {s.endpoint_id}" if s.endpoint_id else ""
        typer.echo(
            f"{name}: {s.backend}{eid} account {s.account or '(site default)'} "
            f"(site folder {cfg.specs[name].config_dir})"
        )
    typer.echo(f"auth: {cfg.auth.mode}, tokens in {cfg.auth.storage_description}")
