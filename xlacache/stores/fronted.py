"""FrontedStore: a shared remote store (a bucket) with a local directory in front of it.

What ``xlacache serve --store gs://bucket/prefix --cache-dir DIR`` serves, so that
several stateless server replicas share one bucket (as bazel-remote's GCS proxy does):

- **Read-through.** An entry missing from the local directory is fetched from the
  remote (verified there), kept on local disk and served from it; concurrent requests
  for one key fetch it once (`coalesced_reads` counts the requests that waited).
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
from collections.abc import Iterator
from typing import BinaryIO

from xlacache import counters, entry
from xlacache.errors import CacheError, kind_of
from xlacache.stores.base import (
    EntryInfo,
    PrunePolicy,
    Store,
    StoreSummary,
    VerifyReport,
    VersionSummary,
)
from xlacache.stores.leases import LeaseTable
from xlacache.stores.local import LocalStore
from xlacache.stores.tiered import TieredStore

FETCH_WAIT = 300.0  # seconds a read waits for another's fetch of the same key


class FrontedStore(TieredStore):
    """A local directory in front of a remote store: read-through, write-through."""

    local: LocalStore

    def __init__(self, local: LocalStore, remote: Store) -> None:
        super().__init__(local, remote)
        self._fetching: dict[str, threading.Event] = {}  # keys being read through
        self._fetch_lock = threading.Lock()

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
        FileNotFoundError when neither has it. Concurrent requests for one missing key
        fetch it once: the others wait for that fetch (counted as coalesced_reads)."""
        try:
            return self.local.open_entry(key)
        except FileNotFoundError:
            pass
        with self._fetch_lock:
            fetching = self._fetching.get(key)
            leader = fetching is None
            if leader:
                fetching = self._fetching[key] = threading.Event()
        if not leader:
            counters.add("coalesced_reads")
            fetching.wait(FETCH_WAIT)
            try:
                return self.local.open_entry(key)  # the leader's fetch
            except FileNotFoundError:
                pass  # it found nothing, or could not keep it: look for ourselves
        try:
            return self._fetch(key)
        finally:
            if leader:
                with self._fetch_lock:
                    del self._fetching[key]
                fetching.set()

    def _fetch(self, key: str) -> BinaryIO:
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

    def by_jaxlib(self) -> list[VersionSummary]:
        return self.remote.by_jaxlib()

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
