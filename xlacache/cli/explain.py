"""Why did it miss: `xlacache explain` (recorded misses) and `xlacache diff` (two entries).

Both go through the Store interface: `diff` reads entry headers (`Store.read_header`),
`explain` the misses that processes running with XLACACHE_EXPLAIN=1 recorded
(`Store.recent_misses`): a cache directory's `misses.jsonl`, a server's ring, a
bucket's `misses/` objects.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from xlacache import explain
from xlacache.cli.commands import _normalize_key, _resolve_keys
from xlacache.cli.common import (
    BadInput,
    JsonOpt,
    PathArg,
    StoreCommand,
    TokenOpt,
    open_cache,
    print_json,
    remote_command,
    stdout,
    when,
)

KeyArg = Annotated[str, typer.Argument(help="A full key, or a unique prefix of 8+ hex digits.")]


def explain_(
    path: PathArg,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="Show at most N misses.")
    ] = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Show why recent compilations missed, newest first.

    Misses are recorded by processes that ran with XLACACHE_EXPLAIN=1: in their cache
    directory (if they could write it), and reported to their server (grpc://) or
    bucket (gs://). Each names the stored entry nearest to the miss and the key
    components that differ (HLO, compile options, jaxlib, platform, devices, XLA flags).

    --json prints one object; --limit shortens "misses" but not "total":
      {"store": PATH, "total": int, "misses": [MISS, ...]}
    MISS: {"time": unix time, "key": str, "label": str, "reason": str, "note": str,
      "differences": [{"component": str, "details": [str, ...]}, ...],
      "nearest": KEY or null, "nearest_label": str, "compared": int, "host": str,
      "pid": int, "client": str (a server's: the reporting token's name)}
    """
    with open_cache(path, readonly=True, token=token) as store:
        records = store.recent_misses()
        url = store.url
    shown = records[:limit] if limit is not None else records
    if as_json:
        print_json({"store": url, "total": len(records), "misses": shown})
        return
    console = stdout()
    if not records:
        console.print(f"{url}: no recorded misses (run with XLACACHE_EXPLAIN=1 to record them)")
        return
    count = f"{len(records)} recorded miss" + ("" if len(records) == 1 else "es")
    table = Table(title=f"{url}: {count}", title_justify="left")
    clients = any(r.get("client") for r in shown)
    who = ["client"] if clients else []
    for name in ("when", *who, "label", "key", "reason"):
        table.add_column(name, no_wrap=True)
    table.add_column("why", overflow="fold")
    for r in shown:
        client = [r.get("client", "")] if clients else []
        table.add_row(when(r["time"]), *client, r.get("label", ""), r.get("key", "")[:12],
                      r.get("reason", ""), explain.why(r))  # fmt: skip
    console.print(table)


def diff(
    path: PathArg,
    key1: KeyArg,
    key2: KeyArg,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Compare two entries' keys component by component.

    Shows which components (HLO, compile options, jaxlib, platform, devices, XLA flags,
    entry format) differ and how, with values where readable; for HLO, the first
    differing lines when both entries kept their module text (XLACACHE_KEEP_HLO=1).

    --json prints one object:
      {"store": URL, "keys": [KEY1, KEY2], "labels": [str, str], "same": bool,
      "components": [{"component": str, "same": bool, "old": digest, "new": digest,
      "details": [str, ...]}, ...]}
    """
    wanted = [_normalize_key(key1), _normalize_key(key2)]
    with open_cache(path, readonly=True, token=token) as store:
        url = store.url
        found, missing = _resolve_keys(store, wanted)
        headers = [store.read_header(k) for k in found]
        missing += [k for k, h in zip(found, headers, strict=True) if h is None]
        if missing:
            raise BadInput(f"not in {url}: {', '.join(missing)}")
        old, new = (
            explain.Side.of_header(
                h,
                lambda h=h: explain.stored_module_text(store, h),
                lambda h=h: explain.stored_program_text(store, h),
            )
            for h in headers
        )
        rows = explain.compare(old, new)
    if as_json:
        print_json(
            {
                "store": url,
                "keys": found,
                "labels": [old.label, new.label],
                "same": all(r.same for r in rows),
                "components": [r.to_dict() for r in rows],
            }
        )
        return
    table = Table(title=f"{url}: {found[0][:12]} ({old.label}) vs {found[1][:12]} ({new.label})",
                  title_justify="left")  # fmt: skip
    table.add_column("component", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("details", overflow="fold")
    for r in rows:
        name = explain.NAMES.get(r.component, r.component)
        table.add_row(name, "same" if r.same else "differs", "\n".join(r.details))
    stdout().print(table)


def register(app: typer.Typer) -> None:
    app.command("explain", cls=StoreCommand)(remote_command(explain_))
    app.command("diff", cls=StoreCommand)(remote_command(diff))
