"""A cache directory on a local or shared file system.

Layout::

    ROOT/XLACACHE              marker (format version); its absence means "not a cache"
    ROOT/entries/ab/<key>.xlac entry files, sharded by the key's first two hex digits
    ROOT/tmp/                  writes in progress (never read)
    ROOT/index.sqlite          derived index (sizes, times, hits) for listing and eviction

Writes go to tmp/, are fsynced, then renamed into place: a reader sees a whole entry
or none, also when the writer is killed. Many processes may share a directory; the
same key written twice just replaces an identical entry. No lock is held across a
compile, and none at all on the read path.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from xlacache import counters, entry
from xlacache.errors import CorruptEntryError, NotACacheError, ReadOnlyError
from xlacache.key import is_valid_key
from xlacache.stores.base import EntryInfo, PrunePolicy, Store, StoreSummary, VerifyReport
from xlacache.stores.index import Index, is_damaged, move_aside

MARKER = "XLACACHE"
ENTRY_SUFFIX = ".xlac"
STALE_TEMP_SECONDS = 3600.0
_HEADER_PROBE = 64 * 1024


def info_from_header(header: entry.Header, size: int) -> EntryInfo:
    return EntryInfo(
        key=header.key,
        size=size,
        payload_size=header.payload_size,
        created=header.created,
        last_used=header.created,
        hits=0,
        compile_seconds=header.compile_seconds,
        label=header.label,
    )


class LocalStore(Store):
    """Entries as files in a directory, with a SQLite index beside them."""

    def __init__(
        self,
        path: str | os.PathLike,
        readonly: bool = False,
        create: bool = True,
        max_size: int | None = None,
        max_age: float | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = Path(path).expanduser().absolute()
        self.url = str(self.root)
        self.readonly = readonly
        self.max_size = max_size
        self.max_age = max_age
        # fsync each entry and its directory before it counts as stored. Off, a power
        # loss (never a killed process) may lose recent entries or leave torn files,
        # which reads detect (header and body SHA-256) and remove: a miss, not bad data.
        self.fsync = fsync
        self.entries_dir = self.root / "entries"
        self.tmp_dir = self.root / "tmp"
        self.index_path = self.root / "index.sqlite"
        self._age_checked = float("-inf")
        self._index: Index | None = None
        if not (self.root / MARKER).is_file():
            if readonly or not create:
                raise NotACacheError(f"{self.root} is not an xlacache cache directory")
            self._create()
        if not readonly and not os.access(self.root, os.W_OK):
            raise PermissionError(errno.EACCES, "cache directory is not writable", str(self.root))
        self._index = self._open_index()

    # -- Store interface -------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        path = self.entry_path(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            header = entry.verify(blob, key)
        except CorruptEntryError:
            if not self.readonly:
                self._remove([key])
            raise
        self.record_hit(key, header, len(blob))
        return blob

    def put(self, key: str, blob: bytes) -> None:
        if self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        header = entry.read_header(blob)
        if header.key != key or not is_valid_key(key):
            raise CorruptEntryError(f"refusing to store an entry for {header.key} under {key}")
        tmp = self.temp_path(key)
        try:
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            self._install(key, tmp)
        finally:
            tmp.unlink(missing_ok=True)
        self._after_install(header, len(blob))

    def temp_path(self, key: str) -> Path:
        """A fresh name in tmp/ for an entry being written (see put_file)."""
        return self.tmp_dir / f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"

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
            with open(tmp, "rb", buffering=0) as f:
                if header is None:
                    head = f.read(_HEADER_PROBE)
                    need = entry.header_length(head)
                    if need > len(head):
                        head += f.read(need - len(head))
                    header = entry.read_header(head)
                    if size not in (None, need + header.body_size):
                        raise CorruptEntryError(f"{tmp}: its header says another length")
                    size = need + header.body_size
                found = os.fstat(f.fileno()).st_size
                if header.key != key or not is_valid_key(key):
                    raise CorruptEntryError(
                        f"refusing to store an entry for {header.key} under {key}"
                    )
                if (size is not None and found != size) or (
                    found < entry.PRELUDE_SIZE + header.body_size
                ):
                    raise CorruptEntryError(f"{tmp}: {found} bytes, not the entry's length")
                if self.fsync:
                    os.fsync(f.fileno())
            self._install(key, tmp)
        finally:
            tmp.unlink(missing_ok=True)
        self._after_install(header, found)

    def _install(self, key: str, tmp: Path) -> None:
        """Rename a written (and, with fsync on, synced) temp file into place."""
        final = self.entry_path(key)
        try:
            os.replace(tmp, final)
        except FileNotFoundError:  # the shard's first entry (or tmp vanished: raise)
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
        if self.fsync:
            _fsync_dir(final.parent)

    def _after_install(self, header: entry.Header, size: int) -> None:
        self._index_call(lambda ix: ix.upsert([info_from_header(header, size)]))
        self._enforce_limits()

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
        info = self._index_call(lambda ix: ix.get(key))
        return info or self._read_info(self.entry_path(key))

    def list(self) -> Iterator[EntryInfo]:
        if self._index is None:
            return self._scan()
        infos = self._index_call(lambda ix: list(ix.all()))
        return iter(infos) if infos is not None else self._scan()

    def summary(self) -> StoreSummary:
        if self._index is not None:
            result = self._index_call(lambda ix: ix.summary())
            if result is not None:
                return result
        return StoreSummary.of(self._scan())

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        if self.readonly and not dry_run:
            raise ReadOnlyError(f"{self.root} is open read-only")
        doomed = policy.select(self.list(), time.time())
        if doomed and not dry_run:
            self._remove(i.key for i in doomed)
            counters.add("evictions", len(doomed))
        if not dry_run:
            self.remove_stale_temp_files()
        return doomed

    def verify(self, repair: bool = False) -> VerifyReport:
        if repair and self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        report = VerifyReport()
        found: list[EntryInfo] = []
        bad: list[Path] = []
        for path in self._entry_files():
            report.checked += 1
            key = path.name.removesuffix(ENTRY_SUFFIX)
            try:
                if not is_valid_key(key) or path != self.entry_path(key):
                    raise CorruptEntryError(f"stray file {path}")
                blob = path.read_bytes()
                found.append(info_from_header(entry.verify(blob, key), len(blob)))
            except (CorruptEntryError, OSError):
                report.corrupt.append(key)
                bad.append(path)
        report.stale_temp_files = len(self._stale_temp_files(time.time()))
        if repair:
            for path in bad:
                path.unlink(missing_ok=True)
            self._index_call(lambda ix: ix.remove(report.corrupt))
            self.remove_stale_temp_files()
            self._resync_index(found)
            report.repaired = True
        return report

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    # -- helpers ---------------------------------------------------------------------

    def entry_path(self, key: str) -> Path:
        if not is_valid_key(key):
            raise ValueError(f"malformed cache key {key!r}")
        return self.entries_dir / key[:2] / f"{key}{ENTRY_SUFFIX}"

    def rebuild_index(self) -> int:
        """Recreate the index from entry headers; returns the number of entries indexed."""
        if self.readonly:
            raise ReadOnlyError(f"{self.root} is open read-only")
        with FileLock(str(self.root / "index.lock"), timeout=120):
            self.close()
            move_aside(self.index_path)
            self._index = Index(self.index_path)
            infos = list(self._scan())
            self._index.upsert(infos)
        return len(infos)

    def _create(self) -> None:
        try:
            for d in (self.root, self.entries_dir, self.tmp_dir):
                d.mkdir(parents=True, exist_ok=True)
            marker = {"format_version": entry.FORMAT_VERSION, "created": time.time()}
            tmp = self.tmp_dir / f"{MARKER}.{uuid.uuid4().hex[:8]}"
            tmp.write_text(json.dumps(marker) + "\n")
            os.replace(tmp, self.root / MARKER)
        except FileExistsError as exc:
            raise NotACacheError(f"{self.root} is not a directory") from exc

    def _open_index(self) -> Index | None:
        """Open the index; rebuild it if missing or corrupt. None when unusable (read-only)."""
        if self.readonly:
            if not self.index_path.exists():
                return None
            try:
                return Index(self.index_path, readonly=True)
            except sqlite3.Error:
                return None  # listing falls back to scanning headers
        fresh = not self.index_path.exists()
        try:
            index = Index(self.index_path)
        except sqlite3.DatabaseError as exc:
            counters.record_error("index", exc)
            self.rebuild_index()
            return self._index
        except (sqlite3.Error, OSError) as exc:
            counters.record_error("index", exc)
            return None
        if fresh and any(self._entry_files()):
            index.upsert(self._scan())
        return index

    def _index_call(self, fn):
        """Run fn(index); index failures are counted, never raised (the index is derived)."""
        if self._index is None:
            return None
        try:
            return fn(self._index)
        except sqlite3.Error as exc:
            counters.record_error("index", exc)
            if is_damaged(exc) and not self.readonly:
                try:
                    self.rebuild_index()
                except Exception as rebuild_exc:  # noqa: BLE001
                    counters.record_error("index", rebuild_exc)
                    self._index = None
            return None

    def _enforce_limits(self) -> None:
        """Evict least recently used entries over max_size, and entries past max_age."""
        over = self.max_size is not None and (
            (self._index_call(lambda ix: ix.total_size()) or 0) > self.max_size
        )
        age_due = self.max_age is not None and time.monotonic() - self._age_checked > 60
        if over or age_due:
            self._age_checked = time.monotonic()
            self.prune(PrunePolicy(max_size=self.max_size, older_than=self.max_age))

    def record_hit(self, key: str, header: entry.Header, size: int) -> None:
        if self.readonly:
            return
        now = time.time()
        if self._index_call(lambda ix: ix.touch(key, now)) is False:
            info = info_from_header(header, size)
            info = EntryInfo(**{**info.to_dict(), "hits": 1, "last_used": now})
            self._index_call(lambda ix: ix.upsert([info]))

    def _remove(self, keys) -> None:
        keys = list(keys)
        for key in keys:
            self.entry_path(key).unlink(missing_ok=True)
        self._index_call(lambda ix: ix.remove(keys))

    def _entry_files(self) -> Iterator[Path]:
        if not self.entries_dir.is_dir():
            return iter(())
        return (
            p
            for shard in sorted(self.entries_dir.iterdir())
            if shard.is_dir()
            for p in sorted(shard.iterdir())
            if p.name.endswith(ENTRY_SUFFIX)
        )

    def peek(self, key: str) -> bytes | None:
        """The verified entry, read without recording a hit (never touches the index)."""
        try:
            blob = self.entry_path(key).read_bytes()
        except FileNotFoundError:
            return None
        entry.verify(blob, key)
        return blob

    def read_header(self, key: str) -> entry.Header | None:
        """The entry's header, read from the front of its file (never touches the index)."""
        try:
            return self._read_header_file(self.entry_path(key))[0]
        except FileNotFoundError:
            return None

    def _read_header_file(self, path: Path) -> tuple[entry.Header, int]:
        """(header, file size) from the front of an entry file."""
        with open(path, "rb") as f:
            head = f.read(_HEADER_PROBE)
            need = entry.header_length(head)
            if need > len(head):
                head += f.read(need - len(head))
            size = os.fstat(f.fileno()).st_size
        return entry.read_header(head), size

    def _read_info(self, path: Path) -> EntryInfo | None:
        """Entry info from a file's header alone; None for an unreadable one."""
        try:
            return info_from_header(*self._read_header_file(path))
        except (CorruptEntryError, OSError):
            return None

    def _scan(self) -> Iterator[EntryInfo]:
        for path in self._entry_files():
            info = self._read_info(path)
            if info is not None:
                yield info

    def _resync_index(self, present: list[EntryInfo]) -> None:
        def sync(ix: Index) -> None:
            known = ix.keys()
            keys = {i.key for i in present}
            ix.remove(known - keys)
            ix.upsert(i for i in present if i.key not in known)

        self._index_call(sync)

    def _stale_temp_files(self, now: float) -> list[Path]:
        if not self.tmp_dir.is_dir():
            return []
        stale = []
        for p in self.tmp_dir.iterdir():
            try:
                if now - p.stat().st_mtime > STALE_TEMP_SECONDS:
                    stale.append(p)
            except FileNotFoundError:
                continue
        return stale

    def remove_stale_temp_files(self) -> int:
        """Remove writes abandoned in tmp/ (older than STALE_TEMP_SECONDS); how many."""
        if self.readonly:
            return 0
        stale = self._stale_temp_files(time.time())
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)



def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
