"""Entry point of the `xlacache` console script (and of `python -m xlacache`).

Each command group lives in its own module and registers itself on `app`:
`commands` (inspect, stats, prune, verify, rm), `bundles` (export, import), `explain`
(explain, diff), `trust` (sign, keygen) and `serve`. A new command goes in a module of
its own with a `register(app)`, added here.
"""

from __future__ import annotations

import typer

from xlacache.cli import bundles, commands, explain, serve, trust
from xlacache.cli.common import OneLineGroup

app = typer.Typer(
    name="xlacache",
    help="Inspect, maintain and serve xlacache compilation caches.",
    cls=OneLineGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
commands.register(app)
bundles.register(app)
explain.register(app)
trust.register(app)
serve.register(app)


def main() -> None:
    app(prog_name="xlacache")


if __name__ == "__main__":
    main()
