"""FrontedStore: a shared remote store (a bucket) with a local directory in front of it.

What ``xlacache serve --store gs://bucket/prefix --cache-dir DIR`` serves, so that
several stateless server replicas share one bucket (as bazel-remote's GCS proxy does):

- **Read-through.** An entry missing from the local directory is fetched from the
  remote (verified there), kept on local disk and served from it; concurrent requests
  for one key fetch it once.
- **Write-through.** An entry is stored on local disk, then in the remote, before a
  write returns: a server acknowledges a Put only once the bucket has it. If the
  remote refuses or fails, the local copy is removed and the write fails with the
  remote's error, so no replica serves what the others cannot see.
- **The remote is the truth.** stat, list, summary, prune and verify answer from the
  remote (prune and verify --repair drop local copies of what they remove); the local
  directory is a cache of it, bounded by its own max_size (least recently used go).

The local directory's file-level calls (`open_entry`, `temp_path`, `put_file`,
`record_hit`, `reconcile`), what the server's transfers stream with, work as on a
`LocalStore`.
"""

from __future__ import annotations

import tempfile
import threading
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from xlacache import counters, entry
from xlacache.errors import CacheError, kind_of
from xlacache.stores.base import EntryInfo, PrunePolicy, Store, StoreSummary, VerifyReport
from xlacache.stores.leases import LeaseTable
from xlacache.stores.local import LocalStore
from xlacache.stores.tiered import TieredStore

_FETCH_LOCKS = 64  # striped locks: concurrent reads of one missing key fetch it once


class FrontedStore(TieredStore):
    """A local directory in front of a remote store: read-through, write-through."""

    local: LocalStore

    def __init__(self, local: LocalStore, remote: Store) -> None:
        super().__init__(local, remote)
        self._fetch_locks = [threading.Lock() for _ in range(_FETCH_LOCKS)]

    # -- writes: through to the remote ---------------------------------------------------

    def put(self, key: str, blob: bytes) -> None:
        self.local.put(key, blob)
        self._through(key, blob)

    def publish(self, key: str, blob: bytes) -> None:
        self.put(key, blob)

    def put_file(self, key: str, path, header: entry.Header | None = None, size=None) -> None:
        """`LocalStore.put_file`, then the entry's bytes to the remote."""
        self.local.put_file(key, path, header, size)
        try:
            blob = self.local.entry_path(key).read_bytes()
        except OSError:
            self.local.delete(key)
            raise
        self._through(key, blob)

    def _through(self, key: str, blob: bytes) -> None:
        try:
            self.remote.put(key, blob)
        except BaseException:
            self.local.delete(key)  # what the remote lacks is not served from here
            raise
        counters.add("uploads")

    def delete(self, key: str) -> bool:
        """Delete the local copy and the remote's (whose failure is raised: it is the truth)."""
        existed = self.local.delete(key)
        return self.remote.delete(key) or existed

    # -- reads: through from the remote ---------------------------------------------------

    def open_entry(self, key: str) -> BinaryIO:
        """The entry file for streaming, fetched from the remote first if not on disk;
        FileNotFoundError when neither has it."""
        try:
            return self.local.open_entry(key)
        except FileNotFoundError:
            pass
        with self._fetch_locks[zlib.crc32(key.encode()) % _FETCH_LOCKS]:
            try:
                return self.local.open_entry(key)  # fetched by another request meanwhile
            except FileNotFoundError:
                pass
            blob = self._remote_get(key)
            if blob is None:
                raise FileNotFoundError(key)
            counters.add("remote_hits")
            try:
                self.local.put(key, blob)
                return self.local.open_entry(key)
            except (CacheError, OSError) as exc:  # a full disk: serve it from memory
                counters.record_error(kind_of(exc), exc)
                return _spooled(blob)

    # -- queries: the remote is the truth --------------------------------------------------

    def stat(self, key: str) -> EntryInfo | None:
        return self.remote.stat(key)

    def list(self) -> Iterator[EntryInfo]:
        return self.remote.list()

    def list_page(self, after: str = "", limit: int = 1000) -> list[EntryInfo]:
        return self.remote.list_page(after, limit)

    def scan(self) -> Iterator[EntryInfo]:
        return self.remote.scan()

    def summary(self) -> StoreSummary:
        return self.remote.summary()

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        removed = self.remote.prune(policy, dry_run=dry_run)
        if not dry_run:
            for info in removed:
                self.local.delete(info.key)
        return removed

    def verify(self, repair: bool = False) -> VerifyReport:
        report = self.remote.verify(repair=repair)
        local = self.local.verify(repair=repair)
        report.corrupt += [k for k in local.corrupt if k not in report.corrupt]
        report.stale_temp_files = local.stale_temp_files
        return report

    def leases(self) -> LeaseTable | None:
        return self.remote.leases()

    # -- the local directory's file-level calls --------------------------------------------

    def entry_path(self, key: str):
        return self.local.entry_path(key)

    def temp_path(self, key: str):
        return self.local.temp_path(key)

    def check(self, key: str) -> entry.Header | None:
        """Check the copy this server serves (the local one); see `LocalStore.check`."""
        return self.local.check(key)

    def record_hit(self, key: str) -> None:
        self.local.record_hit(key)

    def reconcile(self, counted: bool = True) -> int:
        return self.local.reconcile(counted)

    def flush_hits(self) -> None:
        self.local.flush_hits()

    def close(self) -> None:
        self.remote.close()
        self.local.close()


def _spooled(blob: bytes) -> BinaryIO:
    """An unnamed temp file (in the system's temp directory) holding `blob`, at its start."""
    f = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    try:
        f.write(blob)
        f.flush()
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f
