"""`xlacache serve`: run the cache server daemon."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xlacache.cli.common import StoreCommand
from xlacache.errors import CacheError


def serve_command(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Cache directory to serve, or gs://BUCKET/PREFIX (with --cache-dir): "
            "several replicas may serve one bucket.",
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="Local directory in front of a gs:// store (read-through, write-through; "
            "--max-size bounds it).",
        ),
    ] = None,
    listen: Annotated[
        str | None, typer.Option("--listen", help="HOST:PORT for gRPC (default 127.0.0.1:7070).")
    ] = None,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size", help="Evict least recently used entries beyond this (e.g. 50GB)."
        ),
    ] = None,
    max_entry_size: Annotated[
        str | None, typer.Option("--max-entry-size", help="Largest entry accepted (default 2GiB).")
    ] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option("--metrics-listen", help="HOST:PORT for /metrics and the status page."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="Server certificate (PEM).")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="Server private key (PEM).")
    ] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(
            "--tls-client-ca", help="Require client certificates signed by this CA (mTLS)."
        ),
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens", help="Token file: lines of 'ROLE TOKEN [NAME]' (read|write|admin)."
        ),
    ] = None,
    require_signed_by: Annotated[
        str | None,
        typer.Option(
            "--require-signed-by",
            help="Accept only uploads signed by one of these keys (comma-separated key texts "
            "or files, as XLACACHE_TRUSTED_KEYS); others get PERMISSION_DENIED.",
        ),
    ] = None,
    allow_open: Annotated[
        bool | None,
        typer.Option("--allow-open", help="Serve without tokens on a non-loopback address."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="Cache RPCs served at once, a thread each; more are refused at once "
            "with RESOURCE_EXHAUSTED (default 128). Health checks have threads of their own.",
        ),
    ] = None,
    max_streams: Annotated[
        int | None,
        typer.Option(
            "--max-streams",
            help="RPCs of any service in flight, queued included, before gRPC itself "
            "refuses them (default 256; more than --workers).",
        ),
    ] = None,
    upload_memory: Annotated[
        str | None,
        typer.Option(
            "--upload-memory",
            help="Bytes received by uploads in progress at once; more wait (default 4GiB).",
        ),
    ] = None,
    request_timeout: Annotated[
        str | None, typer.Option("--request-timeout", help="Longest one RPC may run (default 10m).")
    ] = None,
    idle_timeout: Annotated[
        str | None,
        typer.Option(
            "--idle-timeout",
            help="Cancel a Get or Put that moves no message for this long (default 20s; 0: never).",
        ),
    ] = None,
    shutdown_grace: Annotated[
        str | None,
        typer.Option("--shutdown-grace", help="Time in-flight RPCs get on SIGTERM (default 30s)."),
    ] = None,
    reconcile_interval: Annotated[
        str | None,
        typer.Option(
            "--reconcile-interval",
            help="How often to match the index to the entry files (default 10m; 0: never).",
        ),
    ] = None,
    fsync: Annotated[
        str | None,
        typer.Option(
            "--fsync",
            help="When stored entries reach the disk: 'always' (fsync before acknowledging), "
            "'background' (fsynced within a second) or 'off' (default: the kernel writes "
            "back within ~30 s; a graceful stop syncs). Reads verify every entry: a machine "
            "crash costs recent entries, never bad data.",
        ),
    ] = None,
    no_fsync: Annotated[
        bool | None, typer.Option("--no-fsync", hidden=True, help="Same as --fsync off.")
    ] = None,
    direct_io: Annotated[
        bool | None,
        typer.Option(
            "--direct-io/--no-direct-io",
            help="Write uploads with O_DIRECT, bypassing the page cache (default off): less "
            "CPU per stored byte, but an entry's first read comes from disk.",
        ),
    ] = None,
    sample_interval: Annotated[
        str | None,
        typer.Option(
            "--sample-interval", help="Status page history: one sample every (default 30s)."
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="DEBUG, INFO, WARNING.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Settings file (TOML, JSON or YAML); env XLACACHE_SERVE_CONFIG."
        ),
    ] = None,
) -> None:
    """Serve a cache directory, or a bucket, to remote workers over gRPC.

    Settings come from the command line, XLACACHE_SERVE_<NAME> environment variables
    and a config file, in that order of precedence.
    """
    given = dict(locals())
    from xlacache.server.config import load_config

    if given.pop("no_fsync"):
        given["fsync"] = "off"

    config_file = given.pop("config")
    try:
        settings = load_config(
            {k: (str(v) if isinstance(v, Path) else v) for k, v in given.items()},
            config_file=str(config_file) if config_file else None,
        )
        from xlacache.server.app import CacheServer, configure_logging

        configure_logging(settings.log_level)
        server = CacheServer(settings)
        server.serve_forever()
    except (CacheError, OSError, ValueError) as exc:
        typer.echo(f"xlacache serve: error: {exc}", err=True)
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add the serve command to the app."""
    app.command("serve", cls=StoreCommand)(serve_command)
