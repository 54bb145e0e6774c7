"""Command line for humans: ``federation demo``, ``sites ...``, ``inspect``."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from federation.cli_sites import sites_app

app = typer.Typer(
    help="Agentic control of federated HPC resources (Globus Compute + Slurm).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(sites_app, name="sites")


@app.command()
def demo(
    site: Annotated[
        list[str] | None, typer.Option(help="limit to these sites (repeatable)")
    ] = None,
    no_load: Annotated[bool, typer.Option(help="do not add background queue load")] = False,
) -> None:
    """Run the main job: bring the local federation up and run a round of tasks."""
    from federation.demo import run_demo

    raise typer.Exit(run_demo(sites=site or None, load=not no_load))


@app.command()
def inspect(
    site: Annotated[
        list[str] | None, typer.Option(help="limit to these sites (repeatable)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the snapshot as JSON")] = False,
) -> None:
    """Probe every local site through its endpoint and print the snapshot."""
    from federation.demo import snapshot_table
    from federation.local import LocalSites

    local = LocalSites(sites=site or None)
    local.up()
    coord = local.connect()
    try:
        snap = coord.inspect_federation()
    finally:
        coord.close()
        if local.service:
            local.service.close()
    if as_json:
        sys.stdout.write(json.dumps(snap.model_dump(mode="json"), indent=2) + "\n")
    else:
        Console().print(snapshot_table(snap))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
