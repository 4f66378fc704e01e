"""The compilation cache as training code meets it: look up, else compile and store.

`CompilationCache.get_or_compile` holds the whole policy, independent of JAX: any
failure of the cache itself (I/O, corruption, a full disk, permissions, a sick
server, an executable that no longer loads) becomes a compile, counted in
`xlacache.stats` and warned about once per kind. Errors of the compile itself are
the user's and propagate unchanged.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from xlacache import counters, entry
from xlacache.errors import CacheError, CorruptEntryError, StoreUnavailableError
from xlacache.stores.base import Store

T = TypeVar("T")


def error_kind(exc: BaseException) -> str:
    """The counter an absorbed failure is filed under."""
    if isinstance(exc, CorruptEntryError):
        return "corrupt"
    if isinstance(exc, StoreUnavailableError):
        return "remote"
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk_full"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "permission"
        return "io"
    if isinstance(exc, sqlite3.Error):
        return "index"
    if isinstance(exc, CacheError):
        return "cache"
    return "internal"


class CompilationCache:
    """A store plus the rules for using it during compilation."""

    def __init__(self, store: Store, readonly: bool = False, min_compile_seconds: float = 0.0):
        self.store = store
        self.readonly = readonly or store.readonly
        self.min_compile_seconds = min_compile_seconds

    def get_or_compile(
        self,
        key: str,
        compile: Callable[[], T],
        load: Callable[[bytes], T],
        serialize: Callable[[T], bytes],
        label: str = "",
        platform: str = "",
    ) -> T:
        """The executable for `key`: loaded from the store, or compiled and stored."""
        found = self.lookup(key)
        if found is not None:
            start = time.perf_counter()
            try:
                result = load(found.payload())
            except Exception as exc:  # noqa: BLE001 - a stale or foreign executable
                counters.record_error("corrupt" if isinstance(exc, CacheError) else "load", exc)
                self.discard(key)
            else:
                load_seconds = time.perf_counter() - start
                counters.add("hits")
                counters.add("load_seconds", load_seconds)
                counters.add("compile_seconds_saved", found.header.compile_seconds - load_seconds)
                return result
        counters.add("misses")
        start = time.perf_counter()
        result = compile()
        seconds = time.perf_counter() - start
        counters.add("compile_seconds", seconds)
        if not self.readonly and seconds >= self.min_compile_seconds:
            self.save(key, lambda: serialize(result), seconds, label, platform)
        return result

    def lookup(self, key: str) -> entry.Entry | None:
        """The verified entry for `key`, or None (absent, or the cache failed)."""
        try:
            blob = self.store.get(key)
            if blob is None:
                return None
            counters.add("bytes_read", len(blob))
            return entry.decode(blob, key, check_body=False)  # the store verified it
        except Exception as exc:  # noqa: BLE001 - every cache failure is a miss
            counters.record_error(error_kind(exc), exc)
            return None

    def save(
        self,
        key: str,
        serialize: Callable[[], bytes],
        compile_seconds: float,
        label: str = "",
        platform: str = "",
    ) -> None:
        """Encode and store an executable; failures are counted, never raised."""
        try:
            blob = entry.encode(
                key,
                serialize(),
                compile_seconds=compile_seconds,
                label=label,
                platform_name=platform,
            )
            self.store.put(key, blob)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(error_kind(exc), exc)
            return
        counters.add("writes")
        counters.add("bytes_written", len(blob))

    def discard(self, key: str) -> None:
        """Drop an entry that failed to load, so the next write replaces it."""
        if self.readonly:
            return
        try:
            self.store.delete(key)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(error_kind(exc), exc)

    def close(self) -> None:
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001
            counters.record_error(error_kind(exc), exc)
