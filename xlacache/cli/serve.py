"""`xlacache serve`: run the cache server daemon.

Its options are derived from `xlacache.server.config.SERVER_SETTINGS` (one per setting:
`--max-size` for `max_size`, with the row's help and default), plus `--config` and the
hidden `--no-fsync`.
"""

from __future__ import annotations

import inspect
from typing import Annotated

import typer

from xlacache.cli.common import StoreCommand
from xlacache.config import BOOL
from xlacache.errors import CacheError
from xlacache.server.config import SERVER_SETTINGS, show_default


def _options() -> list[inspect.Parameter]:
    params = []
    for setting in SERVER_SETTINGS:
        flag = setting.option or f"--{setting.name.replace('_', '-')}"
        default = show_default(setting)
        text = setting.help.rstrip(".") + (f" (default {default})." if default else ".")
        if setting.kind is BOOL:
            option = typer.Option(flag, help=text)
        else:
            metavar = "MODE" if "|" in setting.kind.name else setting.kind.name.upper()
            option = typer.Option(flag, help=text, metavar=metavar)
        kind = bool if setting.kind is BOOL else str
        params.append(
            inspect.Parameter(
                setting.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[kind | None, option],
            )  # fmt: skip
        )
    extra = {
        "no_fsync": Annotated[
            bool | None, typer.Option("--no-fsync", hidden=True, help="Same as --fsync off.")
        ],
        "config": Annotated[
            str | None,
            typer.Option(
                "--config",
                metavar="FILE",
                help="Settings file (TOML, JSON or YAML); env XLACACHE_SERVE_CONFIG.",
            ),
        ],
    }
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in extra.items()
    ]
    return params


def serve_command(**given) -> None:
    """Serve a cache directory, or a bucket, to remote workers over gRPC.

    Settings come from the command line, XLACACHE_SERVE_<NAME> environment variables
    and a config file, in that order of precedence. A SIZE or DURATION needs its unit,
    there too: 50GB, 512MiB, 4096B; 30s, 10m, 12h, 7d (0 alone is allowed). SIGHUP
    reloads the token file (which is also reloaded when it changes).
    """
    from xlacache.server.config import load_config

    if given.pop("no_fsync"):
        given["fsync"] = "off"
    config_file = given.pop("config")
    try:
        settings = load_config(given, config_file=config_file)
        from xlacache.server.app import CacheServer, configure_logging

        configure_logging(settings.log_level)
        server = CacheServer(settings)
        server.serve_forever()
    except (CacheError, OSError, ValueError) as exc:
        typer.echo(f"xlacache serve: error: {exc}", err=True)
        raise typer.Exit(2) from None


serve_command.__signature__ = inspect.Signature(_options())  # type: ignore[attr-defined]
serve_command.__annotations__ = {
    p.name: p.annotation for p in serve_command.__signature__.parameters.values()
}


def register(app: typer.Typer) -> None:
    """Add the serve command to the app."""
    app.command("serve", cls=StoreCommand)(serve_command)
