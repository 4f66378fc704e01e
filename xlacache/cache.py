"""The compilation cache as training code meets it: look up, else compile and store.

`CompilationCache.get_or_compile` holds the whole policy, independent of JAX: any
failure of the cache itself (I/O, corruption, a full disk, permissions, a sick
server, an executable that no longer loads) becomes a compile, counted in
`xlacache.stats` and warned about once per kind. Errors of the compile itself are
the user's and propagate unchanged.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from xlacache import counters, entry
from xlacache.errors import CacheError, CorruptEntryError, kind_of
from xlacache.key import is_valid_key
from xlacache.stores.base import Store

if TYPE_CHECKING:
    from xlacache.explain import Explainer
    from xlacache.key import Identity
    from xlacache.signing import TrustedKeys

T = TypeVar("T")


def _count_hit(header: entry.Header, load_seconds: float) -> None:
    counters.add("hits")
    counters.add("load_seconds", load_seconds)
    counters.add("compile_seconds_saved", header.compile_seconds - load_seconds)


class CompilationCache:
    """A store plus the rules for using it during compilation.

    `signer` signs every entry written; with `trusted` keys, only entries one of them
    signed are loaded (others are misses, counted as errors["untrusted"]). `explainer`
    explains each miss (XLACACHE_EXPLAIN); `keep_module_text` stores the stripped
    module text with each entry (XLACACHE_KEEP_HLO).
    """

    def __init__(
        self,
        store: Store,
        readonly: bool = False,
        min_compile_seconds: float = 0.0,
        *,
        signer: entry.Signer | None = None,
        trusted: TrustedKeys | None = None,
        explainer: Explainer | None = None,
        keep_module_text: bool = False,
    ):
        self.store = store
        self.readonly = readonly or store.readonly
        self.min_compile_seconds = min_compile_seconds
        self.signer = signer
        self.trusted = trusted
        self.explainer = explainer
        self.keep_module_text = keep_module_text
        self._prefetched: dict[str, Future] = {}
        self._prefetch_lock = threading.Lock()
        self._outcome = threading.local()

    def get_or_compile(
        self,
        key: str,
        compile: Callable[[], T],
        load: Callable[[bytes], T],
        serialize: Callable[[T], bytes],
        label: str = "",
        platform: str = "",
        context: dict | None = None,
        identity: Identity | None = None,
    ) -> T:
        """The executable for `key`: loaded from the store, or compiled and stored.

        `context` is what `load` depends on besides the payload; it is stored with the
        entry, and an executable prefetched under the same key and context is reused.
        `identity` (the key's components) is recorded in the entry and explains misses.
        """
        start = time.perf_counter()
        self._outcome.value = "hit"
        prefetched = self._take_prefetched(key, context or {})
        if prefetched is not None:
            header, result = prefetched
            counters.add("prefetch_hits")
            _count_hit(header, time.perf_counter() - start)
            return result
        found = self.lookup(key)
        if found is not None:
            start = time.perf_counter()
            try:
                result = load(found.payload())
            except Exception as exc:  # noqa: BLE001 - a stale or foreign executable
                counters.record_error(exc.kind if isinstance(exc, CacheError) else "load", exc)
                self.discard(key)
            else:
                _count_hit(found.header, time.perf_counter() - start)
                return result
        counters.add("misses")
        self._outcome.value = "compiled"
        if self.explainer is not None and identity is not None:
            self.explainer.on_miss(identity)
        start = time.perf_counter()
        result = compile()
        seconds = time.perf_counter() - start
        counters.add("compile_seconds", seconds)
        if not self.readonly and seconds >= self.min_compile_seconds:
            stored = self.save(
                key, lambda: serialize(result), seconds, label, platform, context, identity
            )
            self._outcome.value = "stored" if stored else "compiled"
        return result

    def last_outcome(self) -> str:
        """What this thread's last `get_or_compile` did: ``hit`` (found in the store or
        prefetched), ``stored`` (compiled and stored) or ``compiled`` (not stored)."""
        return getattr(self._outcome, "value", "")

    def save_alias(self, alias: str, record: dict, label: str = "", platform: str = "") -> bool:
        """Store an alias entry: `record` (JSON) names the key of an executable stored here.

        An alias entry is an ordinary entry (verified, signed, tiered, pruned like the others)
        whose context says ``{"kind": "alias"}`` and whose label starts with ``alias:``.
        Read-only caches store nothing. Returns whether it was stored.
        """
        if self.readonly:
            return False
        payload = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        label = entry.ALIAS_LABEL_PREFIX + label
        stored = self.save(alias, lambda: payload, 0.0, label, platform, dict(entry.ALIAS_CONTEXT))
        if stored:
            counters.add("alias_writes")
        return stored

    def resolve_alias(
        self,
        alias: str,
        accept: Callable[[dict, entry.Header], None],
        load_entry: Callable[[entry.Entry], T],
        verify: Callable[[T], None],
    ) -> T | None:
        """The executable the alias entry `alias` names, or None (a miss: absent, or any check
        failed, counted and warned about once as errors["alias"]).

        `accept(record, header)` raises unless the alias record and the target entry's header
        fit this process; `load_entry` loads the target from its stored context (a prefetched
        executable with the same key and context is taken instead); `verify(executable)`
        raises unless the loaded executable is the program the caller expects. A bad alias is
        dropped (unless read-only), so the caller's next compile stores a good one.
        """
        record = self._read_alias(alias)
        if record is None:
            counters.add("alias_misses")
            return None
        key = record.get("target")
        found = self.lookup(key) if isinstance(key, str) and is_valid_key(key) else None
        if found is None:  # the target was pruned, or the record names no key
            counters.add("alias_misses")
            return None
        try:
            accept(record, found.header)
        except Exception as exc:  # noqa: BLE001 - a wrong alias is a miss, never a wrong program
            return self._bad_alias(alias, exc)
        start = time.perf_counter()
        prefetched = self._take_prefetched(key, found.header.context)
        if prefetched is not None:
            result = prefetched[1]
            counters.add("prefetch_hits")
        else:
            try:
                result = load_entry(found)
            except Exception as exc:  # noqa: BLE001 - a stale or foreign executable
                counters.record_error("corrupt" if isinstance(exc, CacheError) else "load", exc)
                self.discard(key)
                counters.add("alias_misses")
                return None
        try:
            verify(result)
        except Exception as exc:  # noqa: BLE001
            return self._bad_alias(alias, exc)
        _count_hit(found.header, time.perf_counter() - start)
        counters.add("alias_hits")
        return result

    def _read_alias(self, alias: str) -> dict | None:
        found = self.lookup(alias)
        if found is None:
            return None
        try:
            if not entry.is_alias(found.header):
                raise CorruptEntryError(f"entry {alias} is not an alias entry")
            record = json.loads(found.payload())
            if not isinstance(record, dict):
                raise CorruptEntryError(f"alias entry {alias} holds no record")
        except Exception as exc:  # noqa: BLE001
            self._bad_alias(alias, exc)
            return None
        return record

    def _bad_alias(self, alias: str, exc: BaseException) -> None:
        counters.record_error("alias", exc)
        counters.add("alias_misses")
        self.discard(alias)

    def prefetch(
        self,
        load_entry: Callable[[entry.Entry], T],
        ready: Callable[[], bool],
        limit: int = 32,
        max_bytes: int = 4 << 30,
        patience: float = 600.0,
    ) -> threading.Thread | None:
        """Load the most recently used executables in a background thread.

        A restarted job then finds the programs of its last run loaded while it builds
        its model and traces, instead of loading each when first asked. Loading waits
        until `ready()` (the runtime is up); `load_entry` loads an entry from its
        stored context. Returns the thread, or None when there is nothing to load.
        """
        keys = self._recent_keys(limit, max_bytes)
        if not keys:
            return None
        futures = {key: Future() for key in keys}
        with self._prefetch_lock:
            self._prefetched.update(futures)
        thread = threading.Thread(
            target=self._prefetch_worker,
            args=(futures, load_entry, ready, patience),
            name="xlacache-prefetch",
            daemon=True,
        )
        thread.start()
        return thread
    def lookup(self, key: str) -> entry.Entry | None:
        """The verified entry for `key`, or None (absent, or the cache failed)."""
        try:
            blob = self.store.get(key)
            if blob is None:
                return None
            counters.add("bytes_read", len(blob))
            found = entry.decode(blob, key, check_body=False)  # the store verified it
            if self.trusted is not None:
                self.trusted.check(found.header)  # before anything is deserialized
            return found
        except Exception as exc:  # noqa: BLE001 - every cache failure is a miss
            counters.record_error(kind_of(exc), exc)
            return None

    def save(
        self,
        key: str,
        serialize: Callable[[], bytes],
        compile_seconds: float,
        label: str = "",
        platform: str = "",
        context: dict | None = None,
        identity: Identity | None = None,
    ) -> bool:
        """Encode (and sign) and store an executable; failures are counted, never raised.
        Returns whether it was stored."""
        try:
            blob = entry.encode(
                key,
                serialize(),
                compile_seconds=compile_seconds,
                label=label,
                platform_name=platform,
                context=context,
                signer=self.signer,
                **self._identity_fields(identity),
            )
            self.store.put(key, blob)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return False
        counters.add("writes")
        counters.add("bytes_written", len(blob))
        return True

    def _identity_fields(self, identity: Identity | None) -> dict:
        """Header fields that describe the key; a failure to describe costs only them."""
        if identity is None:
            return {}
        fields: dict = {"components": identity.components}
        try:
            fields["summary"] = identity.summary()
            if self.keep_module_text and identity.module_text is not None:
                fields["module_text"] = identity.module_text()
        except Exception as exc:  # noqa: BLE001
            counters.record_error("explain", exc)
        return fields

    def discard(self, key: str) -> None:
        """Drop an entry that failed to load, so the next write replaces it."""
        if self.readonly:
            return
        try:
            self.store.delete(key)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)

    def _recent_keys(self, limit: int, max_bytes: int) -> list[str]:
        """Keys of the last run's programs: the most recently used, in order of use."""
        try:
            infos = sorted(self.store.list(), key=lambda i: i.last_used, reverse=True)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return []
        infos = [i for i in infos if not i.label.startswith(entry.ALIAS_LABEL_PREFIX)]
        chosen, total = [], 0
        for info in infos[:limit]:
            total += info.payload_size
            if total > max_bytes:
                break
            chosen.append(info)
        return [i.key for i in sorted(chosen, key=lambda i: i.last_used)]

    def _prefetch_worker(self, futures, load_entry, ready, patience: float) -> None:
        try:
            deadline = time.monotonic() + patience
            while not ready():
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
            for key, future in futures.items():
                if not future.set_running_or_notify_cancel():
                    continue  # the request came first and loads it itself
                value = None
                try:
                    found = self.lookup(key)
                    if found is not None and not entry.is_alias(found.header):
                        value = (found.header, load_entry(found))
                except Exception as exc:  # noqa: BLE001 - a failed prefetch is just a miss
                    counters.record_error("prefetch", exc)
                future.set_result(value)
        finally:
            # Whatever happened, nobody may wait forever on a prefetch.
            for future in futures.values():
                if not future.cancel() and not future.done():
                    future.set_result(None)

    def _take_prefetched(self, key: str, context: dict):
        """(header, executable) prefetched for this key and context, else None."""
        with self._prefetch_lock:
            future = self._prefetched.pop(key, None)
        if future is None or future.cancel():
            return None  # not prefetched, or not started yet: the caller loads it
        value = future.result()
        if value is None or value[0].context != context:
            return None
        return value

    def close(self) -> None:
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
