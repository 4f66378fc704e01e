"""`xlacache serve`: run the cache server daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from xlacache.errors import CacheError


def serve_command(
    store: Optional[Path] = typer.Option(None, "--store", help="Cache directory to serve."),
    listen: Optional[str] = typer.Option(
        None, "--listen", help="HOST:PORT for gRPC (default 127.0.0.1:7070)."
    ),
    max_size: Optional[str] = typer.Option(
        None, "--max-size", help="Evict least recently used entries beyond this (e.g. 50GB)."
    ),
    max_entry_size: Optional[str] = typer.Option(
        None, "--max-entry-size", help="Largest entry accepted (default 2GiB)."
    ),
    metrics_listen: Optional[str] = typer.Option(
        None, "--metrics-listen", help="HOST:PORT for /metrics and the status page."
    ),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="Server certificate (PEM)."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="Server private key (PEM)."),
    tls_client_ca: Optional[Path] = typer.Option(
        None, "--tls-client-ca", help="Require client certificates signed by this CA (mTLS)."
    ),
    tokens: Optional[Path] = typer.Option(
        None, "--tokens", help="Token file: lines of 'ROLE TOKEN [NAME]' (read|write|admin)."
    ),
    allow_open: Optional[bool] = typer.Option(
        None, "--allow-open", help="Serve without tokens on a non-loopback address."
    ),
    workers: Optional[int] = typer.Option(None, "--workers", help="RPC threads (default 48)."),
    max_streams: Optional[int] = typer.Option(
        None, "--max-streams", help="Concurrent RPCs before RESOURCE_EXHAUSTED (default 256)."
    ),
    upload_memory: Optional[str] = typer.Option(
        None, "--upload-memory", help="Bytes of uploads buffered at once (default 4GiB)."
    ),
    request_timeout: Optional[str] = typer.Option(
        None, "--request-timeout", help="Longest one RPC may run (default 10m)."
    ),
    shutdown_grace: Optional[str] = typer.Option(
        None, "--shutdown-grace", help="Time in-flight RPCs get on SIGTERM (default 30s)."
    ),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="DEBUG, INFO, WARNING."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Settings file (TOML, JSON or YAML); env XLACACHE_SERVE_CONFIG."
    ),
) -> None:
    """Serve a cache directory to remote workers over gRPC.

    Settings come from the command line, XLACACHE_SERVE_<NAME> environment variables
    and a config file, in that order of precedence.
    """
    given = dict(locals())
    from xlacache.server.config import load_config

    config_file = given.pop("config")
    try:
        settings = load_config(
            {k: (str(v) if isinstance(v, Path) else v) for k, v in given.items()},
            config_file=str(config_file) if config_file else None,
        )
        from xlacache.server.app import CacheServer, configure_logging

        configure_logging(settings.log_level)
        server = CacheServer(settings)
    except (CacheError, OSError, ValueError) as exc:
        typer.echo(f"xlacache serve: error: {exc}", err=True)
        raise typer.Exit(2) from None
    server.serve_forever()


def register(app: typer.Typer) -> None:
    """Add the serve command to the app."""
    app.command("serve")(serve_command)
