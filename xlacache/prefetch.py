"""Prefetch: executables loaded ahead of their requests, in the background.

Which: the local directory's most recently used entries (a restarted job finds the
programs of its last run loaded while it builds its model and traces), and what the
shared store says this process's job used last time (`job`: a new worker with an empty
local directory gets its job's programs the same way). Entries of the shared store are
downloaded at once, several at a time, while the process imports and traces (into the
local directory, unless read-only); loading (deserializing) waits until the runtime is
up, then goes in the order the programs were used.

Reading an entry for prefetch is not a use: prefetch reads with `Store.peek` and counts
nothing. Only when a request takes a prefetched entry is it counted (hits,
prefetch_hits, bytes_read, remote_hits) and its use recorded where it came from (hit
counts and last-used times of `xlacache inspect`, LRU eviction, `prune --unused-for`).
An entry prefetch finds untrusted or unloadable is left to the request, which counts
its failure once; so is one prefetch could not read (corrupt, a store that failed): the
request reads it again and counts what fails. A read (`peek`) or load (`load_entry`)
that fails is still reported to strict mode (`counters.hidden`): the request's own
calls (`get`, its loader) are others. A request for a key being fetched or loaded waits
for that (one read).

What prefetch loads is only what this process can load: entries of this entry format and
jaxlib (`prefetch_choice`, by the store's listing), and, when loading, only an entry whose
header records this process's environment for its devices (`jax_bridge.load_entry`:
platform, devices and topology, XLA flags too): another jaxlib's executable is never handed
to XLA, whose loader can crash on one. Entries of another environment are skipped silently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from xlacache import counters, entry
from xlacache.errors import ForeignEntryError, kind_of
from xlacache.stores.base import EntryInfo, Store, current_jaxlib, lru_split
from xlacache.stores.tiered import tiers

if TYPE_CHECKING:
    from xlacache.signing import TrustedKeys

T = TypeVar("T")

DOWNLOADS = 8  # entries fetched from the shared store at once
READY_POLL = 0.01
PREFETCH_MAX_BYTES = 4 << 30  # payload bytes prefetch loads at most


def prefetch_choice(
    infos: Iterable[EntryInfo],
    limit: int,
    max_bytes: int = PREFETCH_MAX_BYTES,
    jaxlib: str | None = None,
) -> list[EntryInfo]:
    """What prefetch loads from a store's listing (and `xlacache inspect --would-load`
    shows): the `limit` most recently used executables (no alias entries) that a process
    of `jaxlib` (default: the installed one) can load (this entry format, that jaxlib),
    within `max_bytes` of payload, in order of use (the oldest first): `stores.base.lru_split`."""
    jaxlib = current_jaxlib() if jaxlib is None else jaxlib
    loadable = [i for i in infos if _loadable(i, jaxlib)]
    return lru_split(loadable, max_bytes, limit, size=lambda i: i.payload_size)[1]


def _loadable(info: EntryInfo, jaxlib: str) -> bool:
    """Whether the listing says a process of `jaxlib` may load the entry (an executable of
    this entry format and that jaxlib; the header is checked again before loading)."""
    if info.label.startswith(entry.ALIAS_LABEL_PREFIX):
        return False
    return info.format_version == entry.FORMAT_VERSION and info.jaxlib == jaxlib


@dataclass(frozen=True)
class Fetched:
    """An entry read for prefetch, and where from (its use is recorded there)."""

    key: str
    blob: bytes
    found: entry.Entry
    source: Store
    remote: bool


@dataclass(frozen=True)
class Prefetched(Generic[T]):
    fetched: Fetched
    value: T | None  # None: not loaded (the request loads `fetched` itself)


class Prefetcher:
    """One process's prefetch: `start` it once, `take` from it per request."""

    def __init__(self, store: Store, readonly: bool, trusted: TrustedKeys | None = None) -> None:
        self.store = store
        self.readonly = readonly
        self.trusted = trusted
        self.local, self.shared = tiers(store)
        self._loads: dict[str, Future] = {}  # key -> Prefetched | None, loaded in order
        self._downloads: dict[str, Future] = {}  # key -> Fetched | None (shared keys)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # -- planning ------------------------------------------------------------------------

    def recent_local(self, limit: int, max_bytes: int) -> list[str]:
        """Keys of the local directory's last run (`prefetch_choice`), in order of use."""
        if self.local is None:
            return []
        try:
            return [i.key for i in prefetch_choice(self.local.list(), limit, max_bytes)]
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return []

    def _job_keys(self, job: str, limit: int) -> list[str]:
        """The keys the shared store's manifest of `job` lists, not prefetched already."""
        try:
            jobs = self.shared.jobs() if self.shared is not None else None
            listed = jobs.keys(job, limit) if jobs is not None else []
        except Exception as exc:  # noqa: BLE001 - no prefetch is only slower
            counters.record_error("prefetch", exc)
            return []
        with self._lock:
            return [k for k in listed if k not in self._loads]

    # -- running -------------------------------------------------------------------------

    def start(
        self,
        keys: list[str],
        load_entry: Callable[[entry.Entry], T],
        ready: Callable[[], bool],
        *,
        patience: float,
        job: str | None = None,
        limit: int = 0,
    ) -> threading.Thread:
        """Prefetch the local `keys` and, with a `job`, up to `limit` in all from the
        shared store's manifest of it: the manifest is read and its entries downloaded at
        once (in the background), and every key is loaded once `ready()`. Returns the
        background thread."""
        with self._lock:
            self._loads.update({key: Future() for key in keys})
        thread = threading.Thread(
            target=self._run,
            args=(list(keys), job, limit - len(keys), load_entry, ready, patience),
            name="xlacache-prefetch",
            daemon=True,
        )
        thread.start()
        return thread

    @counters.background("prefetch")
    def _run(self, keys, job, room: int, load_entry, ready, patience: float) -> None:
        try:
            if job and room > 0:
                shared = self._job_keys(job, room)
                self._download_all(shared)
                keys += shared
            deadline = time.monotonic() + patience
            while not ready():
                if time.monotonic() > deadline:
                    return
                time.sleep(READY_POLL)
            for key in keys:
                with self._lock:
                    future = self._loads.get(key)
                if future is None or not future.set_running_or_notify_cancel():
                    continue  # the request came first and loads it itself
                future.set_result(self._load_one(key, load_entry))
        finally:
            # Whatever happened, nobody may wait forever on a prefetch.
            with self._lock:
                left = list(self._loads.values())
            for future in left:
                if not future.cancel() and not future.done():
                    future.set_result(None)

    def _download_all(self, keys: list[str]) -> None:
        """Start downloading `keys`, DOWNLOADS at a time."""
        if not keys:
            return
        pool = ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="xlacache-fetch")
        with self._lock:
            self._loads.update({key: Future() for key in keys})
            self._downloads.update({key: pool.submit(self._download, key) for key in keys})
            self._pool = pool
        pool.shutdown(wait=False)  # its threads end when the downloads are done

    @counters.background("prefetch.download")
    def _download(self, key: str) -> Fetched | None:
        """The shared store's entry, read without counting a use (kept in the local
        directory too, unless read-only, by another task: loading does not wait on it)."""
        try:
            blob = self.shared.peek(key)
            if blob is None:
                return None
            found = entry.decode(blob, key, check_body=False)  # the store verified it
        except Exception as exc:  # noqa: BLE001 - the request reads it again (`get`, not
            counters.hidden("prefetch.download", exc)  # `peek`), and counts a failure
            return None
        local = self.local
        if local is not None and not (self.readonly or local.readonly):
            threading.Thread(
                target=_keep, args=(local, key, blob), name="xlacache-keep", daemon=True
            ).start()
        return Fetched(key, blob, found, self.shared, remote=True)

    def _read_local(self, key: str) -> Fetched | None:
        try:
            blob = self.local.peek(key) if self.local is not None else None
            if blob is None:
                return None
            return Fetched(key, blob, entry.decode(blob, key, check_body=False), self.local, False)
        except Exception as exc:  # noqa: BLE001 - the request reads it again (`get`, not
            counters.hidden("prefetch.read", exc)  # `peek`), and counts a failure
            return None

    def _load_one(self, key: str, load_entry) -> Prefetched | None:
        with self._lock:
            download = self._downloads.pop(key, None)
        fetched = download.result() if download is not None else self._read_local(key)
        if fetched is None or entry.is_alias(fetched.found.header):
            return None
        if self.trusted is not None:
            try:
                self.trusted.check(fetched.found.header)
            except Exception:  # noqa: BLE001 - the request checks (and counts) it, once
                return Prefetched(fetched, None)
        try:
            return Prefetched(fetched, load_entry(fetched.found))
        except ForeignEntryError:  # another environment's: skipped, silently
            return None
        except Exception as exc:  # noqa: BLE001 - the request loads (and counts) it itself,
            counters.hidden("prefetch.load", exc)  # but with its own loader, not `load_entry`
            return Prefetched(fetched, None)

    def take(self, key: str) -> Prefetched | None:
        """What was prefetched for `key` (loaded, or only fetched: the caller loads it), or
        None. A load or download under way is waited for; one not started is dropped."""
        with self._lock:
            future = self._loads.pop(key, None)
        if future is None:
            return None
        if not future.cancel():
            if not future.done():
                counters.add("coalesced_reads")  # being loaded: wait for it
            return future.result()
        with self._lock:
            download = self._downloads.pop(key, None)
        if download is None:
            return None
        if not download.done():
            counters.add("coalesced_reads")  # being fetched: one read, not two
        fetched = download.result()
        return None if fetched is None else Prefetched(fetched, None)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


@counters.background("prefetch.keep")
def _keep(local: Store, key: str, blob: bytes) -> None:
    """Write a downloaded entry into the local directory (the next run finds it there)."""
    try:
        if not local.contains(key):
            local.put(key, blob)
    except Exception as exc:  # noqa: BLE001
        counters.record_error(kind_of(exc), exc)
