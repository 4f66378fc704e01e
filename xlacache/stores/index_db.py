"""The SQLite index of a local store: sizes, times and hit counts for listing and eviction.

(`stores.index` opens it for a store, rebuilds and reconciles it; `stores.index_schema`
declares its tables and migrations.)

The index is derived data. Entry files are the truth; a missing or damaged index is
rebuilt from entry headers, and reads never depend on it. Modelled on diskcache:

- **O(1) accounting.** Triggers keep the totals (entries, bytes, hits, ...) in a
  one-row table as rows come and go; no write ever sums the table.
- **Bounded eviction inside the write.** `add` inserts a row and, in the same
  transaction, evicts at most `CULL_LIMIT` least recently used (or too old) rows.
- **Reads never write.** A hit is counted in memory (`note_hit`) and flushed by a
  background thread with a short busy timeout (`stores.index_hits`); a flush that
  loses the race for the write lock is retried later.
- **One connection per thread**, reopened after a fork, closed together by `close`;
  a call that races `close` gets IndexClosedError, never a sign of damage.
- **Paging in SQL** (`page`): key order, `LIMIT`, on the primary key.

Every sqlite3 error leaves this module as a StoreIndexError: IndexCorruptError for a
damaged file (SQLITE_CORRUPT, SQLITE_NOTADB), IndexClosedError after close.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from xlacache import counters
from xlacache.entry import FORMAT_VERSION
from xlacache.errors import (
    IndexBusyError,
    IndexClosedError,
    IndexCorruptError,
    ReadOnlyError,
    StoreIndexError,
)
from xlacache.stores import index_schema
from xlacache.stores.base import (
    LRU_ORDER,
    EntryInfo,
    PrunePolicy,
    StoreSummary,
    VersionSummary,
    group_totals,
)
from xlacache.stores.index_hits import FLUSH_BUSY_SECONDS, HitBuffer, Pending

SCHEMA_VERSION = index_schema.VERSION  # PRAGMA user_version (migrations: index_schema)
CULL_LIMIT = 16  # rows one write may evict
WRITE_BUSY_SECONDS = 30.0  # a write waits this long for the write lock, then fails (counted)
CLOSE_FLUSH_BUSY_SECONDS = 5.0  # the last flush of hits, at close, waits longer

COLUMNS = tuple(index_schema.ENTRY_COLUMNS)  # EntryInfo's fields, in its order
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM entries"
_UPSERT = (
    f"INSERT INTO entries ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    " ON CONFLICT(key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in ("key", "hits", "last_used"))
    + ", last_used = max(last_used, excluded.last_used)"
)
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED

# Connections a forked child inherited: never used or closed there (SQLite forbids it).
_INHERITED: list[sqlite3.Connection] = []
_OPEN_INDEXES: weakref.WeakSet[Index] = weakref.WeakSet()


@dataclass(frozen=True)
class Limits:
    """What `Index.add` evicts in the write's own transaction; None means no limit."""

    max_size: int | None = None  # bytes; least recently used go first
    max_age: float | None = None  # seconds since created
    cull_limit: int = CULL_LIMIT  # most rows evicted by one write


class _Connection:
    """One thread's connection and the lock `close` takes to close it safely."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.lock = threading.Lock()
        self.closed = False
        self.thread = threading.current_thread()

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.db.close()


class Index:
    """One process's access to a store's index (thread-safe; a connection per thread)."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.fresh = False  # True when this open created the schema (an empty index)
        self.migrated = False  # True when this open migrated an earlier schema's rows
        self._closed = False
        self._connections: list[_Connection] = []
        self.hits = HitBuffer(self._write_hits)
        self._reset_process_state()
        self._readonly_uri = self._pick_readonly_uri() if readonly else None
        _OPEN_INDEXES.add(self)
        try:
            with self._use() as db:
                if readonly:
                    version = db.execute("PRAGMA user_version").fetchone()[0]
                    if version != SCHEMA_VERSION:
                        raise StoreIndexError(f"{self.path}: index schema {version}, not ours")
                else:
                    self._create_schema(db)
                db.execute("SELECT entries FROM totals").fetchone()
        except BaseException:
            self.close()
            raise

    def _reset_process_state(self) -> None:
        """Fresh locks and connections: at creation, and in a forked child."""
        self._pid = os.getpid()
        self._local = threading.local()
        self._registry_lock = threading.Lock()

    # -- connections -------------------------------------------------------------------

    def _pick_readonly_uri(self) -> str:
        """How to open read-only: through the WAL where a writer keeps one, else immutable.

        `mode=ro` sees what writers committed to the write-ahead log; `immutable=1`
        takes no locks and creates no -wal/-shm files (a read-only mount), and is exact
        when no WAL exists: everything committed is then in the file itself.
        """
        wal = Path(f"{self.path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return f"file:{self.path}?mode=ro"
        return f"file:{self.path}?immutable=1"

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            db = sqlite3.connect(
                self._readonly_uri, uri=True, check_same_thread=False, isolation_level=None
            )
        else:
            db = sqlite3.connect(
                self.path, timeout=WRITE_BUSY_SECONDS, check_same_thread=False,
                isolation_level=None,
            )  # fmt: skip
            db.execute("PRAGMA synchronous = NORMAL")
        return db

    def _connection(self) -> _Connection:
        """This thread's connection (opened on first use; a forked child starts afresh)."""
        if os.getpid() != self._pid:
            self._after_fork()
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            with self._registry_lock:
                if self._closed:
                    raise IndexClosedError(f"{self.path}: index closed")
                with _errors(self):
                    conn = _Connection(self._connect())
                gone = [c for c in self._connections if not c.thread.is_alive()]
                self._connections = [c for c in self._connections if c not in gone]
                self._connections.append(conn)
            for old in gone:  # threads that ended: their connections are free
                old.close()
            self._local.conn = conn
        return conn

    def _after_fork(self) -> None:
        """In a forked child: drop (never close) inherited connections and parent's hits."""
        _INHERITED.extend(c.db for c in self._connections)
        self._connections = []
        self.hits.check_fork()  # the parent flushes its own hits
        self._reset_process_state()

    @contextlib.contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held against `close`, with errors translated."""
        conn = self._connection()
        with conn.lock:
            if conn.closed:
                raise IndexClosedError(f"{self.path}: index closed")
            with _errors(self):
                yield conn.db

    @contextlib.contextmanager
    def _write(self, busy_seconds: float | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE: takes the write lock up front)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.path} is open read-only")
        with self._use() as db:
            if busy_seconds is not None:
                db.execute(f"PRAGMA busy_timeout = {int(busy_seconds * 1000)}")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    if db.in_transaction:  # SQLite may have rolled back already
                        db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                if busy_seconds is not None:
                    db.execute(f"PRAGMA busy_timeout = {int(WRITE_BUSY_SECONDS * 1000)}")

    def _create_schema(self, db: sqlite3.Connection) -> None:
        """Create or migrate the schema (`index_schema.ensure`) under the write lock."""
        if index_schema.version(db) == SCHEMA_VERSION:
            return
        _use_wal(db, deadline=time.monotonic() + WRITE_BUSY_SECONDS)
        db.execute("BEGIN IMMEDIATE")  # another process may be creating it too
        try:
            done = index_schema.ensure(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self.fresh = done == "created"
        self.migrated = done == "migrated"

    def close(self) -> None:
        """Flush buffered hits, then close every thread's connection (idempotent)."""
        if self._closed:
            return
        if os.getpid() != self._pid:
            self._after_fork()
        if not self.readonly:
            self._flush_quietly(CLOSE_FLUSH_BUSY_SECONDS)
        with self._registry_lock:
            self._closed = True
            connections, self._connections = self._connections, []
        self.hits.close()
        for conn in connections:
            conn.close()  # waits for a query running on it to finish

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writes ------------------------------------------------------------------------

    def upsert(self, infos: Iterable[EntryInfo]) -> None:
        """Insert or refresh rows; a rewritten entry keeps its hit count."""
        rows = [_row(info) for info in infos]
        if rows:
            with self._write() as db:
                db.executemany(_UPSERT, rows)

    def add(self, info: EntryInfo, limits: Limits | None = None) -> list[EntryInfo]:
        """Record a stored entry and evict what `limits` say, in one transaction.

        Returns the evicted rows (at most `limits.cull_limit`), whose files the caller
        removes; the entry just added is never among them. Buffered hits are written
        in the same transaction, so eviction sees the latest use of every entry.
        """
        pending = self.hits.take()
        try:
            with self._write() as db:
                self._apply_hits(db, pending)
                db.execute(_UPSERT, _row(info))
                return self._cull(db, limits, protect=info.key) if limits else []
        except StoreIndexError:
            self.hits.requeue(pending)
            raise

    def _cull(self, db: sqlite3.Connection, limits: Limits, protect: str) -> list[EntryInfo]:
        victims: dict[str, EntryInfo] = {}
        if limits.max_age is not None:
            cutoff = time.time() - limits.max_age
            rows = db.execute(
                f"{_SELECT} WHERE created < ? AND key != ? ORDER BY created LIMIT ?",
                (cutoff, protect, limits.cull_limit),
            ).fetchall()
            victims.update((row[0], EntryInfo(*row)) for row in rows)
        if limits.max_size is not None:
            excess = db.execute("SELECT bytes FROM totals").fetchone()[0] - limits.max_size
            excess -= sum(v.size for v in victims.values())
            if excess > 0 and len(victims) < limits.cull_limit:
                rows = db.execute(
                    f"{_SELECT} WHERE key != ? ORDER BY {LRU_ORDER} LIMIT ?",
                    (protect, limits.cull_limit),
                )
                for row in rows:
                    if excess <= 0 or len(victims) >= limits.cull_limit:
                        break
                    if row[0] not in victims:
                        victims[row[0]] = EntryInfo(*row)
                        excess -= row[1]
        if victims:
            db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in victims])
        return list(victims.values())

    def remove(self, keys: Iterable[str]) -> None:
        """Drop rows, in one transaction (a prune's thousands of keys in one batch)."""
        keys = list(keys)
        if keys:  # one statement over a JSON array: half the time of executemany
            with self._write() as db:
                db.execute(
                    "DELETE FROM entries WHERE key IN (SELECT value FROM json_each(?))",
                    (json.dumps(keys),),
                )

    def select(self, policy: PrunePolicy, now: float) -> list[EntryInfo]:
        """What `policy` removes (as `PrunePolicy.select` says), chosen by one query:
        rows too old, unused or stale, then least recently used ones while the running
        sum of the rest (a window function over `last_used`) exceeds `max_size`."""
        if not self.readonly:
            self._flush_quietly()  # eviction sees the latest use of every entry
        old = None if policy.older_than is None else now - policy.older_than
        unused = None if policy.unused_for is None else now - policy.unused_for
        params = {"old": old, "unused": unused, "stale": policy.stale_for,
                  "format": FORMAT_VERSION, "max": policy.max_size}  # fmt: skip
        query = index_schema.PRUNE if policy.max_size is not None else index_schema.PRUNE_NO_SIZE
        with self._use() as db:
            rows = db.execute(query, params).fetchall()
        return [EntryInfo(*row) for row in rows]

    def unversioned(self) -> list[str]:
        """Keys of rows a migration left without entry format and jaxlib."""
        with self._use() as db:
            return index_schema.needs_backfill(db)

    def set_versions(self, infos: Iterable[EntryInfo]) -> None:
        """Record entry format, jaxlib and platform (nothing else) from `infos`."""
        rows = [(i.format_version, i.jaxlib, i.platform, i.key) for i in infos]
        if rows:
            with self._write() as db:
                db.executemany(
                    "UPDATE entries SET format_version = ?, jaxlib = ?, platform = ?"
                    " WHERE key = ?", rows,
                )  # fmt: skip

    def by_jaxlib(self) -> list[VersionSummary]:
        """Entries, bytes and rewarmed entries per jaxlib version (one GROUP BY)."""
        with self._use() as db:
            rows = db.execute(
                "SELECT jaxlib, count(*), total(size), total(rewarmed_from != '')"
                " FROM entries GROUP BY jaxlib"
            ).fetchall()
        return group_totals(VersionSummary(v, n, int(b), int(r)) for v, n, b, r in rows)

    # -- hits --------------------------------------------------------------------------

    def note_hit(self, key: str, now: float | None = None) -> None:
        """Count a hit in memory; a background thread writes it (reads never write)."""
        if not (self.readonly or self._closed):
            self.hits.note(key, now)

    def flush_hits(self, busy_seconds: float = FLUSH_BUSY_SECONDS) -> None:
        """Write buffered hits now; if that fails (the write lock stayed busy past
        `busy_seconds`) they stay buffered for the next flush and the error is raised."""
        if os.getpid() != self._pid:
            self._after_fork()
        self.hits.flush(busy_seconds)

    def _flush_quietly(self, busy_seconds: float = FLUSH_BUSY_SECONDS) -> None:
        """flush_hits where a failure only costs hit counts: busy or closed is no news,
        anything else is hidden (`counters.hidden`)."""
        try:
            self.flush_hits(busy_seconds)
        except (IndexBusyError, IndexClosedError):
            pass
        except StoreIndexError as exc:
            counters.hidden("index.flush", exc)

    def _write_hits(self, pending: Pending, busy_seconds: float) -> None:
        with self._write(busy_seconds) as db:
            self._apply_hits(db, pending)

    @staticmethod
    def _apply_hits(db: sqlite3.Connection, pending: Pending) -> None:
        db.executemany(
            "UPDATE entries SET hits = hits + ?, last_used = max(last_used, ?) WHERE key = ?",
            [(hits, when, key) for key, (hits, when) in pending.items()],
        )

    def _with_pending(self, row: tuple) -> EntryInfo:
        info = EntryInfo(*row)
        hits, when = self.hits.of(info.key)
        if not hits:
            return info
        return EntryInfo(**{**info.to_dict(), "hits": info.hits + hits,
                            "last_used": max(info.last_used, when)})  # fmt: skip

    # -- reads -------------------------------------------------------------------------

    def get(self, key: str) -> EntryInfo | None:
        with self._use() as db:
            row = db.execute(f"{_SELECT} WHERE key = ?", (key,)).fetchone()
        return self._with_pending(row) if row else None

    def all(self) -> list[EntryInfo]:
        with self._use() as db:
            rows = db.execute(_SELECT).fetchall()
        return [self._with_pending(row) for row in rows]

    def page(self, after: str = "", limit: int = 1000) -> list[EntryInfo]:
        """Up to `limit` rows with keys after `after`, in key order (the primary key's)."""
        with self._use() as db:
            rows = db.execute(
                f"{_SELECT} WHERE key > ? ORDER BY key LIMIT ?", (after, limit)
            ).fetchall()
        return [self._with_pending(row) for row in rows]

    def keys(self) -> set[str]:
        with self._use() as db:
            return {row[0] for row in db.execute("SELECT key FROM entries")}

    def summary(self) -> StoreSummary:
        """The totals the triggers keep (O(1)), plus hits not yet flushed."""
        with self._use() as db:
            row = db.execute(
                "SELECT entries, bytes, payload_bytes, hits, compile_seconds FROM totals"
            ).fetchone()
        pending = self.hits.total()
        entries, size, payload, hits, seconds = row
        return StoreSummary(entries, size, payload, hits + pending, max(0.0, round(seconds, 6)))


def _use_wal(db: sqlite3.Connection, deadline: float) -> None:
    """Switch a new index to write-ahead logging, waiting out other processes' locks.

    SQLite answers a journal-mode change that another connection's lock blocks with
    SQLITE_BUSY at once, without its busy handler: processes opening a new store
    together retry here, until the deadline.
    """
    pause = 0.005
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")  # SQLite may keep its mode: once
            return
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code not in _BUSY_CODES or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def _row(info: EntryInfo) -> tuple:
    values = info.to_dict()
    return tuple(values[c] for c in COLUMNS)


@contextlib.contextmanager
def _errors(index: Index) -> Iterator[None]:
    """sqlite3 errors as StoreIndexError types; damage only for SQLite's own verdict."""
    try:
        yield
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        message = f"{index.path}: {exc}"
        if code is not None and code & 0xFF in _CORRUPT_CODES:
            raise IndexCorruptError(message) from exc
        if index.closed:
            raise IndexClosedError(message) from exc
        if code is not None and code & 0xFF in _BUSY_CODES:
            raise IndexBusyError(message) from exc
        raise StoreIndexError(message) from exc


def _reset_after_fork() -> None:
    for index in list(_OPEN_INDEXES):
        index._after_fork()


def _close_all() -> None:
    """At exit: write the hits still buffered (daemon flushers die with the process)."""
    for index in list(_OPEN_INDEXES):
        try:
            index.close()
        except Exception as exc:  # noqa: BLE001 - the process is ending: hit counts only
            counters.hidden("index.close", exc)


os.register_at_fork(after_in_child=_reset_after_fork)
atexit.register(_close_all)
