"""The on-disk layout of a local store: where entry and temp files live, and how they move.

Layout::

    ROOT/XLACACHE              marker (format version); its absence means "not a cache"
    ROOT/entries/ab/<key>.xlac entry files, sharded by the key's first two hex digits
    ROOT/tmp/                  writes in progress (never read)
    ROOT/leases/<key>.lock     single-flight leases, flock'ed by their holder (stores/leases.py)
    ROOT/index.sqlite          derived index (stores/index.py)

Temp files are named `<key>.<host>-<pid>.<random>.tmp`: one whose writer was a process
of this host that has exited is abandoned at once, any other after an hour.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

from xlacache import entry
from xlacache.errors import CorruptEntryError, NotACacheError
from xlacache.key import check_key, is_valid_key
from xlacache.stores import durability
from xlacache.stores.base import EntryInfo

MARKER = "XLACACHE"
ENTRY_SUFFIX = ".xlac"
TEMP_SUFFIX = ".tmp"
STALE_TEMP_SECONDS = 3600.0
_HOST = f"{zlib.crc32(socket.gethostname().encode()):08x}"


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
        format_version=header.format_version,
        jaxlib=header.jaxlib,
        platform=header.platform,
        rewarmed_from=header.rewarmed_from,
    )


def verify_file(path: Path, key: str, chunk: int = 1024 * 1024) -> tuple[entry.Header, int]:
    """Stream an entry file through every check a read makes (header, key, length, body
    SHA-256), holding one chunk: (its header, its size). CorruptEntryError if it fails."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        reader = entry.EntryReader(key, size)
        buffer = bytearray(min(chunk, max(size, 1)))
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            reader.feed(view[:n])
        return reader.finish(), size


class EntryFiles:
    """A store directory's files: paths, listing, temp files, atomic installs (synced as
    `fsync` says: `stores.durability`)."""

    def __init__(self, root: Path, fsync: bool | str = True) -> None:
        self.root = root
        self.fsync = durability.fsync_mode(fsync)
        self._syncer = durability.Syncer(self.fsync)
        self.entries_dir = root / "entries"
        self.tmp_dir = root / "tmp"

    def is_cache(self) -> bool:
        return (self.root / MARKER).is_file()

    def create(self) -> None:
        """Make the directories and write the marker (last, atomically)."""
        try:
            for d in (self.root, self.entries_dir, self.tmp_dir):
                d.mkdir(parents=True, exist_ok=True)
            marker = {"format_version": entry.FORMAT_VERSION, "created": time.time()}
            tmp = self.tmp_dir / f"{MARKER}.{uuid.uuid4().hex[:8]}"
            tmp.write_text(json.dumps(marker) + "\n")
            os.replace(tmp, self.root / MARKER)
        except FileExistsError as exc:
            raise NotACacheError(f"{self.root} is not a directory") from exc

    def entry_path(self, key: str) -> Path:
        check_key(key)
        return self.entries_dir / key[:2] / f"{key}{ENTRY_SUFFIX}"

    def temp_path(self, key: str) -> Path:
        """A fresh name in tmp/ for an entry being written by this process."""
        writer = f"{_HOST}-{os.getpid()}"
        return self.tmp_dir / f"{key}.{writer}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"

    @property
    def sync_before_install(self) -> bool:
        """Whether writers fsync a temp file before `install` renames it."""
        return self.fsync == durability.ALWAYS

    def install(self, key: str, tmp: Path) -> None:
        """Rename a written temp file into place (synced before, with fsync=always), then
        sync its directory now (always), soon (background) or on `sync()` (off)."""
        final = self.entry_path(key)
        try:
            os.replace(tmp, final)
        except FileNotFoundError:  # the shard's first entry (or tmp vanished: raise)
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
        if self.fsync == durability.ALWAYS:
            _fsync_dir(final.parent)
        else:
            self._syncer.add(final)

    def sync(self) -> int:
        """fsync the entries not yet synced (background) or recently written (off)."""
        return self._syncer.flush()

    def close(self) -> None:
        """Stop background syncing, after syncing what it still holds."""
        self._syncer.close()

    # -- listing -----------------------------------------------------------------------

    def _shards(self) -> list[os.DirEntry]:
        try:
            with os.scandir(self.entries_dir) as it:
                return sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            return []

    def misplaced(self) -> Iterator[Path]:
        """Files where a shard directory belongs."""
        return (Path(e.path) for e in self._shards() if not e.is_dir())

    def entry_files(self) -> Iterator[Path]:
        """Every *.xlac file in a shard, well placed or not (verify judges them)."""
        for shard in self._shards():
            if shard.is_dir():
                yield from sorted(
                    p for p in Path(shard.path).iterdir() if p.name.endswith(ENTRY_SUFFIX)
                )

    def keys(self) -> Iterator[str]:
        """Keys of the well-placed entry files (names only: nothing is opened)."""
        for shard in self._shards():
            if not shard.is_dir():
                continue
            with os.scandir(shard.path) as it:
                for e in it:
                    key = e.name.removesuffix(ENTRY_SUFFIX)
                    if e.name != key and is_valid_key(key) and key[:2] == shard.name:
                        yield key

    def read_info(self, path: Path) -> EntryInfo | None:
        """Entry info from a file's header alone; None for an unreadable one."""
        try:
            with open(path, "rb") as f:
                header, _ = entry.read_file_header(f)
                size = os.fstat(f.fileno()).st_size
            return info_from_header(header, size)
        except (CorruptEntryError, OSError):
            return None

    def scan(self) -> Iterator[EntryInfo]:
        """Every readable entry, from the entry files' headers."""
        for path in self.entry_files():
            info = self.read_info(path)
            if info is not None:
                yield info

    # -- temp files --------------------------------------------------------------------

    def stale_temp_files(self, now: float | None = None) -> list[Path]:
        """Temp files nobody will finish: old ones, and those whose writer is gone."""
        if not self.tmp_dir.is_dir():
            return []
        now = time.time() if now is None else now
        stale = []
        for p in self.tmp_dir.iterdir():
            try:
                old = now - p.stat().st_mtime > STALE_TEMP_SECONDS
            except FileNotFoundError:
                continue
            if old or _writer_is_gone(p.name):
                stale.append(p)
        return stale

    def remove_stale_temp_files(self) -> int:
        stale = self.stale_temp_files()
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)


def _writer_is_gone(name: str) -> bool:
    """Whether a temp file's name says a process of this host wrote it and has exited."""
    parts = name.split(".")
    if len(parts) != 4 or not name.endswith(TEMP_SUFFIX):
        return False
    host, _, pid = parts[1].partition("-")
    if host != _HOST or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, but not ours to signal
        return False
    return False


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse to sync a directory
        durability.fsync_path(path)
