"""The SQLite index of a local store: sizes, times and hit counts for listing and eviction.

The index is derived data. Entry files are the truth; a missing or corrupt index is
rebuilt from entry headers, and reads never depend on it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import sqlite_utils
from filelock import FileLock

from xlacache.stores.base import EntryInfo, StoreSummary

_COLUMNS = {
    "key": str,
    "size": int,
    "payload_size": int,
    "created": float,
    "last_used": float,
    "hits": int,
    "compile_seconds": float,
    "label": str,
}


class Index:
    """One process's connection to a store's index (thread-safe)."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        self._lock = threading.Lock()
        if readonly:
            # immutable=1: no locks, no -wal/-shm files, works on a read-only mount.
            conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)
        else:
            conn = sqlite3.connect(path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
        self.db = sqlite_utils.Database(conn)
        if not readonly:
            self.db.execute("PRAGMA synchronous = NORMAL")
            # Switching to WAL and creating the schema race between processes opening a
            # new index at once (SQLite answers "locked" without waiting): serialize them.
            with FileLock(f"{path}.lock", timeout=120):
                if self.db.journal_mode != "wal":
                    self.db.enable_wal()
                self.db["entries"].create(_COLUMNS, pk="key", if_not_exists=True)
                self.db["entries"].create_index(["last_used"], if_not_exists=True)
        # Fails with sqlite3.DatabaseError on a corrupt file: the store rebuilds then.
        self.db.execute("SELECT count(*) FROM entries").fetchone()

    def close(self) -> None:
        with self._lock:
            self.db.conn.close()

    def upsert(self, infos: Iterable[EntryInfo]) -> None:
        """Insert or refresh rows; a rewritten entry keeps its hit count."""
        rows = [tuple(info.to_dict()[c] for c in _COLUMNS) for info in infos]
        columns, marks = ", ".join(_COLUMNS), ", ".join("?" * len(_COLUMNS))
        refresh = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("key", "hits"))
        sql = (
            f"INSERT INTO entries ({columns}) VALUES ({marks})"
            f" ON CONFLICT(key) DO UPDATE SET {refresh}"
        )
        with self._lock, self.db.conn:
            self.db.conn.executemany(sql, rows)

    def touch(self, key: str, now: float) -> bool:
        """Record a hit; False if the index has no row for the key."""
        with self._lock, self.db.conn:
            cursor = self.db.execute(
                "UPDATE entries SET hits = hits + 1, last_used = ? WHERE key = ?", [now, key]
            )
            return cursor.rowcount > 0

    def remove(self, keys: Iterable[str]) -> None:
        with self._lock, self.db.conn:
            self.db.conn.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in keys])

    def get(self, key: str) -> EntryInfo | None:
        with self._lock:
            row = self.db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM entries WHERE key = ?", [key]
            ).fetchone()
        return EntryInfo(*row) if row else None

    def all(self, order: str = "created DESC") -> Iterator[EntryInfo]:
        with self._lock:
            rows = self.db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM entries ORDER BY {order}"
            ).fetchall()
        return (EntryInfo(*row) for row in rows)

    def keys(self) -> set[str]:
        with self._lock:
            return {row[0] for row in self.db.execute("SELECT key FROM entries")}

    def total_size(self) -> int:
        with self._lock:
            return self.db.execute("SELECT coalesce(sum(size), 0) FROM entries").fetchone()[0]

    def summary(self) -> StoreSummary:
        with self._lock:
            row = self.db.execute(
                "SELECT count(*), coalesce(sum(size), 0), coalesce(sum(payload_size), 0), "
                "coalesce(sum(hits), 0), coalesce(sum(compile_seconds), 0) FROM entries"
            ).fetchone()
        return StoreSummary(*row)


def is_damaged(exc: sqlite3.Error) -> bool:
    """Whether an SQLite error means a damaged file (rebuild) rather than a busy or I/O one."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


def move_aside(path: Path) -> None:
    """Set a corrupt index file (and its WAL companions) aside so it can be rebuilt."""
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            os.replace(p, Path(f"{path}.corrupt{suffix}"))
