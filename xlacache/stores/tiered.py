"""TieredStore: a local store in front of a remote one.

Reads: local first, then remote; a remote hit is written to the local store. Writes:
local, then queued for upload by one background thread, so training never waits on
the network; when the queue is full the upload is dropped and counted. A sick remote
(unreachable, timing out, refusing our token) degrades the tier to local-only with
one warning (`xlacache.counters.record_error`); the remote's circuit breaker keeps
retries cheap. A remote that refuses our uploads (a read token; a server requiring
signatures we do not make, counted as errors["untrusted"]) is not asked again.
`readonly` never writes anywhere.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator

from xlacache import counters
from xlacache.errors import (
    CacheError,
    CorruptEntryError,
    InvalidRequestError,
    PermissionDeniedError,
    ReadOnlyError,
    UntrustedEntryError,
    kind_of,
)
from xlacache.stores.base import (
    EntryInfo,
    PrunePolicy,
    Store,
    StoreSummary,
    VerifyReport,
    VersionSummary,
)
from xlacache.stores.jobs import JobLog
from xlacache.stores.leases import LeaseTable
from xlacache.stores.local import LocalStore

log = logging.getLogger("xlacache.tiered")

DEFAULT_QUEUE_ENTRIES = 64
DEFAULT_QUEUE_BYTES = 2 * 1024**3
CLOSE_FLUSH_SECONDS = 10.0


def tiers(store: Store) -> tuple[Store | None, Store | None]:
    """(local directory, shared store) of a cache's store (a tier of both, a directory,
    or a shared store alone); either may be None. The one place a store is split."""
    if isinstance(store, TieredStore):
        return store.local, store.remote
    if isinstance(store, LocalStore):
        return store, None
    return None, store


class TieredStore(Store):
    """Local-then-remote store; the local tier is the one listed, summarized and pruned."""

    def __init__(
        self,
        local: Store,
        remote: Store,
        readonly: bool = False,
        *,
        queue_entries: int = DEFAULT_QUEUE_ENTRIES,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
        close_flush_seconds: float = CLOSE_FLUSH_SECONDS,
    ) -> None:
        self.local = local
        self.remote = remote
        self.readonly = readonly
        self.url = f"{local.url} + {remote.url}"
        self.queue_entries = queue_entries
        self.queue_bytes = queue_bytes
        self.close_flush_seconds = close_flush_seconds
        self._queue: deque[tuple[str, bytes]] = deque()
        self._queued_bytes = 0
        self._busy = 0  # uploads taken off the queue but not finished
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._uploads_allowed = not (readonly or remote.readonly)

    # -- reads -------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        try:
            blob = self.local.get(key)
        except CorruptEntryError as exc:  # removed locally; the remote may have a good copy
            counters.record_error(exc.kind, exc)
            blob = None
        if blob is not None:
            return blob
        blob = self._remote_get(key)
        if blob is None:
            return None
        counters.add("remote_hits")
        if not (self.readonly or self.local.readonly):
            try:
                self.local.put(key, blob)
                self.local.record_hit(key)  # the local copy was used: last use, a hit
            except (CacheError, OSError) as exc:
                counters.record_error(kind_of(exc), exc)
        return blob

    def _remote_get(self, key: str) -> bytes | None:
        try:
            return self.remote.get(key)
        except (CacheError, OSError) as exc:
            counters.record_error(kind_of(exc), exc)
            return None

    def contains(self, key: str) -> bool:
        if self.local.contains(key):
            return True
        try:
            return self.remote.contains(key)
        except (CacheError, OSError) as exc:
            counters.record_error(kind_of(exc), exc)
            return False

    def stat(self, key: str) -> EntryInfo | None:
        info = self.local.stat(key)
        if info is not None:
            return info
        try:
            return self.remote.stat(key)
        except (CacheError, OSError) as exc:
            counters.record_error(kind_of(exc), exc)
            return None

    def list(self) -> Iterator[EntryInfo]:
        return self.local.list()

    def summary(self) -> StoreSummary:
        return self.local.summary()

    def by_jaxlib(self) -> list[VersionSummary]:
        return self.local.by_jaxlib()  # as summary: the local tier's (an index's SQL)

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        if self.readonly and not dry_run:
            raise ReadOnlyError(f"{self.url} is open read-only")
        return self.local.prune(policy, dry_run=dry_run)

    def verify(self, repair: bool = False) -> VerifyReport:
        if self.readonly and repair:
            raise ReadOnlyError(f"{self.url} is open read-only")
        return self.local.verify(repair=repair)

    @property
    def can_report_misses(self) -> bool:
        return not self.readonly and self.local.can_report_misses

    def report_miss(self, record: dict) -> None:
        """The local tier's, as listing is (an explainer reports to the remote itself)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")
        self.local.report_miss(record)

    def recent_misses(self, limit: int | None = None) -> list[dict]:
        return self.local.recent_misses(limit)

    # -- writes ------------------------------------------------------------------------

    def put(self, key: str, blob: bytes) -> None:
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")
        self._put_local_then(key, blob, self._enqueue)

    def publish(self, key: str, blob: bytes) -> None:
        """Store locally and upload now, in this thread: on return the remote has it
        (unless uploading failed, which is counted as for background uploads)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")
        self._put_local_then(key, blob, self._upload)

    def _put_local_then(self, key: str, blob: bytes, upload) -> None:
        """Store locally, then `upload`: also when the local store failed (a full local
        disk should not keep the entry from other workers), unless it refused the entry
        itself (under another key, malformed): no store would take that."""
        try:
            if not self.local.readonly:
                self.local.put(key, blob)
        except (CorruptEntryError, InvalidRequestError):
            raise
        except BaseException:
            upload(key, blob)
            raise
        upload(key, blob)

    def leases(self) -> LeaseTable | None:
        """The remote's leases (every process sharing the remote), else the local tier's."""
        try:
            table = self.remote.leases()
        except (CacheError, OSError) as exc:
            counters.record_error(kind_of(exc), exc)
            table = None
        return table if table is not None else self.local.leases()

    def jobs(self) -> JobLog | None:
        """The remote's job manifests (what a job's workers share)."""
        return self.remote.jobs()

    def delete(self, key: str) -> bool:
        """Delete locally; on the remote too where our token may (admin)."""
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")
        existed = self.local.delete(key) if not self.local.readonly else False
        if not self.remote.readonly:
            try:
                existed = self.remote.delete(key) or existed
            except (CacheError, OSError) as exc:
                log.debug("remote delete of %s refused: %s", key, exc)
        return existed

    def _enqueue(self, key: str, blob: bytes) -> None:
        if not self._uploads_allowed:
            return
        with self._cond:
            full = (
                len(self._queue) >= self.queue_entries
                or self._queued_bytes + len(blob) > self.queue_bytes
            )
            if full or self._closing:
                counters.add("uploads_dropped")
                return
            self._queue.append((key, blob))
            self._queued_bytes += len(blob)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._upload_loop, name="xlacache-upload", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    @counters.background("upload")
    def _upload_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                key, blob = self._queue.popleft()
                self._queued_bytes -= len(blob)
                self._busy += 1
            try:
                self._upload(key, blob)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _upload(self, key: str, blob: bytes) -> None:
        if not self._uploads_allowed:
            counters.add("uploads_dropped")
            return
        try:
            if self.remote.contains(key):
                return
            self.remote.put(key, blob)
            counters.add("uploads")
        except ReadOnlyError:
            self._uploads_allowed = False
        except (CacheError, OSError) as exc:
            if isinstance(exc, (PermissionDeniedError, UntrustedEntryError)):
                # A read token, or a server that requires signatures this process does not
                # make (it signs every entry alike): stop trying for this process.
                self._uploads_allowed = False
            counters.add("uploads_dropped")
            counters.record_error(kind_of(exc), exc)
        except Exception as exc:  # noqa: BLE001 - the upload thread must never die
            counters.add("uploads_dropped")
            counters.record_error("internal", exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued upload is done; False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self) -> None:
        """Give queued uploads a bounded time to finish, then close both tiers."""
        if not self.flush(self.close_flush_seconds):
            with self._cond:
                dropped = len(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
            if dropped:
                counters.add("uploads_dropped", dropped)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self.remote.close()
        self.local.close()
