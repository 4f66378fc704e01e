"""A local store's index as the store sees it: opened, rebuilt, reconciled, set aside.

`LocalIndex(files, readonly)` is all a `LocalStore` does to get its index: it opens
`index.sqlite` (`index_db.Index`; its schema created or migrated: `index_schema`),
rebuilds it from entry headers when SQLite says it is damaged (the damaged file set
aside as `index.sqlite.corrupt`), and, for a writer, reconciles it with the entry files.
Index failures never reach the store's callers: `call` counts them (`errors["index"]`)
and returns None, and the store falls back to the entry files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

from xlacache import counters
from xlacache.errors import IndexClosedError, IndexCorruptError, ReadOnlyError, StoreIndexError
from xlacache.stores.base import EntryInfo
from xlacache.stores.files import EntryFiles
from xlacache.stores.index_db import CULL_LIMIT, Index, Limits

__all__ = ["CULL_LIMIT", "INDEX_FILE", "Index", "Limits", "LocalIndex", "move_aside"]

INDEX_FILE = "index.sqlite"
REBUILD_LOCK_SECONDS = 120.0
T = TypeVar("T")


class LocalIndex:
    """The index of the store directory `files`; `db` is None when it is unusable."""

    def __init__(self, files: EntryFiles, readonly: bool = False) -> None:
        self.files = files
        self.readonly = readonly
        self.path = files.root / INDEX_FILE
        self.db: Index | None = None
        self.db = self._open()
        if self.db is not None and not readonly:
            self.reconcile(counted=not self.db.fresh)

    def _open(self) -> Index | None:
        if self.readonly:
            if not self.path.exists():
                return None
            try:
                return Index(self.path, readonly=True)
            except (StoreIndexError, OSError):
                return None  # listing falls back to scanning headers
        try:
            return Index(self.path)
        except IndexCorruptError as exc:
            counters.record_error("index", exc)
            self.rebuild()
            return self.db
        except (StoreIndexError, OSError) as exc:
            counters.record_error("index", exc)
            return None

    def call(self, fn: Callable[[Index], T]) -> T | None:
        """fn(index); failures are counted, never raised (the index is derived), and a
        damaged index is rebuilt. None when there is no usable index."""
        db = self.db
        if db is None:
            return None
        try:
            return fn(db)
        except IndexClosedError:
            return None  # the store is closing: callers fall back to the entry files
        except StoreIndexError as exc:
            counters.record_error("index", exc)
            if isinstance(exc, IndexCorruptError) and not self.readonly:
                try:
                    self.rebuild()
                except Exception as rebuild_exc:  # noqa: BLE001
                    counters.record_error("index", rebuild_exc)
                    self.db = None
            return None

    def reconcile(self, counted: bool = True) -> int:
        """Make the index match the entry files; returns how many rows it changed.

        Entry files without a row get one (from their header; malformed ones are left
        to `verify`), rows without a file are dropped, and rows a migration left without
        entry format and jaxlib get them from their headers. The drift is counted in
        `index_drift` unless `counted` is false (a new, empty index).
        """
        if self.readonly:
            raise ReadOnlyError(f"{self.files.root} is open read-only")
        known = self.call(lambda ix: ix.keys())
        if known is None:
            return 0
        on_disk = set(self.files.keys())  # after the rows: a concurrent put shows as a file
        added = [i for i in map(self._read, on_disk - known) if i]
        vanished = [k for k in known - on_disk if not self.files.entry_path(k).exists()]
        self.call(lambda ix: ix.upsert(added))
        self.call(lambda ix: ix.remove(vanished))
        if self.db is not None and self.db.migrated:
            self._backfill()
        drift = len(added) + len(vanished)
        if drift and counted:
            counters.add("index_drift", drift)
        return drift

    def _read(self, key: str) -> EntryInfo | None:
        return self.files.read_info(self.files.entry_path(key))

    def _backfill(self) -> None:
        """Fill in what an earlier schema did not record, from the entry headers."""
        keys = self.call(lambda ix: ix.unversioned()) or []
        found = [i for i in map(self._read, keys) if i]
        if self.call(lambda ix: ix.set_versions(found)) is not None and self.db is not None:
            self.db.migrated = False

    def resync(self, present: list[EntryInfo]) -> None:
        """Rows for exactly `present` (what `verify --repair` found readable)."""

        def sync(ix: Index) -> None:
            known = ix.keys()
            keys = {i.key for i in present}
            ix.remove(known - keys)
            ix.upsert(i for i in present if i.key not in known)

        self.call(sync)

    def rebuild(self) -> int:
        """Set the index aside and recreate it from entry headers; how many it indexed."""
        if self.readonly:
            raise ReadOnlyError(f"{self.files.root} is open read-only")
        with FileLock(str(self.files.root / "index.lock"), timeout=REBUILD_LOCK_SECONDS):
            self.close()
            move_aside(self.path)
            self.db = Index(self.path)
            infos = list(self.files.scan())
            self.db.upsert(infos)
        return len(infos)

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()


def move_aside(path: Path) -> None:
    """Set a damaged index file (and its WAL companions) aside so it can be rebuilt."""
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            os.replace(p, Path(f"{path}.corrupt{suffix}"))
