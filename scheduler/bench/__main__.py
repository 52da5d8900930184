"""`python -m scheduler.bench ...` = `tessera bench ...` (for machines where only the source tree is at hand)."""

import typer

from scheduler.cli.bench import register

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """Tessera benchmarks."""


register(app)

if __name__ == "__main__":
    app()
