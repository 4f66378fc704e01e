"""The compilation cache as training code meets it: look up, else compile and store.

`CompilationCache.get_or_compile` holds the whole policy, independent of JAX: any
failure of the cache itself (I/O, corruption, a full disk, permissions, a sick
server, an executable that no longer loads, a lease holder that died) becomes a
compile, counted in `xlacache.stats` and warned about once per kind. Errors of the
compile itself are the user's and propagate unchanged. Single-flight: workers that
miss one key at once compile it once, the others waiting for its entry (leases of
the store, `xlacache.stores.leases`), every wait under a deadline.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from xlacache import counters, entry
from xlacache.errors import CacheError, CorruptEntryError, kind_of
from xlacache.key import is_valid_key
from xlacache.stores import leases
from xlacache.stores.base import Store
from xlacache.stores.leases import DEFAULT_TTL, HeldLease, LeaseTable, new_holder

if TYPE_CHECKING:
    from xlacache.explain import Explainer
    from xlacache.key import Identity
    from xlacache.signing import TrustedKeys

T = TypeVar("T")


def _count_hit(header: entry.Header, load_seconds: float) -> None:
    counters.add("hits")
    counters.add("load_seconds", load_seconds)
    counters.add("compile_seconds_saved", header.compile_seconds - load_seconds)


_MISS = object()  # no executable (absent, or not loadable)
_FAILED = object()  # an entry was there but failed (corrupt, untrusted, not loadable)


@dataclass(frozen=True)
class SingleFlight:
    """How workers that miss one key at once share one compile (see
    `CompilationCache._single_flight`). Times in seconds."""

    ttl: float = DEFAULT_TTL  # a holder's lease expires this long after its last renewal
    max_wait: float = 1800.0  # the longest a worker waits for another's compile
    writer_grace: float = 0.0  # a reader waits this long for a writer to take a free key


class CompilationCache:
    """A store plus the rules for using it during compilation.

    `signer` signs every entry written; with `trusted` keys, only entries one of them
    signed are loaded (others are misses, counted as errors["untrusted"]). `explainer`
    explains each miss (XLACACHE_EXPLAIN); `keep_module_text` stores the stripped
    module text with each entry (XLACACHE_KEEP_HLO). With `single_flight`, workers
    sharing the store that miss one key at once compile it once (the store's leases).
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
        single_flight: SingleFlight | None = None,
    ):
        self.store = store
        self.single_flight = single_flight
        self._leases: LeaseTable | None | object = _MISS
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
        found = self._load(key, load)
        if found is not _MISS and found is not _FAILED:
            return found
        lease = None
        if self.single_flight is not None and found is _MISS:  # absent: maybe in the works
            found, lease = self._single_flight(key, load)
            if found is not _MISS:
                return found
        try:
            counters.add("misses")
            if self.explainer is not None and identity is not None:
                self.explainer.on_miss(identity)
            start = time.perf_counter()
            result = compile()
            seconds = time.perf_counter() - start
            counters.add("compile_seconds", seconds)
            self._outcome.value = "compiled"
            if not self.readonly and seconds >= self.min_compile_seconds:
                stored = self.save(
                    key, lambda: serialize(result), seconds, label, platform, context, identity,
                    publish=lease is not None,
                )  # fmt: skip
                self._outcome.value = "stored" if stored else "compiled"
        finally:
            if lease is not None:  # after the entry is where waiters look for it
                lease.release()
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

    def _load(self, key: str, load: Callable[[bytes], T]):
        """The stored executable for `key`, loaded; _MISS when absent, _FAILED when what
        was there failed (counted)."""
        found = self._lookup(key)
        if found is None or found is _FAILED:
            return _MISS if found is None else _FAILED
        start = time.perf_counter()
        try:
            result = load(found.payload())
        except Exception as exc:  # noqa: BLE001 - a stale or foreign executable
            counters.record_error(exc.kind if isinstance(exc, CacheError) else "load", exc)
            self.discard(key)
            return _FAILED
        _count_hit(found.header, time.perf_counter() - start)
        return result

    def _single_flight(self, key: str, load: Callable[[bytes], T]):
        """After a miss: (executable, None) loaded from another worker's compile, or
        (_MISS, lease) to compile under `lease` (None: compile without one).

        A writer takes the key's lease, or waits while another holds it, polling the
        store (with backoff) for the holder's entry and retrying the lease: a holder that
        dies loses it (at once for directory leases, after its ttl otherwise) and a
        waiter takes over. A reader only watches the lease: it waits while a holder is
        alive and, when none is, up to `writer_grace` for one to appear (the writer of
        its pod compiles the same programs) if a writer has made the store at all.
        Every wait ends by `max_wait`; any lease failure means compiling without one.
        """
        flight = self.single_flight
        table = self._lease_table()
        if table is None:
            return _MISS, None
        holder = new_holder()
        grace = flight.writer_grace if self.readonly and self.store.exists() else 0.0
        start = time.monotonic()
        polls = 0
        seen_holder = False
        waited = False
        while True:
            try:
                if self.readonly:
                    grant, current = None, table.holder(key)
                else:
                    grant = table.acquire(key, holder, flight.ttl)
                    current = None if grant.granted else (grant.holder or "unknown")
            except Exception as exc:  # noqa: BLE001 - no single-flight, not no training
                counters.record_error(kind_of(exc), exc)
                return self._end_wait(table, key, start, waited, _MISS), None
            if grant is not None and grant.granted:
                return self._lead(table, key, holder, grant, seen_holder, load, start, waited)
            now = time.monotonic()
            seen_holder = seen_holder or current is not None
            if current is None and (seen_holder or now - start >= grace):
                # A reader with nobody compiling the key (any more): look once more.
                return self._end_wait(table, key, start, waited, self._recheck(key, load)), None
            if now - start >= flight.max_wait:
                counters.add("wait_timeouts")
                counters.record_error("wait_timeout", f"waited {now - start:.0f} s for {key}")
                return self._end_wait(table, key, start, waited, _MISS), None
            time.sleep(min(leases.WAIT_BACKOFF.delay(polls), flight.max_wait - (now - start)))
            polls += 1
            waited = True
            found = self._load(key, load)
            if found is not _MISS:  # loaded; or failed, and counted: compile
                return self._end_wait(table, key, start, waited, self._miss(found)), None

    def _lead(self, table, key, holder, grant, seen_holder, load, start, waited):
        """We hold the lease: the entry may have arrived meanwhile; else compile under it."""
        if grant.taken_over:
            counters.add("leases_taken_over")
        lease = HeldLease(table, key, holder, self.single_flight.ttl, grant.taken_over)
        found = self._recheck(key, load)  # stored between our lookup and the grant?
        if found is not _MISS or (seen_holder and not grant.taken_over):
            # Loaded; or the holder we waited on let go without storing (its compile was
            # too quick to keep, or storing failed): compile without holding the lease,
            # so the other waiters do not compile one after another.
            lease.release()
            return self._end_wait(table, key, start, waited, found), None
        self._end_wait(table, key, start, waited, _MISS)
        return _MISS, lease

    def _recheck(self, key: str, load: Callable[[bytes], T]):
        """Look again for an entry that may have been stored since: loaded, or _MISS."""
        return self._miss(self._load(key, load))

    @staticmethod
    def _miss(found):
        return _MISS if found is _FAILED else found

    def _end_wait(self, table, key: str, start: float, waited: bool, found):
        """Count a wait that is over (loaded: a compile avoided); passes `found` on."""
        if waited:
            seconds = time.monotonic() - start
            counters.add("wait_seconds", seconds)
            loaded = found is not _MISS
            if loaded:
                counters.add("compiles_avoided")
            table.report_wait(key, loaded, seconds)
        return found

    def _lease_table(self) -> LeaseTable | None:
        """The store's leases, looked up once; None when it has none or they fail."""
        if self._leases is _MISS:
            try:
                self._leases = self.store.leases()
            except Exception as exc:  # noqa: BLE001
                counters.record_error(kind_of(exc), exc)
                self._leases = None
        return self._leases

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
        found = self._lookup(key)
        return None if found is _FAILED else found

    def _lookup(self, key: str):
        """The verified entry, None when absent, _FAILED when the cache failed (counted)."""
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
            return _FAILED

    def save(
        self,
        key: str,
        serialize: Callable[[], bytes],
        compile_seconds: float,
        label: str = "",
        platform: str = "",
        context: dict | None = None,
        identity: Identity | None = None,
        publish: bool = False,
    ) -> bool:
        """Encode (and sign) and store an executable; failures are counted, never raised.
        Returns whether it was stored.

        `publish`: make it visible to every process sharing the store before returning
        (`Store.publish`), as a single-flight compiler does before releasing its lease."""
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
            (self.store.publish if publish else self.store.put)(key, blob)
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
