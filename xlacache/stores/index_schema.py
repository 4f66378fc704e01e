"""The local index's schema, declared with sqlite-utils, and its migrations as code.

`PRAGMA user_version` holds the schema version. `ensure(conn)` brings a database of any
earlier version this module knows (`MIGRATIONS`) up to `VERSION` in one transaction,
keeping its rows (hit counts and last use cannot be read back from entry files), and
creates the schema in an empty one. A version it does not know (newer, or too old)
starts afresh: the index is derived data, rebuilt from entry headers.

The tables (docs/index.md says how to query them read-only):

- `entries`: a row per entry file (key, sizes, times, hits, label, and what decides
  whether a process can load it: entry format, jaxlib version, platform; and the jaxlib
  `xlacache rewarm` compiled it from).
- `totals`: one row of sums the triggers keep, so `stats` never sums `entries`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from xlacache.stores.base import LRU_ORDER

if TYPE_CHECKING:  # imported when a schema is created or migrated: it costs 0.2 s
    import sqlite_utils

VERSION = 4  # PRAGMA user_version

# Column -> type, in table order; `key` is the primary key. Every column is NOT NULL.
ENTRY_COLUMNS: dict[str, type] = {
    "key": str,
    "size": int,
    "payload_size": int,
    "created": float,
    "last_used": float,
    "hits": int,
    "compile_seconds": float,
    "label": str,
    "format_version": int,  # entry format (0: not known)
    "jaxlib": str,  # jaxlib version that wrote it ("": not known)
    "platform": str,  # platform name ("cpu", "cuda", ...; "": not known)
    "rewarmed_from": str,  # the jaxlib `xlacache rewarm` compiled it from ("": compiled live)
}
TOTAL_COLUMNS: dict[str, type] = {
    "id": int,
    "entries": int,
    "bytes": int,
    "payload_bytes": int,
    "hits": int,
    "compile_seconds": float,
}
INDEXES = {"entries_last_used": ["last_used"], "entries_created": ["created"]}
_SUMMED = ("size", "payload_size", "hits", "compile_seconds")  # entries -> totals
_TOTAL_OF = dict(zip(_SUMMED, ("bytes", "payload_bytes", "hits", "compile_seconds"), strict=True))


def _sums(template: str) -> str:
    return ", ".join(template.format(t=_TOTAL_OF[c], c=c) for c in _SUMMED)


TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN UPDATE totals"
    f" SET entries = entries + 1, {_sums('{t} = {t} + new.{c}')}; END",
    "CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN UPDATE totals"
    f" SET entries = entries - 1, {_sums('{t} = {t} - old.{c}')}; END",
    "CREATE TRIGGER IF NOT EXISTS entries_changed AFTER UPDATE ON entries BEGIN UPDATE totals"
    f" SET {_sums('{t} = {t} + new.{c} - old.{c}')}; END",
)


# What `PrunePolicy` removes, in one query (parameters: old, unused, stale, format, max):
# rows too old, unused or stale (`gone`), then the least recently used of the rest while
# the sizes kept before them (a running sum in last_used order, gone rows counting 0)
# leave more than `max` after them. One scan and one sort; no row goes through Python.
GONE = """(:old IS NOT NULL AND created < :old)
    OR (:unused IS NOT NULL AND last_used < :unused)
    OR (:stale IS NOT NULL
        AND (format_version NOT IN (0, :format) OR jaxlib NOT IN ('', :stale)))"""
_COLUMNS = ", ".join(ENTRY_COLUMNS)
PRUNE = f"""
SELECT {_COLUMNS} FROM (
    SELECT *, sum(kept) OVER (ORDER BY {LRU_ORDER} ROWS UNBOUNDED PRECEDING) - kept
        AS before, sum(kept) OVER () AS total
    FROM (SELECT *, {GONE} AS gone, CASE WHEN {GONE} THEN 0 ELSE size END AS kept
          FROM entries)
) WHERE gone OR before < total - :max
"""
PRUNE_NO_SIZE = f"SELECT {_COLUMNS} FROM entries WHERE {GONE}"  # no running sum needed


def create(db: sqlite_utils.Database) -> None:
    """The current schema in an empty database (in the caller's transaction)."""
    defaults = {"format_version": 0, "jaxlib": "", "platform": "", "rewarmed_from": ""}
    entries = db.create_table(
        "entries", ENTRY_COLUMNS, pk="key", not_null=set(ENTRY_COLUMNS),
        defaults=defaults, strict=True,
    )  # fmt: skip
    for name, columns in INDEXES.items():
        entries.create_index(columns, index_name=name, if_not_exists=True)
    db.create_table("totals", TOTAL_COLUMNS, pk="id", not_null=set(TOTAL_COLUMNS), strict=True)
    db.execute("INSERT OR IGNORE INTO totals VALUES (1, 0, 0, 0, 0, 0.0)")
    for trigger in TRIGGERS:
        db.execute(trigger)


def _v2_to_v3(db: sqlite_utils.Database) -> None:
    """Version 2 (before issue 18) lacked what decides loadability: add it, not known
    (0 / ""). The writer's reconcile fills it in from entry headers (`needs_backfill`)."""
    entries = db["entries"]
    entries.add_column("format_version", int, not_null_default=0)
    entries.add_column("jaxlib", str, not_null_default="")
    entries.add_column("platform", str, not_null_default="")


def _v3_to_v4(db: sqlite_utils.Database) -> None:
    """Version 3 (before issue 23) did not record rewarmed entries; none existed then."""
    db["entries"].add_column("rewarmed_from", str, not_null_default="")


# Version -> the step from the version before it.
MIGRATIONS: dict[int, Callable[[sqlite_utils.Database], None]] = {3: _v2_to_v3, 4: _v3_to_v4}
OLDEST = min(MIGRATIONS) - 1  # the earliest version that migrates rather than rebuilds


def version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def ensure(conn: sqlite3.Connection) -> str:
    """Bring the schema to VERSION inside the caller's open write transaction.

    Returns what was done: "current", "migrated" (rows kept) or "created" (an empty
    index: a new file, or one of a version no migration starts from).
    """
    found = version(conn)
    if found == VERSION:
        return "current"
    import sqlite_utils  # noqa: PLC0415 - only here (see the import above)

    db = sqlite_utils.Database(conn)
    if OLDEST <= found < VERSION and db["entries"].exists():
        for step in range(found + 1, VERSION + 1):
            MIGRATIONS[step](db)
        done = "migrated"
    else:
        for trigger in ("entries_added", "entries_removed", "entries_changed"):
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        for table in ("entries", "totals"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        create(db)
        done = "created"
    conn.execute(f"PRAGMA user_version = {VERSION}")
    return done


def needs_backfill(conn: sqlite3.Connection) -> list[str]:
    """Keys of rows that a migration left without format, jaxlib and platform."""
    rows = conn.execute("SELECT key FROM entries WHERE format_version = 0 AND jaxlib = ''")
    return [row[0] for row in rows]
