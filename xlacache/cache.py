"""The compilation cache as training code meets it: look up, else compile and store.

`CompilationCache.get_or_compile` holds the whole policy, independent of JAX: any
failure of the cache itself (I/O, corruption, a full disk, permissions, a sick
server, an executable that no longer loads, a lease holder that died) becomes a
compile, counted in `xlacache.stats` and warned about once per kind. Errors of the
compile itself are the user's and propagate unchanged. Single-flight: workers that
miss one key at once compile it once, the others waiting for its entry
(`xlacache.flight`, under the store's leases), every wait under a deadline. Prefetch:
`xlacache.prefetch`.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from xlacache import counters, entry
from xlacache.aliases import AliasEntries
from xlacache.errors import CacheError, ForeignEntryError, kind_of
from xlacache.flight import FAILED, Flight, Found, Landing, Lookup, SingleFlight, WriterWatch
from xlacache.job_recorder import JobRecorder
from xlacache.key import COMPONENTS
from xlacache.legacy import LegacyEntries
from xlacache.prefetch import PREFETCH_MAX_BYTES, Fetched, Prefetcher
from xlacache.stores.base import Store
from xlacache.stores.leases import LeaseTable

if TYPE_CHECKING:
    from xlacache.explain import Explainer
    from xlacache.key import Identity
    from xlacache.signing import TrustedKeys

T = TypeVar("T")
__all__ = ["CompilationCache", "Compiled", "Outcome", "SingleFlight"]
# the figures a cache counts itself (``CompilationCache.stats``)
_OWN_FIGURES = (
    "hits", "misses", "writes", "remote_hits", "prefetch_hits", "bytes_read", "bytes_written",
    "compile_seconds", "compile_seconds_saved", "load_seconds",
    "alias_hits", "alias_misses", "alias_writes",
)  # fmt: skip


class Outcome(str, enum.Enum):
    """What `get_or_compile_outcome` did."""

    HIT = "hit"  # found in the store (or prefetched, or another worker's compile)
    STORED = "stored"  # compiled and stored
    COMPILED = "compiled"  # compiled, not stored


class Compiled(NamedTuple):
    """An executable and what `get_or_compile_outcome` did to get it."""

    value: Any
    outcome: Outcome


_REJECTED = (
    "xlacache: JAX's loader rejected {what} ({exc}); compiling it{fix}. "
    "Further rejections are counted in xlacache.stats()['errors']['load_rejected']."
)


class CompilationCache(AliasEntries, LegacyEntries):
    """A store plus the rules for using it during compilation (alias entries:
    `xlacache.aliases`; entries of format 2: `xlacache.legacy`).

    `signer` signs every entry written; with `trusted` keys, only entries one of them
    signed are loaded (others are misses, counted as errors["untrusted"]). `explainer`
    explains each miss (XLACACHE_EXPLAIN); `keep_module_text` stores the stripped
    module text with each entry (XLACACHE_KEEP_HLO). With `single_flight`, workers
    sharing the store that miss one key at once compile it once (the store's leases).
    `job` names this process's job: a writer records the keys it uses in the shared
    store's manifest of the job, and `prefetch` fetches the keys recorded there.

    `stats()` gives this cache's own figures (as diskcache's `Cache.stats`); each is also
    counted in the process's `xlacache.stats()`.
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
        job: str | None = None,
    ):
        self.store = store
        self.single_flight = single_flight
        self.readonly = readonly or store.readonly
        self.min_compile_seconds = min_compile_seconds
        self.signer = signer
        self.trusted = trusted
        self.explainer = explainer
        self.keep_module_text = keep_module_text
        self.job = job
        self._leases: LeaseTable | None = None
        self._leases_looked_up = False
        self._writers = WriterWatch(single_flight.writer_grace) if single_flight else None
        self._prefetcher = Prefetcher(store, self.readonly, trusted)
        self._remote_only = self._prefetcher.local is None  # hits come from a shared store
        self._tally = counters.Tally(_OWN_FIGURES)
        self._recorder = self._job_recorder()
        self._rejected: dict[str, str] = {}  # key -> why JAX's loader rejected its entry

    def stats(self, reset: bool = False) -> dict[str, float]:
        """What this cache counted: hits, misses, writes, bytes, compile and load seconds,
        alias and prefetch hits (every name of `counters.FIELDS` it counts; zero until
        counted); `reset` starts its figures again from zero (`xlacache.stats()` keeps them)."""
        return self._tally.snapshot(reset)

    def _count_hit(self, header: entry.Header, load_seconds: float) -> None:
        self._tally.add("hits")
        self._tally.add("load_seconds", load_seconds)
        self._tally.add("compile_seconds_saved", header.compile_seconds - load_seconds)
        if header.rewarmed_from and self.explainer is not None:
            self.explainer.on_rewarmed_hit(header)

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
        return self.get_or_compile_outcome(
            key, compile, load, serialize, label, platform, context, identity
        ).value

    def get_or_compile_outcome(
        self,
        key: str,
        compile: Callable[[], T],
        load: Callable[[bytes], T],
        serialize: Callable[[T], bytes],
        label: str = "",
        platform: str = "",
        context: dict | None = None,
        identity: Identity | None = None,
    ) -> Compiled:
        """`get_or_compile`, with what it did (`Outcome`)."""
        counters.raise_deferred()  # strict mode: what a background thread hid
        found = self._take_prefetched(key, context or {}, load, identity)
        if found is None:
            found = self._load(key, load, identity)
        if found.found is Found.ABSENT and identity is not None and identity.legacy is not None:
            found = self._legacy(key, identity, load, label, platform, context)
        lease = None
        if found.found is Found.ABSENT:  # maybe in the works: single-flight
            flight = self._flight(key, load, label, identity)
            if flight is not None:
                landed = flight.run()
                if landed.landing is Landing.LOADED:
                    found = Lookup(Found.LOADED, landed.value)
                lease = landed.lease
        if found.found is Found.LOADED:
            self._note_use(key)
            return Compiled(found.value, Outcome.HIT)
        rejected = self._rejected.pop(key, None)
        try:
            self._tally.add("misses")
            if self.explainer is not None and identity is not None:
                self.explainer.on_miss(identity, rejected=rejected)
            start = time.perf_counter()
            result = compile()
            seconds = time.perf_counter() - start
            self._tally.add("compile_seconds", seconds)
            outcome = Outcome.COMPILED
            keep = not self.readonly and seconds >= self.min_compile_seconds
            if keep and self._refuses_own_entries():  # kept in memory only, never rewritten
                keep = False
                counters.add("kept_unsigned")
            if keep and rejected is not None:
                serialize = self._replacement(key, result, serialize, load, label)
                keep = serialize is not None
            if keep and self.save(
                key, lambda: serialize(result), seconds, label, platform, context, identity,
                publish=lease is not None,
            ):  # fmt: skip
                outcome = Outcome.STORED
                self._note_use(key)
        finally:
            if lease is not None:  # after the entry is where waiters look for it
                lease.release()
        return Compiled(result, outcome)

    def _take_prefetched(
        self, key: str, context: dict, load: Callable[[bytes], T], identity: Identity | None
    ) -> Lookup[T] | None:
        """The prefetched executable for `key`, if prefetch got it: loaded for this context,
        or loaded here from the prefetched entry; None when prefetch has nothing."""
        start = time.perf_counter()
        taken = self._prefetcher.take(key)
        if taken is None:
            return None
        header = taken.fetched.found.header
        if not self._fits(header, identity):
            return FAILED
        if taken.value is not None and header.context == context:
            self._tally.add("prefetch_hits")
            self._count_hit(header, time.perf_counter() - start)
            found = Lookup(Found.LOADED, taken.value, header.created)
        else:
            found = self._checked(taken.fetched.found)
            if found.found is Found.LOADED:
                found = self._deserialize(key, taken.fetched.found, load, identity)
        if found.found is Found.LOADED:
            self._count_fetched(taken.fetched)
        return found

    def _count_fetched(self, fetched: Fetched) -> None:
        """A prefetched entry a request took: now it is a read, and a use."""
        self._tally.add("bytes_read", len(fetched.blob))
        if fetched.remote:
            self._tally.add("remote_hits")
        try:
            fetched.source.record_hit(fetched.key)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)

    def _load(
        self, key: str, load: Callable[[bytes], T], identity: Identity | None = None
    ) -> Lookup[T]:
        """The stored executable for `key`, loaded (an entry that fails is counted)."""
        found = self._lookup(key)
        if found.found is not Found.LOADED:
            return found
        return self._deserialize(key, found.value, load, identity)

    def _fits(self, header: entry.Header, identity: Identity | None) -> bool:
        """Whether an entry found under a request's key records the request's components (an
        entry that records none is not checked); one that does not is never deserialized: a
        miss counted as errors["foreign"], and dropped so the compile replaces it."""
        if identity is None or not header.components:
            return True
        differ = [n for n in COMPONENTS if header.components.get(n) != identity.components[n]]
        if not differ:
            return True
        counters.record_error(
            "foreign",
            ForeignEntryError(f"entry {header.key[:12]} records another {', '.join(differ)}"),
        )
        self.discard(header.key)
        return False

    def _deserialize(
        self, key: str, found: entry.Entry, load: Callable[[bytes], T], identity: Identity | None
    ) -> Lookup[T]:
        if not self._fits(found.header, identity):
            return FAILED
        start = time.perf_counter()
        try:
            result = load(found.payload())
        except CacheError as exc:
            counters.record_error(exc.kind, exc)
            self.discard(key)
            return FAILED
        except Exception as exc:  # noqa: BLE001 - JAX's loader rejected a verified entry
            what = f"the stored executable of {found.header.label or '?'} {key[:12]}"
            fix = (
                ", not replacing the entry (read-only)"
                if self.readonly
                else " and replacing the entry"
            )
            warning = _REJECTED.format(what=what, exc=exc, fix=fix)
            counters.record_error("load_rejected", exc, warning)
            self._rejected[key] = " ".join(str(exc).split())[:300]
            return FAILED
        self._count_hit(found.header, time.perf_counter() - start)
        return Lookup(Found.LOADED, result, found.header.created)

    def _refuses_own_entries(self) -> bool:
        """Trusting keys with no trusted signing key: whatever it stored, it would refuse."""
        return self.trusted is not None and (
            self.signer is None or self.signer.key_id not in self.trusted.key_ids
        )

    def _replacement(
        self, key: str, result: T, serialize: Callable[[T], bytes], load, label: str
    ) -> Callable[[T], bytes] | None:
        """What stores the fresh executable over an entry JAX's loader rejected, if it
        loads (None: storing an executable this jaxlib cannot load repeats the rejection)."""
        try:
            payload = serialize(result)
            load(payload)
        except Exception as exc:  # noqa: BLE001 - counted in errors["unloadable"]
            why = f"xlacache: this jaxlib cannot load its executable of {label} ({exc}); not stored"
            counters.record_error("unloadable", exc, why)
            return None
        self.discard(key)
        return lambda _: payload

    def _flight(
        self, key: str, load: Callable[[bytes], T], label: str, identity: Identity | None = None
    ) -> Flight[T] | None:
        """A single-flight for a missed key, or None (single-flight off, or no leases)."""
        if self.single_flight is None:
            return None
        table = self._lease_table()
        if table is None:
            return None
        # A reader waits for a writer only in a store a writer has made.
        writers = self._writers if self.readonly and self.store.exists() else None
        return Flight(
            self.single_flight, table, key, lambda: self._load(key, load, identity),
            readonly=self.readonly, writers=writers, label=label,
        )  # fmt: skip

    def _lease_table(self) -> LeaseTable | None:
        """The store's leases, looked up once; None when it has none or they fail."""
        if not self._leases_looked_up:
            self._leases_looked_up = True
            try:
                self._leases = self.store.leases()
            except Exception as exc:  # noqa: BLE001
                counters.record_error(kind_of(exc), exc)
        return self._leases

    def _job_recorder(self) -> JobRecorder | None:
        """A writer with a job records its keys in the shared store's manifest."""
        shared = self._prefetcher.shared
        if not self.job or self.readonly or shared is None:
            return None
        try:
            jobs = shared.jobs()
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return None
        return JobRecorder(jobs, self.job) if jobs is not None else None

    def _note_use(self, key: str) -> None:
        if self._recorder is not None:
            self._recorder.note(key)

    def prefetch(
        self,
        load_entry: Callable[[entry.Entry], T],
        ready: Callable[[], bool],
        limit: int = 32,
        max_bytes: int = PREFETCH_MAX_BYTES,
        patience: float = 600.0,
    ) -> threading.Thread:
        """Load the last run's executables in a background thread (`xlacache.prefetch`):
        the local directory's most recently used, then the job's manifest in the shared
        store (downloaded at once). Loading waits until `ready()` (the runtime is up);
        `load_entry` loads an entry from its stored context. Returns the thread."""
        keys = self._prefetcher.recent_local(limit, max_bytes)
        return self._prefetcher.start(
            keys, load_entry, ready, patience=patience, job=self.job, limit=limit
        )

    def lookup(self, key: str) -> entry.Entry | None:
        """The verified entry for `key`, or None (absent, or the cache failed)."""
        return self._lookup(key).value

    def _lookup(self, key: str) -> Lookup[entry.Entry]:
        """The verified (and trusted) entry; a failure of the cache is counted."""
        try:
            blob = self.store.get(key)
            if blob is None:
                return Lookup(Found.ABSENT)
            self._tally.add("bytes_read", len(blob))
            if self._remote_only:
                self._tally.add("remote_hits")
            found = entry.decode(blob, key, check_body=False)  # the store verified it
        except Exception as exc:  # noqa: BLE001 - every cache failure is a miss
            counters.record_error(kind_of(exc), exc)
            return FAILED
        return self._checked(found)

    def _checked(self, found: entry.Entry) -> Lookup[entry.Entry]:
        """`found` if trusted (checked before anything is deserialized), else FAILED."""
        if self.trusted is not None:
            try:
                self.trusted.check(found.header)
            except Exception as exc:  # noqa: BLE001
                counters.record_error(kind_of(exc), exc)
                return FAILED
        return Lookup(Found.LOADED, found, found.header.created)

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
        rewarmed_from: str = "",
    ) -> bool:
        """Encode (and sign) and store an executable; failures are counted, never raised.
        Returns whether it was stored.

        `publish`: make it visible to every process sharing the store before returning
        (`Store.publish`), as a single-flight compiler does before releasing its lease.
        `rewarmed_from`: the jaxlib of the entry `xlacache rewarm` rebuilt it from."""
        try:
            blob = entry.encode(
                key,
                serialize(),
                compile_seconds=compile_seconds,
                label=label,
                platform_name=platform,
                context=context,
                signer=self.signer,
                rewarmed_from=rewarmed_from,
                **self._identity_fields(identity),
            )
            (self.store.publish if publish else self.store.put)(key, blob)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return False
        self._tally.add("writes")
        self._tally.add("bytes_written", len(blob))
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
        if identity.program is not None:
            try:  # without it the entry serves this jaxlib only (`xlacache rewarm` skips it)
                fields["program_text"], fields["program"] = identity.program()
            except Exception as exc:  # noqa: BLE001
                counters.record_error("program", exc)
        return fields

    def discard(self, key: str) -> None:
        """Drop an entry that failed to load, so the next write replaces it."""
        if self.readonly:
            return
        try:
            self.store.delete(key)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)

    def close(self) -> None:
        if self._recorder is not None:
            self._recorder.close()
        self._prefetcher.close()
        try:
            self.store.close()
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
