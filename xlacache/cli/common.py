"""What every `xlacache` command shares: one-line errors and exit codes, common
options, opening a store, and output (rich tables, JSON, progress on stderr).

Output: rich tables for people on stdout, or with --json one JSON document on stdout
for scripts. Progress goes to stderr only. Failures print one line on stderr,
``xlacache: error: ...``, and exit 2 for bad input (no cache there, bad size or
duration, unknown or malformed key, missing or foreign bundle, unknown command) or 1
for operational failures (corrupt entries found, I/O errors, an unreachable server).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from xlacache import config
from xlacache.errors import CacheError, NotACacheError
from xlacache.stores import EntryInfo, Store, is_remote_url, open_store, store_kind
from xlacache.units import format_size

MANY_ENTRIES = 500  # show progress even when stderr is not a terminal


# -- errors and exit codes -------------------------------------------------------------


class BadInput(ValueError):
    """Input the user should fix: exit status 2."""


class OperationFailed(Exception):
    """The command ran but something went wrong (corrupt entries): exit status 1."""


def error_line(message: str) -> None:
    one_line = " ".join(str(message).split())
    typer.echo(f"xlacache: error: {one_line}", err=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print the one-line error; return the Exit for the caller to raise."""
    error_line(message)
    return typer.Exit(code)


def describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    if isinstance(exc, NotImplementedError):
        return str(exc) or "not supported by this store"
    return str(exc) or type(exc).__name__


def exit_code(exc: BaseException) -> int:
    """2 for bad input (ConfigError is a ValueError too), 1 for everything else."""
    if isinstance(exc, (NotACacheError, ValueError, NotImplementedError)):
        return 2
    return 1


class OneLineGroup(TyperGroup):
    """The top-level app: an unknown command or option is one line too, not a box."""

    def get_params(self, ctx):  # type: ignore[override]
        return _plain_flags(super().get_params(ctx))

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        if not args:  # no arguments: the help, as no_args_is_help says
            return super().make_context(info_name, args, parent=parent, **extra)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as exc:  # an unknown option
            raise _usage_error(exc, "xlacache") from None

    def resolve_command(self, ctx, args):  # type: ignore[override]
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException as exc:  # an unknown command
            raise _usage_error(exc, "xlacache") from None


def _plain_flags(params: list) -> list:
    """Flags (--json, --help) shown without a `<bool>` type in --help."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _usage_error(exc: typer.TyperException, command: str) -> typer.Exit:
    """One line for a usage error ('no such option: --x (see 'xlacache stats --help')')."""
    text = (exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
    code = getattr(exc, "exit_code", 2)
    return fail(f"{text[:1].lower()}{text[1:]} (see '{command} --help')", code)


class StoreCommand(TyperCommand):
    """A command whose usage errors and store failures end as one line on stderr."""

    def get_params(self, ctx):  # type: ignore[override]
        return _plain_flags(super().get_params(ctx))

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as exc:  # usage errors: missing argument, bad --limit
            raise _usage_error(exc, f"xlacache {info_name}") from None

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise  # typer's main exits quietly on a closed pipe
        except OperationFailed as exc:
            raise fail(str(exc), 1) from None
        except (CacheError, OSError, ValueError, NotImplementedError) as exc:
            raise fail(describe(exc), exit_code(exc)) from None


TLS_OPTIONS = ("tls_ca", "tls_cert", "tls_key")  # settings (xlacache.config) as options
_tls_files: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tls", default=None)


def remote_command(fn: Callable) -> Callable:
    """`fn` (a store command) with the TLS options of grpcs:// stores, --tls-ca, --tls-cert
    and --tls-key, which `open_cache` passes on (defaults: their XLACACHE_TLS_* variables,
    read by the store)."""
    signature = inspect.signature(fn, eval_str=True)
    extra = []
    for name in TLS_OPTIONS:
        setting = config.BY_NAME[name]
        text = f"{setting.help[:1].upper()}{setting.help[1:]} (default ${setting.env[0]})."
        option = typer.Option(f"--{name.replace('_', '-')}", metavar="PEM", help=text)
        extra.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[str | None, option],
            )  # fmt: skip
        )

    @functools.wraps(fn)
    def command(*args, **kwargs):
        files = {name: kwargs.pop(name) for name in TLS_OPTIONS}
        reset = _tls_files.set({name: path for name, path in files.items() if path})
        try:
            return fn(*args, **kwargs)
        finally:
            _tls_files.reset(reset)

    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *extra]
    )
    command.__annotations__ = {
        p.name: p.annotation for p in command.__signature__.parameters.values()
    }
    return command


# -- shared options and helpers --------------------------------------------------------

PathArg = Annotated[
    str,
    typer.Argument(
        help="Cache directory, grpc://host:port of an xlacache server, or gs://bucket/prefix."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (see above).")]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="Bearer token for a grpc:// server (ignored for local paths); default: "
        "$XLACACHE_TOKEN or the file $XLACACHE_TOKEN_FILE names.",
    ),
]


def open_cache(url: str, *, readonly: bool, token: str | None, create: bool = False) -> Store:
    """The store `url` names; a server's with the command's token and TLS files."""
    options: dict[str, Any] = {}
    if is_remote_url(url):
        config.quiet_grpc_logging()
        token = token if token is not None else config.remote_token()
        if token is not None:
            options["token"] = token
        options.update(_tls_files.get() or {})
    return open_store(url, readonly=readonly, create=create, **options)


def local_path(url: str) -> Path | None:
    """The directory a local store URL names; None for remote URLs."""
    if store_kind(url) != "directory":
        return None
    parsed = urlparse(url)
    return Path(parsed.path) if parsed.scheme else Path(url).expanduser()


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


def stdout() -> Console:
    """A console for tables; wide when piped so rows stay whole and on one line for grep."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(200, console.width))
    return console


def when(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def plural(n: int, word: str) -> str:
    """'1 entry', '2 entries', '0 corrupt entries'."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


@contextlib.contextmanager
def progress(description: str, count: int, steps: bool = True) -> Iterator[Callable[[], None]]:
    """Yield advance(); a rich progress bar on stderr for a TTY or `count` >= MANY_ENTRIES.

    steps=False shows a pulsing bar for work that reports no steps (Store.verify).
    """
    console = Console(stderr=True)
    if not (console.is_terminal or count >= MANY_ENTRIES):
        yield lambda: None
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    if steps:
        columns.append(MofNCompleteColumn())
    progress = Progress(
        *columns, TimeElapsedColumn(), console=console, transient=console.is_terminal
    )
    with progress:
        task = progress.add_task(description, total=count if steps else None)
        yield lambda: progress.advance(task)


def entries_table(infos: Iterable[EntryInfo], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("key", no_wrap=True, min_width=12)
    table.add_column("label", overflow="fold", min_width=8, max_width=40)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("payload", justify="right", no_wrap=True)
    table.add_column("compile s", justify="right", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("last used", no_wrap=True)
    table.add_column("hits", justify="right", no_wrap=True)
    for info in infos:
        table.add_row(
            info.key[:12],
            info.label,
            format_size(info.size),
            format_size(info.payload_size),
            f"{info.compile_seconds:.2f}",
            when(info.created),
            when(info.last_used) if info.hits else "never",
            str(info.hits),
        )
    return table
