"""Store commands: inspect, stats, prune, verify, rm, export, import.

Output: rich tables for people on stdout, or with --json one JSON document on stdout
for scripts. Progress goes to stderr only. Failures print one line on stderr,
``xlacache: error: ...``, and exit 2 for bad input (no cache there, bad size or
duration, unknown or malformed key, missing or foreign bundle) or 1 for operational
failures (corrupt entries found, I/O errors, an unreachable server).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
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
from typer.core import TyperCommand

from xlacache import entry, signing
from xlacache._version import __version__
from xlacache.errors import CacheError, CorruptEntryError, NotACacheError
from xlacache.key import is_valid_key
from xlacache.stores import EntryInfo, PrunePolicy, Store, is_remote_url, open_store
from xlacache.units import format_size, parse_duration, parse_size

BUNDLE_FORMAT = "xlacache-bundle"
BUNDLE_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 256 << 20
MANY_ENTRIES = 500  # show progress even when stderr is not a terminal
MIN_KEY_PREFIX = 8
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")


# -- errors and exit codes -------------------------------------------------------------


class BadInput(ValueError):
    """Input the user should fix: exit status 2."""


class OperationFailed(Exception):
    """The command ran but something went wrong (corrupt entries): exit status 1."""


def _error_line(message: str) -> None:
    one_line = " ".join(str(message).split())
    typer.echo(f"xlacache: error: {one_line}", err=True)


def _fail(message: str, code: int) -> typer.Exit:
    """Print the one-line error; return the Exit for the caller to raise."""
    _error_line(message)
    return typer.Exit(code)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    if isinstance(exc, NotImplementedError):
        return str(exc) or "not supported by this store"
    return str(exc) or type(exc).__name__


def _exit_code(exc: BaseException) -> int:
    """2 for bad input (ConfigError is a ValueError too), 1 for everything else."""
    if isinstance(exc, (NotACacheError, ValueError, NotImplementedError)):
        return 2
    return 1


class StoreCommand(TyperCommand):
    """A command whose usage errors and store failures end as one line on stderr."""

    def make_context(self, info_name, args, parent=None, **extra):  # type: ignore[override]
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except typer.TyperException as exc:  # usage errors: missing argument, bad --limit
            code = getattr(exc, "exit_code", 2)
            hint = f"(see 'xlacache {info_name} --help')"
            raise _fail(f"{exc.format_message()} {hint}", code) from None

    def invoke(self, ctx):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise  # typer's main exits quietly on a closed pipe
        except OperationFailed as exc:
            raise _fail(str(exc), 1) from None
        except (CacheError, OSError, ValueError, NotImplementedError) as exc:
            raise _fail(_describe(exc), _exit_code(exc)) from None


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
        envvar="XLACACHE_TOKEN",
        show_envvar=True,
        help="Bearer token for a grpc:// server (ignored for local paths).",
    ),
]


def _open(url: str, *, readonly: bool, token: str | None, create: bool = False) -> Store:
    options: dict[str, Any] = {}
    if is_remote_url(url) and token is not None:
        options["token"] = token
    return open_store(url, readonly=readonly, create=create, **options)


def _local_path(url: str) -> Path | None:
    """The directory a local store URL names; None for remote URLs."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return Path(url).expanduser() if parsed.scheme == "" else None


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


def _stdout() -> Console:
    """A console for tables; wide when piped so rows stay whole and on one line for grep."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(200, console.width))
    return console


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def _plural(n: int, word: str) -> str:
    """'1 entry', '2 entries', '0 corrupt entries'."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


@contextlib.contextmanager
def _progress(description: str, count: int, steps: bool = True) -> Iterator[Callable[[], None]]:
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


def _entries_table(infos: Iterable[EntryInfo], title: str | None = None) -> Table:
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
            _when(info.created),
            _when(info.last_used) if info.hits else "never",
            str(info.hits),
        )
    return table


# -- inspect and stats -----------------------------------------------------------------


def inspect_(
    path: PathArg,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Show at most N entries.")
    ] = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """List the entries of a cache, newest first.

    --json prints one object; --limit shortens "entries" but not "total":
      {"store": URL, "total": int, "entries": [ENTRY, ...]}
    ENTRY: {"key": 64 hex digits, "label": str, "size": bytes,
      "payload_size": bytes, "compile_seconds": float, "created": unix time,
      "last_used": unix time, "hits": int}
    """
    with _open(path, readonly=True, token=token) as store:
        infos = sorted(store.list(), key=lambda i: (i.created, i.key), reverse=True)
        url = store.url
    shown = infos[:limit] if limit is not None else infos
    if as_json:
        _print_json({"store": url, "total": len(infos), "entries": [i.to_dict() for i in shown]})
        return
    title = f"{url}: {_plural(len(infos), 'entry')}"
    if len(shown) < len(infos):
        title += f", newest {len(shown)} shown"
    _stdout().print(_entries_table(shown, title=title))


def stats(path: PathArg, as_json: JsonOpt = False, token: TokenOpt = None) -> None:
    """Summarize a cache: entries, sizes, compile time represented, hits.

    --json prints one object ("compile_seconds": total compile time of the entries):
      {"store": URL, "entries": int, "bytes": int, "payload_bytes": int,
      "compile_seconds": float, "hits": int}
    """
    with _open(path, readonly=True, token=token) as store:
        summary = store.summary()
        url = store.url
    if as_json:
        _print_json({"store": url, **summary.to_dict()})
        return
    table = Table(title=url, title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_row("entries", str(summary.entries))
    table.add_row("total size", format_size(summary.bytes))
    table.add_row("payload size", format_size(summary.payload_bytes))
    table.add_row("compile seconds", f"{summary.compile_seconds:.1f}")
    table.add_row("hits", str(summary.hits))
    _stdout().print(table)


# -- prune, verify, rm -----------------------------------------------------------------


def _prune_policy(
    max_size: str | None, older_than: str | None, unused_for: str | None
) -> PrunePolicy:
    if max_size is None and older_than is None and unused_for is None:
        raise BadInput("nothing to prune by: give --max-size, --older-than or --unused-for")
    return PrunePolicy(
        max_size=None if max_size is None else parse_size(max_size),
        older_than=None if older_than is None else parse_duration(older_than),
        unused_for=None if unused_for is None else parse_duration(unused_for),
    )


def prune(
    path: PathArg,
    max_size: Annotated[
        str | None,
        typer.Option("--max-size", help="Evict least recently used entries down to this size."),
    ] = None,
    older_than: Annotated[
        str | None, typer.Option("--older-than", help="Remove entries created longer ago (7d).")
    ] = None,
    unused_for: Annotated[
        str | None, typer.Option("--unused-for", help="Remove entries not used for this long.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Remove entries by total size (LRU), age, or time since last use.

    Sizes: 10GB, 512MiB, 4096. Durations: 7d, 12h, 30m, 90s. With --dry-run the
    cache is opened read-only and nothing is removed.

    --json prints one object (ENTRY as in inspect --json):
      {"store": URL, "dry_run": bool, "count": int, "bytes": int,
      "removed": [ENTRY, ...]}
    """
    policy = _prune_policy(max_size, older_than, unused_for)
    with _open(path, readonly=dry_run, token=token) as store:
        removed = store.prune(policy, dry_run=dry_run)
        url = store.url
    total = sum(i.size for i in removed)
    if as_json:
        _print_json(
            {
                "store": url,
                "dry_run": dry_run,
                "count": len(removed),
                "bytes": total,
                "removed": [i.to_dict() for i in removed],
            }
        )
        return
    verb = "would remove" if dry_run else "removed"
    console = _stdout()
    if removed:
        console.print(_entries_table(removed))
    console.print(f"{verb} {_plural(len(removed), 'entry')} ({format_size(total)}) from {url}")


def verify(
    path: PathArg,
    repair: Annotated[
        bool, typer.Option("--repair", help="Remove corrupt entries and stale temp files.")
    ] = False,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
    trusted_keys: Annotated[
        str | None,
        typer.Option(
            "--trusted-keys",
            help="Also check signatures: report entries not signed by one of these keys "
            "(comma-separated key texts or files; see docs/trust.md). Exit 1 if any.",
        ),
    ] = None,
) -> None:
    """Check every entry's checksums; exit 1 on corrupt entries unless --repair.

    Without --repair the cache is opened read-only.

    --json prints one object ("trust" only with --trusted-keys):
      {"store": URL, "checked": int, "corrupt": [KEY, ...], "repaired": bool,
      "stale_temp_files": int, "trust": {"checked": int, "trusted": int,
      "unsigned": [KEY, ...], "foreign": [KEY, ...], "bad_signature": [KEY, ...],
      "unreadable": [KEY, ...]}}
    """
    trusted = None if trusted_keys is None else signing.load_trusted_keys(trusted_keys)
    with _open(path, readonly=not repair, token=token) as store:
        expected = store.summary().entries
        with _progress(f"verifying {_plural(expected, 'entry')}", expected, steps=False):
            report = store.verify(repair=repair)
        audit = None if trusted is None else signing.audit(store, trusted)
        url = store.url
    if as_json:
        trust = {} if audit is None else {"trust": asdict(audit)}
        _print_json({"store": url, **report.to_dict(), **trust})
    else:
        _print_verify(url, report.checked, report.corrupt, report.repaired)
        if audit is not None:
            _print_audit(audit)
    if audit is not None and audit.untrusted:
        raise OperationFailed(
            f"{_plural(audit.untrusted, 'entry')} in {url} not signed by a trusted key"
        )
    if report.corrupt and not repair:
        raise OperationFailed(
            f"{_plural(len(report.corrupt), 'corrupt entry')} in {url} "
            f"(run 'xlacache verify --repair {path}' to remove them)"
        )


def _print_verify(url: str, checked: int, corrupt: list[str], repaired: bool) -> None:
    console = _stdout()
    for key in corrupt:
        console.print(f"corrupt: {key}" + (" (removed)" if repaired else ""))
    state = "removed" if repaired and corrupt else "found"
    console.print(f"checked {_plural(checked, 'entry')} in {url}: {len(corrupt)} corrupt {state}")


def _print_audit(audit: signing.TrustAudit) -> None:
    console = _stdout()
    for status in ("unsigned", "foreign", "bad_signature"):
        for key in getattr(audit, status):
            console.print(f"{status.replace('_', ' ')}: {key}")
    console.print(
        f"signatures: {audit.trusted} trusted, {len(audit.unsigned)} unsigned, "
        f"{len(audit.foreign)} signed by other keys, {len(audit.bad_signature)} bad"
    )


def _normalize_key(text: str) -> str:
    key = text.strip().lower()
    if is_valid_key(key):
        return key
    if _HEX_RE.match(key) and MIN_KEY_PREFIX <= len(key) < 64:
        return key  # a prefix, resolved against the store's keys
    raise BadInput(
        f"malformed key {text!r} (expected 64 hex digits or a prefix of at least {MIN_KEY_PREFIX})"
    )


def _resolve_keys(store: Store, wanted: list[str]) -> tuple[list[str], list[str]]:
    """Full keys for `wanted` (full keys or unique prefixes), and those not found."""
    prefixes = [k for k in wanted if not is_valid_key(k)]
    known = sorted(i.key for i in store.list()) if prefixes else []
    found: list[str] = []
    missing: list[str] = []
    for key in wanted:
        if is_valid_key(key):
            found.append(key)
            continue
        matches = [k for k in known if k.startswith(key)]
        if len(matches) > 1:
            raise BadInput(f"key prefix {key!r} is ambiguous ({len(matches)} entries match)")
        (found if matches else missing).append(matches[0] if matches else key)
    return found, missing


def rm(
    path: PathArg,
    keys: Annotated[
        list[str], typer.Argument(help="Full keys, or unique prefixes of 8+ hex digits.")
    ],
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Remove entries by key; exit 2 if a key is not in the cache.

    Keys found are removed even when others are missing; a malformed key stops the
    command before anything is removed.

    --json prints one object:
      {"store": URL, "removed": [KEY, ...], "missing": [KEY, ...]}
    """
    wanted = [_normalize_key(k) for k in keys]  # all checked before anything is removed
    with _open(path, readonly=False, token=token) as store:
        found, missing = _resolve_keys(store, wanted)
        removed = [k for k in dict.fromkeys(found) if store.delete(k)]
        missing += [k for k in dict.fromkeys(found) if k not in removed]
        url = store.url
    if as_json:
        _print_json({"store": url, "removed": removed, "missing": missing})
    else:
        _stdout().print(f"removed {_plural(len(removed), 'entry')} from {url}")
    if missing:
        raise BadInput(f"not in {url}: {', '.join(missing)}")


# -- export and import -----------------------------------------------------------------


def _member_name(key: str) -> str:
    return f"entries/{key[:2]}/{key}.xlac"


def _tar_info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    return info


@contextlib.contextmanager
def _bundle_writer(bundle: Path) -> Iterator[tarfile.TarFile]:
    """A tar opened next to `bundle`, renamed into place only when complete."""
    if bundle.is_dir():
        raise BadInput(f"{bundle} is a directory")
    if not bundle.parent.is_dir():
        raise BadInput(f"no such directory: {bundle.parent}")
    tmp = bundle.with_name(f".{bundle.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            yield tar
        os.replace(tmp, bundle)
    finally:
        tmp.unlink(missing_ok=True)


def export(
    path: PathArg,
    bundle: Annotated[Path, typer.Argument(help="Tar file to write (replaced if it exists).")],
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Write every entry of a cache into a tar bundle for `xlacache import`.

    The bundle holds entries/ab/KEY.xlac and a manifest.json with the format, the
    xlacache version and each entry's key, size and sha256. The cache is opened
    read-only. Corrupt entries are left out and make the exit status 1.

    --json prints one object:
      {"bundle": path, "store": URL, "exported": int, "bytes": int,
      "corrupt": [KEY, ...]}
    """
    with _open(path, readonly=True, token=token) as store:
        url = store.url
        infos = sorted(store.list(), key=lambda i: i.key)
        with _bundle_writer(bundle) as tar:
            listed, corrupt = _write_entries(store, infos, tar)
            manifest = {
                "format": BUNDLE_FORMAT,
                "format_version": BUNDLE_VERSION,
                "xlacache_version": __version__,
                "entry_format_version": entry.FORMAT_VERSION,
                "created": time.time(),
                "source": url,
                "entries": listed,
            }
            data = json.dumps(manifest, indent=1).encode()
            tar.addfile(_tar_info(MANIFEST_NAME, len(data), time.time()), io.BytesIO(data))
    total = sum(e["size"] for e in listed)
    if as_json:
        _print_json(
            {
                "bundle": str(bundle),
                "store": url,
                "exported": len(listed),
                "bytes": total,
                "corrupt": corrupt,
            }
        )
    else:
        _stdout().print(
            f"exported {_plural(len(listed), 'entry')} ({format_size(total)}) to {bundle}"
        )
    if corrupt:
        raise OperationFailed(f"left out {_plural(len(corrupt), 'corrupt entry')}")


def _write_entries(
    store: Store, infos: list[EntryInfo], tar: tarfile.TarFile
) -> tuple[list[dict], list[str]]:
    """Add each readable entry to the tar; returns manifest rows and corrupt keys."""
    listed: list[dict] = []
    corrupt: list[str] = []
    with _progress("exporting", len(infos)) as advance:
        for info in infos:
            try:
                blob = store.get(info.key)
            except CorruptEntryError:
                corrupt.append(info.key)
                blob = None
            if blob is not None:
                member = _tar_info(_member_name(info.key), len(blob), info.created)
                tar.addfile(member, io.BytesIO(blob))
                digest = hashlib.sha256(blob).hexdigest()
                listed.append({"key": info.key, "size": len(blob), "sha256": digest})
            advance()
    return listed, corrupt


def _members(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    """Members by name (the last of duplicates wins, as in tarfile.getmember)."""
    return {m.name: m for m in tar.getmembers()}


def _read_manifest(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], bundle: Path
) -> list[dict]:
    """The checked entry list of a bundle; BadInput when it is no xlacache bundle."""

    def bad(reason: str) -> BadInput:
        return BadInput(f"{bundle} is not an xlacache bundle: {reason}")

    member = members.get(MANIFEST_NAME)
    if member is None:
        raise bad(f"no {MANIFEST_NAME}")
    if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
        raise bad(f"unusable {MANIFEST_NAME}")
    try:
        manifest = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    except (ValueError, tarfile.TarError) as exc:
        raise bad(f"unreadable {MANIFEST_NAME} ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise bad(f"{MANIFEST_NAME} does not name format {BUNDLE_FORMAT!r}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= BUNDLE_VERSION:
        raise bad(f"bundle format version {version!r} is not supported by xlacache {__version__}")
    entries = manifest.get("entries")
    if not isinstance(entries, list) or not all(_valid_row(e) for e in entries):
        raise bad(f"malformed entry list in {MANIFEST_NAME}")
    return entries


def _valid_row(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and isinstance(row.get("key"), str)
        and is_valid_key(row["key"])
        and isinstance(row.get("size"), int)
        and row["size"] >= 0
        and isinstance(row.get("sha256"), str)
        and bool(_SHA256_RE.match(row["sha256"]))
    )


def _member_blob(tar: tarfile.TarFile, member: tarfile.TarInfo | None, row: dict) -> bytes | None:
    """The verified bytes of one manifest row's member, or None if missing or corrupt."""
    key = row["key"]
    if member is None or not member.isfile() or member.size != row["size"]:
        return None
    try:
        blob = tar.extractfile(member).read()  # type: ignore[union-attr]
    except tarfile.TarError:
        return None
    if len(blob) != row["size"] or hashlib.sha256(blob).hexdigest() != row["sha256"]:
        return None
    try:
        entry.verify(blob, key)
    except CorruptEntryError:
        return None
    return blob


def _open_import_target(url: str, token: str | None) -> Store:
    """Open a cache to import into, creating one only where nothing else lives."""
    try:
        return _open(url, readonly=False, token=token)
    except NotACacheError:
        local = _local_path(url)
        if local is None:
            raise
        if local.exists() and (not local.is_dir() or any(local.iterdir())):
            raise NotACacheError(
                f"{local} is not an xlacache cache directory (import creates one only "
                "in a new or empty directory)"
            ) from None
        return _open(url, readonly=False, token=token, create=True)


def import_(
    bundle: Annotated[Path, typer.Argument(help="Bundle written by `xlacache export`.")],
    path: PathArg,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Add the entries of an export bundle to a cache.

    A cache is created when PATH is a new or empty directory. Each entry is checked
    against the manifest and its own checksums before it is stored; entries already
    present are skipped; corrupt or missing members are counted and make the exit
    status 1.

    --json prints one object:
      {"bundle": path, "store": URL, "imported": int, "skipped": int,
      "corrupt": int, "corrupt_keys": [KEY, ...]}
    """
    if not bundle.is_file():
        raise BadInput(f"no such bundle: {bundle}")
    try:
        tar = tarfile.open(bundle, "r:*")  # noqa: SIM115 - closed by `with tar` below
    except tarfile.TarError:
        raise BadInput(f"{bundle} is not an xlacache bundle: not a tar file") from None
    with tar:
        members = _members(tar)
        rows = _read_manifest(tar, members, bundle)
        with _open_import_target(path, token) as store:
            url = store.url
            imported, skipped, corrupt = _import_rows(tar, members, rows, store)
    counts = {"imported": imported, "skipped": skipped, "corrupt": len(corrupt)}
    if as_json:
        _print_json({"bundle": str(bundle), "store": url, **counts, "corrupt_keys": corrupt})
    else:
        _stdout().print(
            f"imported {_plural(imported, 'entry')} into {url}; {skipped} already present, "
            f"{len(corrupt)} corrupt"
        )
    if corrupt:
        raise OperationFailed(f"skipped {_plural(len(corrupt), 'corrupt entry')} in {bundle}")


def _import_rows(
    tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], rows: list[dict], store: Store
) -> tuple[int, int, list[str]]:
    """Store each listed entry not yet present; returns imported, skipped, corrupt keys."""
    imported = skipped = 0
    corrupt: list[str] = []
    with _progress("importing", len(rows)) as advance:
        for row in rows:
            key = row["key"]
            if store.contains(key):
                skipped += 1
            elif (blob := _member_blob(tar, members.get(_member_name(key)), row)) is None:
                corrupt.append(key)
            else:
                store.put(key, blob)
                imported += 1
            advance()
    return imported, skipped, corrupt


def register(app: typer.Typer) -> None:
    """Add the store commands to the app."""
    for fn, name in (
        (inspect_, "inspect"),
        (stats, "stats"),
        (prune, "prune"),
        (verify, "verify"),
        (rm, "rm"),
        (export, "export"),
        (import_, "import"),
    ):
        app.command(name, cls=StoreCommand)(fn)
