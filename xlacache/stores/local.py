"""A cache directory on a local or shared file system: entry files (`stores.files`
has the layout) and a derived SQLite index beside them (`stores.index`).

Writes go to tmp/, are fsynced (as `fsync` says: `stores.durability`), then renamed
into place: a reader sees a whole entry or none, also when the writer is killed. Many
processes may share a directory; the same key written twice just replaces an identical
entry. No lock is held across a compile, and none at all on the read path: a hit reads
and verifies the entry file and counts the hit in memory (`stores.index` writes it
later, in the background).

The index is reconciled with the entry files when a writable store opens (and by
`reconcile`, which the server runs periodically): entry files without a row (a crash
between rename and index write, a full disk) are indexed, rows without a file dropped,
and the difference counted as `index_drift`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from xlacache import counters, entry, misslog
from xlacache.errors import (
    CorruptEntryError,
    NotACacheError,
    ReadOnlyError,
)
from xlacache.key import is_valid_key
from xlacache.stores.base import (
    EntryInfo,
    PrunePolicy,
    Store,
    StoreSummary,
    VerifyReport,
    VersionSummary,
    group_by_jaxlib,
)
from xlacache.stores.dir_leases import DirLeases
from xlacache.stores.files import (
    ENTRY_SUFFIX,
    MARKER,
    STALE_TEMP_SECONDS,
    EntryFiles,
    check_key,
    info_from_header,
    verify_file,
)
from xlacache.stores.index import INDEX_FILE, Index, Limits, LocalIndex

UNLINK_THREADS = 8  # threads that unlink a prune's files
PARALLEL_UNLINKS = 256  # fewer files are unlinked by the calling thread alone

__all__ = ["ENTRY_SUFFIX", "MARKER", "STALE_TEMP_SECONDS", "LocalStore", "info_from_header"]


class LocalStore(Store):
    """Entries as files in a directory, with a SQLite index beside them.

    `create`: a writable store makes the directory when missing; a read-only one accepts
    a directory nobody has made yet (empty until its writer makes it); with create=False
    either must find a cache there.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        readonly: bool = False,
        create: bool = True,
        max_size: int | None = None,
        max_age: float | None = None,
        fsync: bool | str = True,
    ) -> None:
        self.root = Path(path).expanduser().absolute()
        self.url = str(self.root)
        self.readonly = readonly
        self.max_size = max_size
        self.max_age = max_age
        # When entries reach the disk (`stores.durability`): "always" (True, the
        # default here), "background", or "off" (False; the server's default). Short of
        # always, a machine crash (never a killed process) may lose recent entries or
        # leave torn files, which reads detect (header and body SHA-256) and remove.
        self.files = EntryFiles(self.root, fsync)
        self.fsync = self.files.fsync
        self.entries_dir = self.files.entries_dir
        self.tmp_dir = self.files.tmp_dir
        self.index_path = self.root / INDEX_FILE
        self._leases: DirLeases | None = None
        if not self.files.is_cache():
            if not create:
                raise NotACacheError(f"{self.root} is not an xlacache cache directory")
            if not readonly:
                self.files.create()
            # Read-only with create: a directory its writer has not made yet reads as
            # empty until it does (a reader that starts before its writer).
        if not readonly and not os.access(self.root, os.W_OK):
            raise PermissionError(errno.EACCES, "cache directory is not writable", str(self.root))
        self.index = LocalIndex(self.files, readonly)  # opened, rebuilt, reconciled
        if not readonly:
            self.remove_stale_temp_files()

    # -- Store interface -------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        path = self.entry_path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            entry.verify(blob, key)
        except CorruptEntryError:
            if not self.readonly:
                self._remove([key])
            raise
        self.record_hit(key)
        return blob

    def put(self, key: str, blob: bytes) -> None:
        header = entry.read_header(blob)  # checked; the body digest is left to readers
        if header.key != key:
            raise CorruptEntryError(f"refusing to store an entry for {header.key} under {key}")
        if entry.header_length(blob[: entry.PRELUDE_SIZE]) + header.body_size != len(blob):
            raise CorruptEntryError(f"entry {key}: its header says another length")
        self._write(key, (blob,), lambda: header)

    def put_stream(self, key: str, chunks: Iterable[bytes | memoryview]) -> None:
        """Write chunks to a temp file as they come, verify the whole, rename it into place.

        Memory holds one chunk at a time. The entry is checked as it streams (header,
        key, length, body digest: `entry.EntryReader`); a bad one, or a failing
        `chunks` iterator, leaves nothing behind.
        """
        reader = entry.EntryReader(key)

        def checked() -> Iterator[bytes | memoryview]:
            for chunk in chunks:
                reader.feed(chunk)
                yield chunk

        self._write(key, checked(), reader.finish)

    def _write(self, key: str, chunks: Iterable, finish) -> None:
        """Write chunks to a fresh temp file; `finish()` gives the checked header (or
        raises) before the file is synced, renamed into place and indexed."""
        if self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        check_key(key)
        tmp = self.temp_path(key)
        size = 0
        try:
            with open(tmp, "xb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    size += len(chunk)
                header = finish()
                f.flush()
                if self.files.sync_before_install:
                    os.fsync(f.fileno())
            self.files.install(key, tmp)
        finally:
            tmp.unlink(missing_ok=True)
        self._after_install(header, size)

    def temp_path(self, key: str) -> Path:
        """A fresh name in tmp/ for an entry being written (see put_file)."""
        return self.files.temp_path(key)

    def put_file(
        self,
        key: str,
        path: str | os.PathLike,
        header: entry.Header | None = None,
        size: int | None = None,
    ) -> None:
        """Store the complete entry written to `path` (from temp_path) under `key`.

        For writers that stream an entry to disk instead of holding it in memory. The
        caller has verified the body against its header's digest. `header` is the
        entry's header as the caller parsed and checked it from the bytes it wrote, and
        `size` the entry's length; without a header, it is read back from the file and
        checked here. The file's length must match. The file is fsynced, renamed into
        place and indexed; it is consumed either way: renamed, or removed on failure.
        """
        tmp = Path(path)
        try:
            if self.readonly:
                raise ReadOnlyError(f"{self.root} is open read-only")
            if tmp.parent != self.tmp_dir:
                raise ValueError(f"{tmp} is not in {self.tmp_dir}: use temp_path()")
            check_key(key)
            with open(tmp, "rb", buffering=0) as f:
                if header is None:
                    header, need = entry.read_file_header(f)
                    if size not in (None, need + header.body_size):
                        raise CorruptEntryError(f"{tmp}: its header says another length")
                    size = need + header.body_size
                found = os.fstat(f.fileno()).st_size
                if header.key != key:
                    raise CorruptEntryError(
                        f"refusing to store an entry for {header.key} under {key}"
                    )
                if (size is not None and found != size) or (
                    found < entry.PRELUDE_SIZE + header.body_size
                ):
                    raise CorruptEntryError(f"{tmp}: {found} bytes, not the entry's length")
                if self.files.sync_before_install:
                    os.fsync(f.fileno())
            self.files.install(key, tmp)
        finally:
            tmp.unlink(missing_ok=True)
        self._after_install(header, found)

    def _after_install(self, header: entry.Header, size: int) -> None:
        """Index the entry and evict, in one bounded transaction; remove evicted files."""
        info = info_from_header(header, size)
        limits = None
        if self.max_size is not None or self.max_age is not None:
            limits = Limits(max_size=self.max_size, max_age=self.max_age)
        evicted = self.index.call(lambda ix: ix.add(info, limits)) or []
        for victim in evicted:
            self.entry_path(victim.key).unlink(missing_ok=True)
        if evicted:
            counters.add("evictions", len(evicted))

    def contains(self, key: str) -> bool:
        return self.entry_path(key).is_file()

    def delete(self, key: str) -> bool:
        if self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        existed = self.contains(key)
        self._remove([key])
        return existed

    def stat(self, key: str) -> EntryInfo | None:
        if not self.contains(key):
            return None
        info = self.index.call(lambda ix: ix.get(key))
        return info or self.files.read_info(self.entry_path(key))

    def list(self) -> Iterator[EntryInfo]:
        infos = self.index.call(lambda ix: ix.all())
        return iter(infos) if infos is not None else self.scan()

    def list_page(self, after: str = "", limit: int = 1000) -> list[EntryInfo]:
        page = self.index.call(lambda ix: ix.page(after, limit))
        if page is not None:
            return page
        return super().list_page(after, limit)

    def scan(self) -> Iterator[EntryInfo]:
        """Every readable entry, from the entry files' headers (the index not consulted)."""
        return self.files.scan()

    def summary(self) -> StoreSummary:
        result = self.index.call(lambda ix: ix.summary())
        if result is not None:
            return result
        return StoreSummary.of(self.scan())

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        if self.readonly and not dry_run:
            raise ReadOnlyError(f"{self.root} is open read-only")
        now = time.time()
        doomed = self.index.call(lambda ix: ix.select(policy, now))  # one SQL query
        if doomed is None:  # no usable index: judge the entry files' headers
            doomed = policy.select(self.scan(), now)
        if doomed and not dry_run:
            self._remove(i.key for i in doomed)
            counters.add("evictions", len(doomed))
        if not dry_run:
            self.remove_stale_temp_files()
        return doomed

    def by_jaxlib(self) -> list[VersionSummary]:
        found = self.index.call(lambda ix: ix.by_jaxlib())
        return found if found is not None else group_by_jaxlib(self.scan())

    def verify(self, repair: bool = False) -> VerifyReport:
        if repair and self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        report = VerifyReport()
        found: list[EntryInfo] = []
        bad: list[Path] = []
        for path in self.files.misplaced():  # a file where a shard directory belongs
            report.corrupt.append(path.name)
            bad.append(path)
        for path in self.files.entry_files():
            report.checked += 1
            key = path.name.removesuffix(ENTRY_SUFFIX)
            try:
                if not is_valid_key(key) or path != self.entry_path(key):
                    raise CorruptEntryError(f"stray file {path}")
                found.append(info_from_header(*verify_file(path, key)))
            except (CorruptEntryError, OSError):
                report.corrupt.append(key)
                bad.append(path)
        report.stale_temp_files = len(self.files.stale_temp_files())
        if repair:
            for path in bad:
                path.unlink(missing_ok=True)
            self.index.call(lambda ix: ix.remove(report.corrupt))
            self.remove_stale_temp_files()
            self.index.resync(found)
            report.repaired = True
        return report

    @property
    def can_report_misses(self) -> bool:
        return not self.readonly

    def report_miss(self, record: dict) -> None:
        """Append to the directory's miss log (`misslog.MISS_LOG`, bounded in size)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        misslog.append(self.root / misslog.MISS_LOG, misslog.bounded(record))

    def recent_misses(self, limit: int | None = None) -> list[dict]:
        return misslog.read(self.root / misslog.MISS_LOG, limit)

    def exists(self) -> bool:
        return self.files.is_cache()

    def leases(self) -> DirLeases:
        """Leases among the processes sharing this directory (lock files in leases/)."""
        if self._leases is None:
            self._leases = DirLeases(self.root)
        return self._leases

    def sync(self) -> int:
        """fsync entries written but not yet synced (see `stores.durability`: with fsync
        off, those of the last minute); how many. A no-op with fsync always."""
        return 0 if self.readonly else self.files.sync()

    def close(self) -> None:
        if self._leases is not None:
            self._leases.close()
        self.index.close()
        self.files.close()

    # -- index upkeep ------------------------------------------------------------------

    def record_hit(self, key: str) -> None:
        """Count a hit on `key` (in memory; written to the index in the background)."""
        index = self._index
        if index is not None and not self.readonly:
            index.note_hit(key)

    def flush_hits(self) -> None:
        """Write buffered hit counts to the index now (tests, and before reporting)."""
        self.index.call(lambda ix: ix.flush_hits())

    def reconcile(self, counted: bool = True) -> int:
        """Make the index match the entry files (`LocalIndex.reconcile`) and remove
        abandoned temp files; returns how many index rows changed."""
        drift = self.index.reconcile(counted)
        self.remove_stale_temp_files()
        return drift

    @property
    def _index(self) -> Index | None:
        """The open SQLite index (None when unusable)."""
        return self.index.db

    # -- files -------------------------------------------------------------------------

    def entry_path(self, key: str) -> Path:
        return self.files.entry_path(key)

    def open_entry(self, key: str) -> BinaryIO:
        """The entry's file, open for unbuffered reading (FileNotFoundError if absent)."""
        return open(self.entry_path(key), "rb", buffering=0)  # noqa: SIM115 - the caller's

    def peek(self, key: str) -> bytes | None:
        """The verified entry, read without recording a hit (never touches the index)."""
        try:
            blob = self.entry_path(key).read_bytes()
        except FileNotFoundError:
            return None
        entry.verify(blob, key)
        return blob

    def check(self, key: str) -> entry.Header | None:
        """The entry's header once its file passed every check a read makes, streamed
        (memory holds one chunk, never the entry); None if absent, CorruptEntryError if
        it fails. Records no hit and removes nothing."""
        try:
            return verify_file(self.entry_path(key), key)[0]
        except FileNotFoundError:
            return None

    def read_header(self, key: str) -> entry.Header | None:
        """The entry's header, read from the front of its file (never touches the index)."""
        try:
            with open(self.entry_path(key), "rb") as f:
                return entry.read_file_header(f)[0]
        except FileNotFoundError:
            return None

    def _remove(self, keys: Iterable[str]) -> None:
        """Unlink the entry files, then drop their rows in one batched delete.

        Many files are unlinked by UNLINK_THREADS threads at once: an unlink mostly waits
        (the journal, a discard on a virtual disk), and waits overlap (on a loaded ext4
        disk, 20,000 unlinks took 2.3 s in 8 threads, 20 s and more in one).
        """
        keys = [check_key(key) for key in keys]
        base = str(self.entries_dir)

        def unlink(part: list[str]) -> None:
            for key in part:  # the path as plain text: no Path object per key
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{base}/{key[:2]}/{key}{ENTRY_SUFFIX}")

        if len(keys) < PARALLEL_UNLINKS:
            unlink(keys)
        else:
            parts = [keys[i::UNLINK_THREADS] for i in range(UNLINK_THREADS)]
            with ThreadPoolExecutor(UNLINK_THREADS, thread_name_prefix="xlacache-rm") as pool:
                list(pool.map(unlink, parts))
        self.index.call(lambda ix: ix.remove(keys))

    def remove_stale_temp_files(self) -> int:
        """Remove abandoned writes from tmp/ (see EntryFiles.stale_temp_files); how many."""
        return 0 if self.readonly else self.files.remove_stale_temp_files()
