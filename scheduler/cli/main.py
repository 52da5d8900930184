"""`tessera`: simulate, replay traces, benchmark, inspect GPUs."""

from __future__ import annotations

import logging
import os

import typer

from scheduler.cli import bench, nodes, replay, sandbox, simulate

app = typer.Typer(
    name="tessera",
    help="Tessera: a GPU-sharing batch scheduler for Kubernetes (fractional GPUs, gangs, fair-share queues).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True),
) -> None:
    """Tessera command line."""
    if version:
        from importlib.metadata import version as dist_version

        typer.echo(dist_version("tessera"))
        raise typer.Exit()


for module in (simulate, replay, bench, nodes, sandbox):
    module.register(app)


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("TESSERA_LOG_LEVEL", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
    )
    app()


if __name__ == "__main__":
    main()
