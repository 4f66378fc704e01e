"""Entry point of the `xlacache` console script.

Each command group lives in its own module and registers itself on `app`:
`commands` (inspect, stats, prune, verify, rm, export, import), `explain` (explain,
diff), `trust` (sign, keygen) and `serve`.
"""

from __future__ import annotations

import typer

from xlacache.cli import commands, explain, serve, trust

app = typer.Typer(
    name="xlacache",
    help="Inspect, maintain and serve xlacache compilation caches.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
commands.register(app)
explain.register(app)
trust.register(app)
serve.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
