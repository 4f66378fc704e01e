"""Entry point of the `xlacache` console script (and of `python -m xlacache`).

Each command group lives in its own module and registers itself on `app`:
`commands` (inspect, stats, prune, verify, rm), `bundles` (export, import), `explain`
(explain, diff), `trust` (sign, keygen), `rewarm` and `serve`. A new command goes in a module of
its own with a `register(app)`, added here.
"""

from __future__ import annotations

import warnings
from typing import Annotated

import typer

from xlacache import variables
from xlacache._version import __version__
from xlacache.cli import bundles, commands, explain, rewarm, serve, trust
from xlacache.cli.common import OneLineGroup

app = typer.Typer(
    name="xlacache",
    help="Inspect, maintain and serve xlacache compilation caches.",
    cls=OneLineGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"xlacache {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Inspect, maintain and serve xlacache compilation caches."""
    variables.check_environment()  # a misspelled XLACACHE_* setting: one warning


commands.register(app)
bundles.register(app)
explain.register(app)
trust.register(app)
rewarm.register(app)
serve.register(app)


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr, as errors are ('xlacache: warning: ...')."""
    text = " ".join(str(message).split()).removeprefix("xlacache: ")
    typer.echo(f"xlacache: warning: {text}", err=True)


def main() -> None:
    warnings.showwarning = _warning_line
    app(prog_name="xlacache")


if __name__ == "__main__":
    main()
