"""Store commands: inspect, stats, prune, verify, rm (export and import: cli/bundles.py).

Each opens a store (a directory or grpc://), asks it one thing and prints the answer
(see cli/common.py for output, errors and exit codes).
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from xlacache import config, signing
from xlacache.cli.common import (
    BadInput,
    JsonOpt,
    OperationFailed,
    PathArg,
    StoreCommand,
    TokenOpt,
    entries_table,
    local_path,
    open_cache,
    plural,
    print_json,
    progress,
    remote_command,
    stdout,
)
from xlacache.key import is_valid_key
from xlacache.prefetch import prefetch_choice
from xlacache.stores import EntryInfo, PrunePolicy, Store
from xlacache.stores.base import VerifyReport, current_jaxlib
from xlacache.units import DURATION_HELP, SIZE_HELP, format_size, parse_duration, parse_size

MIN_KEY_PREFIX = 8
SHOWN = 200  # entries prune shows in its table (--json: all)
_HEX_RE = re.compile(r"[0-9a-f]+")


# -- inspect and stats -----------------------------------------------------------------


def inspect_(
    path: PathArg,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Show at most N entries.")
    ] = None,
    would_load: Annotated[
        bool,
        typer.Option(
            "--would-load",
            help="Only the entries a worker starting on this cache would prefetch, in the "
            "order it loads them (see --prefetch).",
        ),
    ] = False,
    prefetch: Annotated[
        int | None,
        typer.Option(
            "--prefetch",
            min=0,
            help="With --would-load: the worker's prefetch setting (default: "
            "$XLACACHE_PREFETCH, else 32).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """List the entries of a cache, newest first.

    --json prints one object; --limit shortens "entries" but not "total":
      {"store": URL, "total": int, "entries": [ENTRY, ...]}
    ENTRY: {"key": 64 hex digits, "label": str, "size": bytes,
      "payload_size": bytes, "compile_seconds": float, "created": unix time,
      "last_used": unix time, "hits": int, "format_version": int (0: not recorded),
      "jaxlib": str ("": not recorded), "platform": str,
      "rewarmed_from": str (the jaxlib `xlacache rewarm` compiled it from; "": none)}

    --would-load lists what a worker whose cache this is loads ahead at start-up
    (prefetch: the most recently used executables, oldest use first); with --json
      {"store": URL, "total": int, "prefetch": int, "bytes": int, "entries": [ENTRY, ...]}
    """
    if would_load and local_path(path) is None:
        raise BadInput(
            f"--would-load reads a worker's own cache directory (what it prefetches at "
            f"start-up); {path} is a shared store: give the worker's directory as PATH"
        )
    with open_cache(path, readonly=True, token=token) as store:
        infos = sorted(store.list(), key=lambda i: (i.created, i.key), reverse=True)
        url = store.url
    if would_load:
        _print_would_load(url, infos, _prefetch_setting(prefetch), limit, as_json)
        return
    shown = infos[:limit] if limit is not None else infos
    if as_json:
        print_json({"store": url, "total": len(infos), "entries": [i.to_dict() for i in shown]})
        return
    title = f"{url}: {plural(len(infos), 'entry')}"
    if len(shown) < len(infos):
        title += f", newest {len(shown)} shown"
    stdout().print(entries_table(shown, title=title))


def _prefetch_setting(given: int | None) -> int:
    if given is not None:
        return given
    return config.from_env().get("prefetch", config.CacheConfig.prefetch)


def _print_would_load(
    url: str, infos: list[EntryInfo], prefetch: int, limit: int | None, as_json: bool
) -> None:
    chosen = prefetch_choice(infos, prefetch)
    shown = chosen[:limit] if limit is not None else chosen
    total = sum(i.payload_size for i in chosen)
    if as_json:
        print_json({"store": url, "total": len(infos), "prefetch": prefetch, "bytes": total,
                    "entries": [i.to_dict() for i in shown]})  # fmt: skip
        return
    title = (
        f"{url}: a worker with prefetch={prefetch} loads {plural(len(chosen), 'entry')} "
        f"({format_size(total)} of executables) of {len(infos)}, in this order"
    )
    stdout().print(entries_table(shown, title=title))


def stats(path: PathArg, as_json: JsonOpt = False, token: TokenOpt = None) -> None:
    """Summarize a cache: entries, sizes, compile time represented, hits.

    --json prints one object ("compile_seconds": total compile time of the entries):
      {"store": URL, "entries": int, "bytes": int, "payload_bytes": int,
      "compile_seconds": float, "hits": int,
      "by_jaxlib": [{"jaxlib": VERSION, "entries": int, "bytes": int, "rewarmed": int},
      ...]}
    (by_jaxlib: newest version first; "" for entries that do not record it; "rewarmed":
    entries `xlacache rewarm` compiled from another jaxlib's.)
    """
    with open_cache(path, readonly=True, token=token) as store:
        summary = store.summary()
        versions = store.by_jaxlib()
        url = store.url
    if as_json:
        by_jaxlib = [v.to_dict() for v in versions]
        print_json({"store": url, **summary.to_dict(), "by_jaxlib": by_jaxlib})
        return
    table = Table(title=url, title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_row("entries", str(summary.entries))
    table.add_row("total size", format_size(summary.bytes))
    table.add_row("payload size", format_size(summary.payload_bytes))
    table.add_row("compile seconds", f"{summary.compile_seconds:.1f}")
    table.add_row("hits", str(summary.hits))
    for v in versions:
        name = f"jaxlib {v.jaxlib}" if v.jaxlib else "jaxlib not recorded"
        rewarmed = f", {v.rewarmed} rewarmed" if v.rewarmed else ""
        table.add_row(name, f"{plural(v.entries, 'entry')}, {format_size(v.bytes)}{rewarmed}")
    stdout().print(table)


# -- prune, verify, rm -----------------------------------------------------------------


def _prune_policy(
    max_size: str | None, older_than: str | None, unused_for: str | None, stale: bool
) -> PrunePolicy:
    if max_size is None and older_than is None and unused_for is None and not stale:
        raise BadInput(
            "nothing to prune by: give --max-size, --older-than, --unused-for or --stale"
        )
    jaxlib = current_jaxlib() if stale else None
    if stale and not jaxlib:
        raise BadInput("--stale needs jaxlib installed: it keeps what this jaxlib can load")
    return PrunePolicy(
        max_size=None if max_size is None else parse_size(max_size, "--max-size"),
        older_than=None if older_than is None else parse_duration(older_than, "--older-than"),
        unused_for=None if unused_for is None else parse_duration(unused_for, "--unused-for"),
        stale_for=jaxlib,
    )


def prune(
    path: PathArg,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            metavar="SIZE",
            help=f"Evict least recently used entries down to this size ({SIZE_HELP}).",
        ),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help=f"Remove entries created longer ago ({DURATION_HELP}).",
        ),
    ] = None,
    unused_for: Annotated[
        str | None,
        typer.Option(
            "--unused-for",
            metavar="DURATION",
            help=f"Remove entries not used for this long ({DURATION_HELP}).",
        ),
    ] = None,
    stale: Annotated[
        bool,
        typer.Option(
            "--stale",
            help="Remove entries no process of the installed jaxlib can load (another "
            "jaxlib version or entry format).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Remove entries by total size (LRU), age, time since last use, or staleness.

    Sizes and durations need a unit: 10GB, 512MiB, 4096B; 7d, 12h, 30m, 90s (0 alone
    is allowed: --max-size 0 removes every entry). --stale removes what the
    installed jaxlib cannot load (after an upgrade: every older entry). With --dry-run
    the cache is opened read-only and nothing is removed; the table shows the first
    200 entries (--json lists every one).

    --json prints one object (ENTRY as in inspect --json):
      {"store": URL, "dry_run": bool, "count": int, "bytes": int,
      "removed": [ENTRY, ...]}
    """
    policy = _prune_policy(max_size, older_than, unused_for, stale)
    with open_cache(path, readonly=dry_run, token=token) as store:
        removed = store.prune(policy, dry_run=dry_run)
        url = store.url
    total = sum(i.size for i in removed)
    if as_json:
        print_json(
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
    console = stdout()
    if removed:
        console.print(entries_table(removed[:SHOWN]))
        if len(removed) > SHOWN:
            console.print(f"... and {len(removed) - SHOWN} more (--json lists every one)")
    console.print(f"{verb} {plural(len(removed), 'entry')} ({format_size(total)}) from {url}")


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
    with open_cache(path, readonly=not repair, token=token) as store:
        expected = store.summary().entries
        with progress(f"verifying {plural(expected, 'entry')}", expected, steps=False):
            report = store.verify(repair=repair)
        audit = None if trusted is None else signing.audit(store, trusted)
        url = store.url
    if as_json:
        trust = {} if audit is None else {"trust": asdict(audit)}
        print_json({"store": url, **report.to_dict(), **trust})
    else:
        _print_verify(url, report)
        if audit is not None:
            _print_audit(audit)
    if audit is not None and audit.untrusted:
        raise OperationFailed(
            f"{plural(audit.untrusted, 'entry')} in {url} not signed by a trusted key"
        )
    if report.corrupt and not repair:
        raise OperationFailed(
            f"{plural(len(report.corrupt), 'corrupt entry')} in {url} "
            f"(run 'xlacache verify --repair {path}' to remove them)"
        )


def _print_verify(url: str, report: VerifyReport) -> None:
    console = stdout()
    for key in report.corrupt:
        console.print(f"corrupt: {key}" + (" (removed)" if report.repaired else ""))
    state = "removed" if report.repaired and report.corrupt else "found"
    console.print(
        f"checked {plural(report.checked, 'entry')} in {url}: {len(report.corrupt)} corrupt {state}"
    )
    if report.stale_temp_files:
        done = "removed" if report.repaired else "run --repair to remove them"
        console.print(f"{plural(report.stale_temp_files, 'abandoned temp file')} ({done})")


def _print_audit(audit: signing.TrustAudit) -> None:
    console = stdout()
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
    if _HEX_RE.fullmatch(key) and MIN_KEY_PREFIX <= len(key) < 64:
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
    with open_cache(path, readonly=False, token=token) as store:
        found, missing = _resolve_keys(store, wanted)
        removed = [k for k in dict.fromkeys(found) if store.delete(k)]
        missing += [k for k in dict.fromkeys(found) if k not in removed]
        url = store.url
    if as_json:
        print_json({"store": url, "removed": removed, "missing": missing})
    else:
        stdout().print(f"removed {plural(len(removed), 'entry')} from {url}")
    if missing:
        raise BadInput(f"not in {url}: {', '.join(missing)}")


def register(app: typer.Typer) -> None:
    """Add the store commands to the app."""
    for fn, name in (
        (inspect_, "inspect"),
        (stats, "stats"),
        (prune, "prune"),
        (verify, "verify"),
        (rm, "rm"),
    ):
        app.command(name, cls=StoreCommand)(remote_command(fn))
