"""GCSStore: a cache in a Google Cloud Storage bucket, ``gs://bucket/prefix``, via gcsfs.

Layout (the same entries, under the same names, as a local cache directory)::

    PREFIX/XLACACHE                  marker (format version)
    PREFIX/entries/ab/<key>.xlac     entries, sharded by the key's first two hex digits
    PREFIX/misses/<ns>-<rand>.json   recorded misses (`xlacache explain`), about
                                     MAX_MISS_OBJECTS of the newest, trimmed by writers
    PREFIX/leases/<key>              single-flight leases (stores/gcs_leases.py)
    PREFIX/jobs/<job>.json           what each job used last time (stores/jobs.py)

Each entry object carries custom metadata (format, payload-size, created,
compile-seconds, label, jaxlib, platform, and once used: last-used, hits), so listing,
stats and pruning read no bodies (`prune --stale` reads the header of an object written
before jaxlib was recorded).

Semantics:
- Create-once: an entry is written with ifGenerationMatch=0 in one request, so a key
  is created once and never overwritten with other bytes; writing an existing key is
  a no-op. Many writers racing on one key leave one valid entry.
- Verified reads: a get checks the whole entry; a corrupt object raises
  CorruptEntryError and is deleted (that generation only) unless read-only.
- Listings may lag behind writes; get, contains and stat address objects by name
  and see a fresh entry at once.
- last_used / hits: a hit does not write. A writable store records use at most once
  per `touch_interval` (default 1 h) per entry, as a background metadata patch
  (needs storage.objects.update, e.g. roles/storage.objectUser; refused, it stops);
  `hits` counts those records. prune --unused-for is accurate to the interval.
- Read-only issues no write request at all (no marker, no deletes, no touches, no
  miss records).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from xlacache import counters, entry, misslog
from xlacache.errors import (
    CacheError,
    CorruptEntryError,
    NotACacheError,
    PermissionDeniedError,
    ReadOnlyError,
)
from xlacache.key import check_key, is_valid_key
from xlacache.stores.base import EntryInfo, PrunePolicy, Store, StoreSummary, VerifyReport
from xlacache.stores.gcs_leases import GCSLeases
from xlacache.stores.gcs_objects import DEFAULT_TIMEOUT, GCSObjects, ObjectInfo, RetryPolicy
from xlacache.stores.jobs import GCSJobs
from xlacache.stores.local import ENTRY_SUFFIX, MARKER

ENTRIES = "entries/"
MISSES = "misses/"
MAX_MISS_OBJECTS = 1000  # miss records kept (about: writers trim every TRIM_MISSES_EVERY)
TRIM_MISSES_EVERY = 16
DEFAULT_TOUCH_INTERVAL = 3600.0
LABEL_LIMIT = 1024  # metadata characters kept of a label (the entry header has it all)
_PRECHECK_BYTES = 1 << 20  # larger entries are looked for before being uploaded
_TOUCH_WAIT_ON_CLOSE = 5.0
_TOUCH_QUEUE = 1024  # use records waiting beyond this are dropped


def entry_name(key: str) -> str:
    """The object name of an entry, relative to the store's prefix."""
    check_key(key)
    return f"{ENTRIES}{key[:2]}/{key}{ENTRY_SUFFIX}"


def key_of(name: str) -> str | None:
    """The key an entry object name holds, or None for a stray object."""
    shard, _, rest = name[len(ENTRIES) :].partition("/")
    key = rest.removesuffix(ENTRY_SUFFIX)
    if name.startswith(ENTRIES) and is_valid_key(key) and shard == key[:2]:
        return key if name == entry_name(key) else None
    return None


def entry_metadata(header: entry.Header) -> dict[str, str]:
    """The custom metadata an entry object carries (what listing needs)."""
    return {
        "format": str(header.format_version),
        "payload-size": str(header.payload_size),
        "created": repr(header.created),
        "compile-seconds": repr(header.compile_seconds),
        "label": header.label[:LABEL_LIMIT],
        "jaxlib": header.jaxlib,
        "platform": header.platform,
        "rewarmed-from": header.rewarmed_from,
    }


def _number(metadata: dict, name: str, default: float) -> float:
    try:
        return float(metadata[name])
    except (KeyError, TypeError, ValueError):
        return default


def info_from_object(key: str, obj: ObjectInfo) -> EntryInfo:
    meta = obj.metadata
    created = _number(meta, "created", obj.created or 0.0)
    return EntryInfo(
        key=key,
        size=obj.size,
        payload_size=int(_number(meta, "payload-size", 0)),
        created=created,
        last_used=max(created, _number(meta, "last-used", created)),
        hits=int(_number(meta, "hits", 0)),
        compile_seconds=_number(meta, "compile-seconds", 0.0),
        label=str(meta.get("label", "")),
        format_version=int(_number(meta, "format", 0)),
        jaxlib=str(meta.get("jaxlib", "")),
        platform=str(meta.get("platform", "")),
        rewarmed_from=str(meta.get("rewarmed-from", "")),
    )


class GCSStore(Store):
    """Entries as objects under ``gs://bucket/prefix``.

    `create`: a writable store creates the marker when missing; a read-only one with
    create=True accepts a prefix nobody has written yet (a reader that starts before
    its writer); with create=False (the CLI) the prefix must hold the marker or nothing
    at all (an empty cache, before its first write), and no marker is made. `token`
    goes to gcsfs (a key file, "anon", "google_default", ...); unset, anonymous against an emulator
    (STORAGE_EMULATOR_HOST), else Application Default Credentials. `timeout` is the
    deadline of a metadata call, retries included; a transfer adds its size over
    `min_rate` (bytes/s). `touch_interval` (seconds; 0 turns it off) rate-limits the
    recording of use.
    """

    def __init__(
        self,
        url: str,
        readonly: bool = False,
        create: bool = True,
        *,
        token=None,
        endpoint_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        min_rate: float = 4 * 1024 * 1024,
        retry: RetryPolicy | None = None,
        touch_interval: float = DEFAULT_TOUCH_INTERVAL,
        page_size: int = 1000,
        objects: GCSObjects | None = None,
    ) -> None:
        self.objects = objects or GCSObjects(
            url, token=token, endpoint_url=endpoint_url, timeout=timeout, retry=retry
        )
        self.url = self.objects.url
        self.readonly = readonly
        self.timeout = timeout
        self.min_rate = min_rate
        self.touch_interval = touch_interval
        self.page_size = page_size
        self._touched: dict[str, float] = {}
        self._touch_lock = threading.Lock()
        self._touch_queue: queue.Queue = queue.Queue(_TOUCH_QUEUE)
        self._toucher: threading.Thread | None = None
        self._touch_allowed = not readonly and touch_interval > 0
        self._miss_reports = 0
        if self.objects.stat(MARKER) is None:
            if not create:
                if not self.objects.bucket_exists():
                    raise NotACacheError(f"{self.url}: no such bucket {self.objects.bucket!r}")
                if next(iter(self.objects.list(page_size=1)), None) is not None:
                    raise NotACacheError(f"{self.url} is not an xlacache cache (no {MARKER})")
                # An empty prefix is an empty cache: nothing written there yet.
            elif not readonly:
                self._create_marker()

    # -- Store interface ---------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        found = self._read(key)
        if found is None:
            return None
        self._note_use(key, found[1])
        return found[0]

    def peek(self, key: str) -> bytes | None:
        """The verified entry without recording a use: prefetch (`record_hit` records it
        later) and tools (export, sign, diff)."""
        found = self._read(key)
        return None if found is None else found[0]

    def record_hit(self, key: str) -> None:
        """Record a use of an entry read with `peek` (as a `get` would)."""
        self._note_use(key, ObjectInfo(entry_name(key), 0, 0))

    def _read(self, key: str) -> tuple[bytes, ObjectInfo] | None:
        name = entry_name(key)
        found = self.objects.read(name, deadline=self._transfer_deadline(None))
        if found is None:
            return None
        blob, obj = found
        try:
            entry.verify(blob, key)
        except CorruptEntryError:
            if not self.readonly:
                self._delete_quietly(name, obj.generation)
            raise
        return blob, obj

    def put(self, key: str, blob: bytes) -> None:
        self._writable()
        header = entry.read_header(blob)
        if header.key != key or not is_valid_key(key):
            raise CorruptEntryError(f"refusing to store an entry for {header.key} under {key}")
        name = entry_name(key)
        if len(blob) >= _PRECHECK_BYTES and self.objects.stat(name) is not None:
            return  # create-once: already there (spares the upload)
        self.objects.create(
            name, blob, entry_metadata(header), deadline=self._transfer_deadline(len(blob))
        )

    def contains(self, key: str) -> bool:
        return self.objects.stat(entry_name(key)) is not None

    def delete(self, key: str) -> bool:
        self._writable()
        return self.objects.delete(entry_name(key))

    def stat(self, key: str) -> EntryInfo | None:
        obj = self.objects.stat(entry_name(key))
        return None if obj is None else info_from_object(key, obj)

    def list(self, page_size: int | None = None) -> Iterator[EntryInfo]:
        return (info for info, _ in self._entries(page_size))

    def summary(self) -> StoreSummary:
        return StoreSummary.of(self.list())

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        if not dry_run:
            self._writable()
        listed = {info.key: (info, obj.generation) for info, obj in self._entries()}
        if policy.stale_for is not None:  # objects older than their jaxlib metadata
            unknown = [info for info, _ in listed.values() if not info.jaxlib]
            for info, header in zip(unknown, self._for_each(self._header, unknown), strict=True):
                if header is not None:
                    listed[info.key] = (replace(info, jaxlib=header.jaxlib), listed[info.key][1])
        doomed = policy.select((info for info, _ in listed.values()), time.time())
        if doomed and not dry_run:  # only the generation listed: an entry made since stays
            self._for_each(
                lambda i: self.objects.delete(entry_name(i.key), listed[i.key][1]), doomed
            )
            counters.add("evictions", len(doomed))
        return doomed

    def verify(self, repair: bool = False) -> VerifyReport:
        """Read and check every object under entries/; stray objects count as corrupt.

        With repair, corrupt objects are deleted (the generation that was checked)."""
        if repair:
            self._writable()
        objs = list(self.objects.list(ENTRIES, self.page_size))
        results = self._for_each(self._check, objs)
        report = VerifyReport(checked=len(objs))
        for obj, ok in zip(objs, results, strict=True):
            if not ok:
                report.corrupt.append(key_of(obj.name) or obj.name)
                if repair:
                    self.objects.delete(obj.name, generation=obj.generation)
        report.repaired = repair
        return report

    # -- recorded misses -----------------------------------------------------------------

    @property
    def can_report_misses(self) -> bool:
        return not self.readonly

    def report_miss(self, record: dict) -> None:
        """One small object per miss under misses/, named by time so names sort by age.

        A writer trims the oldest beyond MAX_MISS_OBJECTS on its first report and every
        TRIM_MISSES_EVERY after; a read-only store writes nothing (ReadOnlyError)."""
        self._writable()
        data = misslog.encode(misslog.bounded(record)).encode()
        name = f"{MISSES}{time.time_ns():020d}-{os.urandom(4).hex()}.json"
        self.objects.create(name, data, deadline=self.timeout)
        if self._miss_reports % TRIM_MISSES_EVERY == 0:
            self._trim_misses()
        self._miss_reports += 1

    def _trim_misses(self) -> None:
        names = sorted(o.name for o in self.objects.list(MISSES, self.page_size))
        excess = names[: max(0, len(names) - MAX_MISS_OBJECTS)]
        self._for_each(lambda name: self.objects.delete(name, deadline=self.timeout), excess)

    def recent_misses(self, limit: int | None = None) -> list[dict]:
        names = sorted((o.name for o in self.objects.list(MISSES, self.page_size)), reverse=True)
        found = self._for_each(
            lambda name: self.objects.read(name, deadline=self.timeout), names[:limit]
        )
        return misslog.newest_first(r for f in found if f and (r := misslog.decode(f[0])))

    def leases(self) -> GCSLeases:
        """Lease objects under leases/ (what every client and server replica agrees on)."""
        return GCSLeases(self.objects, timeout=self.timeout)

    def jobs(self) -> GCSJobs:
        """Job manifests under jobs/ (`xlacache.stores.jobs`)."""
        return GCSJobs(self.objects, timeout=self.timeout)

    def close(self) -> None:
        """Give pending use records a bounded time to finish."""
        with self._touch_lock:
            toucher, self._toucher = self._toucher, None
        if toucher is not None:
            try:
                self._touch_queue.put(None, timeout=_TOUCH_WAIT_ON_CLOSE)
            except queue.Full:
                return  # the daemon thread goes with the process
            toucher.join(_TOUCH_WAIT_ON_CLOSE)

    # -- helpers -------------------------------------------------------------------------

    def _entries(self, page_size: int | None = None) -> Iterator[tuple[EntryInfo, ObjectInfo]]:
        for obj in self.objects.list(ENTRIES, page_size or self.page_size):
            key = key_of(obj.name)
            if key is not None:
                yield info_from_object(key, obj), obj

    def _writable(self) -> None:
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")

    def _transfer_deadline(self, size: int | None) -> float:
        """A get does not know its size ahead: it may take what 256 MiB would (a stalled
        connection is given up after `timeout` anyway)."""
        return self.timeout + (size if size is not None else 256 << 20) / self.min_rate

    def _create_marker(self) -> None:
        marker = {"format_version": entry.FORMAT_VERSION, "created": time.time()}
        try:
            self.objects.create(MARKER, (json.dumps(marker) + "\n").encode())
        except FileNotFoundError:
            raise NotACacheError(f"{self.url}: no such bucket") from None
        except CacheError as exc:
            if not isinstance(exc, PermissionDeniedError):
                raise
            # Credentials that may read but not create: still a store to read from.
            counters.record_error("permission", exc)

    def _check(self, obj: ObjectInfo) -> bool:
        key = key_of(obj.name)
        if key is None:
            return False
        found = self.objects.read(obj.name, deadline=self._transfer_deadline(obj.size))
        if found is None:
            return True  # deleted since it was listed
        try:
            entry.verify(found[0], key)
        except CorruptEntryError:
            return False
        return True

    def _for_each(self, fn, items: list) -> list:
        """fn over items, a few at a time (object calls are network round trips)."""
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="xlacache-gcs") as pool:
            return list(pool.map(fn, items))

    def _header(self, info: EntryInfo) -> entry.Header | None:
        try:
            return self.read_header(info.key)
        except (CacheError, OSError):
            return None  # unreadable: not judged stale here (`verify` judges it)

    def _delete_quietly(self, name: str, generation: int) -> None:
        """Remove a corrupt object (that generation only); failure is counted, not raised."""
        try:
            self.objects.delete(name, generation=generation)
        except (CacheError, OSError) as exc:
            counters.record_error("remote", exc)

    def _note_use(self, key: str, obj: ObjectInfo) -> None:
        """Record a hit in the object's metadata, at most once per touch interval."""
        if not self._touch_allowed:
            return
        now = time.time()
        with self._touch_lock:
            if now - self._touched.get(key, float("-inf")) < self.touch_interval:
                return
            self._touched[key] = now
            if self._toucher is None:  # a daemon: records left at exit are not worth a wait
                self._toucher = threading.Thread(
                    target=self._touch_loop, name="xlacache-gcs-touch", daemon=True
                )
                self._toucher.start()
            try:
                self._touch_queue.put_nowait((key, obj, now))
            except queue.Full:
                counters.add("gcs_touch_failures")

    @counters.background("gcs.touch")
    def _touch_loop(self) -> None:
        while (item := self._touch_queue.get()) is not None:
            self._touch(*item)

    def _touch(self, key: str, obj: ObjectInfo, now: float) -> None:
        name = entry_name(key)
        if not self._touch_allowed:  # refused since this one was queued
            return
        try:
            if "created" not in obj.metadata:  # the read's headers did not carry metadata
                obj = self.objects.stat(name) or obj
            meta = obj.metadata
            last = _number(meta, "last-used", _number(meta, "created", 0.0))
            if now - last < self.touch_interval:
                return
            hits = int(_number(meta, "hits", 0)) + 1
            self.objects.patch_metadata(
                name,
                {"last-used": repr(now), "hits": str(hits)},
                metageneration=obj.metageneration,
                deadline=self.timeout,
                attempts=1,
            )
        except CacheError as exc:
            if isinstance(exc, PermissionDeniedError):
                self._touch_allowed = False  # no storage.objects.update: stop trying
            counters.add("gcs_touch_failures")
            counters.hidden("gcs.touch", exc)
        except Exception as exc:  # noqa: BLE001 - a use record is never worth an error
            counters.add("gcs_touch_failures")
            counters.hidden("gcs.touch", exc)
