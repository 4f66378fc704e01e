"""`xlacache export` and `xlacache import`: the command-line side of `xlacache.bundle`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xlacache import bundle as bundles
from xlacache.cli.common import (
    JsonOpt,
    OperationFailed,
    PathArg,
    StoreCommand,
    TokenOpt,
    local_path,
    open_cache,
    plural,
    print_json,
    progress,
    remote_command,
    stdout,
)
from xlacache.entry import MAX_ENTRY_SIZE
from xlacache.errors import NotACacheError
from xlacache.stores import Store
from xlacache.units import SIZE_HELP, compact_size, format_size, parse_size


def export(
    path: PathArg,
    bundle: Annotated[Path, typer.Argument(help="Tar file to write (replaced if it exists).")],
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Write every entry of a cache into a tar bundle for `xlacache import`.

    The bundle holds entries/ab/KEY.xlac and a manifest.json with the format, the
    xlacache version and each entry's key, size and sha256. The cache is opened
    read-only and its entries are listed from the entry files themselves. Corrupt
    entries are left out and make the exit status 1.

    --json prints one object:
      {"bundle": path, "store": URL, "exported": int, "bytes": int,
      "corrupt": [KEY, ...]}
    """
    with open_cache(path, readonly=True, token=token) as store:
        url = store.url
        infos = bundles.entries_to_export(store)
        with progress("exporting", len(infos)) as advance:
            result = bundles.export_bundle(store, bundle, infos, advance)
    if as_json:
        print_json(
            {
                "bundle": str(bundle),
                "store": url,
                "exported": len(result.rows),
                "bytes": result.bytes,
                "corrupt": result.corrupt,
            }
        )
    else:
        stdout().print(
            f"exported {plural(len(result.rows), 'entry')} ({format_size(result.bytes)}) "
            f"to {bundle}"
        )
    if result.corrupt:
        raise OperationFailed(f"left out {plural(len(result.corrupt), 'corrupt entry')}")


def _open_import_target(url: str, token: str | None) -> Store:
    """Open a cache to import into, creating one only where nothing else lives."""
    try:
        return open_cache(url, readonly=False, token=token)
    except NotACacheError:
        local = local_path(url)
        if local is None:
            raise
        if local.exists() and (not local.is_dir() or any(local.iterdir())):
            raise NotACacheError(
                f"{local} is not an xlacache cache directory (import creates one only "
                "in a new or empty directory)"
            ) from None
        return open_cache(url, readonly=False, token=token, create=True)


def import_(
    bundle: Annotated[Path, typer.Argument(help="Bundle written by `xlacache export`.")],
    path: PathArg,
    max_entry_size: Annotated[
        str,
        typer.Option(
            "--max-entry-size",
            metavar="SIZE",
            help=f"Refuse members larger than this, unread ({SIZE_HELP}).",
        ),
    ] = compact_size(MAX_ENTRY_SIZE),
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Add the entries of an export bundle to a cache.

    A cache is created when PATH is a new or empty directory. Each entry is streamed
    into the cache and checked on the way against the manifest and its own checksums;
    only a whole, valid entry is stored. Entries already present are skipped; corrupt,
    missing or oversized members are counted and make the exit status 1.

    --json prints one object:
      {"bundle": path, "store": URL, "imported": int, "skipped": int,
      "corrupt": int, "corrupt_keys": [KEY, ...]}
    """
    cap = parse_size(max_entry_size, "--max-entry-size")
    with bundles.Bundle(bundle) as opened, _open_import_target(path, token) as store:
        url = store.url
        with progress("importing", len(opened.rows)) as advance:
            result = bundles.import_bundle(opened, store, cap, advance)
    counts = {"imported": result.imported, "skipped": result.skipped,
              "corrupt": len(result.corrupt)}  # fmt: skip
    if as_json:
        print_json({"bundle": str(bundle), "store": url, **counts, "corrupt_keys": result.corrupt})
    else:
        stdout().print(
            f"imported {plural(result.imported, 'entry')} into {url}; {result.skipped} "
            f"already present, {len(result.corrupt)} corrupt"
        )
    if result.corrupt:
        raise OperationFailed(f"skipped {plural(len(result.corrupt), 'corrupt entry')} in {bundle}")


def register(app: typer.Typer) -> None:
    """Add export and import to the app."""
    app.command("export", cls=StoreCommand)(remote_command(export))
    app.command("import", cls=StoreCommand)(remote_command(import_))
