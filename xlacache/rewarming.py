"""`xlacache rewarm`: after a JAX upgrade, compile the stored programs of another jaxlib for
this one, so the first training process of the new version compiles nothing.

Every entry of format 3 keeps its program (the module's canonical text, whose SHA-256 is
its key's ``hlo`` component) and its compile options' recipe (`xlacache.jax_portable`). For
each executable written by another jaxlib (or by `from_jaxlib`) that this process could run
(the same platform, the devices it names present here, of the same kinds), `rewarm_cache`:

1. reads the entry without recording a use, checks it is trusted (`trusted_keys`) and that
   its program is the one its key names;
2. parses the program with the installed JAX and checks it prints back to the same text (a
   program this JAX reads otherwise is reported as ``changed``, never compiled);
3. rebuilds the compile options as this JAX builds them for the recipe, checked to give
   the recipe back (else ``changed``);
4. computes the key exactly as a live process of this version does for that module and
   those options (`jax_bridge.identity`): this version's own environment, this version's
   options. A live process gets a hit only when its own lowering prints to the same text;
5. compiles it on the local devices with JAX's own `compile_or_get_cached`, and stores the
   executable under that key, its header saying ``rewarmed_from`` the source's jaxlib.

It is idempotent and resumable (a key already stored is ``present``), parallel (`jobs`
threads: XLA compiles release the GIL), and single-flight across a pod: a worker compiles
a key under the store's lease for it (`xlacache.flight`), the others wait and then find it
``present``. Works on any store (`stores.open_store`: a directory, ``grpc://``, ``gs://``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from xlacache import counters, entry, jax_bridge, jax_portable
from xlacache.cache import CompilationCache, SingleFlight
from xlacache.errors import ConfigError, ForeignEntryError
from xlacache.flight import ABSENT, Flight, Found, Landing, Lookup
from xlacache.key import program_component
from xlacache.stores.base import EntryInfo, Store

DEFAULT_JOBS = 4  # compiles at once (at most the machine's CPUs)

# What happened to each source entry (`Rewarmed.status`).
REWARMED = "rewarmed"  # compiled and stored under this version's key
PRESENT = "present"  # this version's key was stored already (or by another worker)
CHANGED = "changed"  # this JAX reads the program or its options otherwise: not compiled
NOT_HERE = "not_here"  # another platform or devices than this process has: left alone
NO_PROGRAM = "no_program"  # an entry without a stored program (written before format 3)
UNTRUSTED = "untrusted"  # not signed by a trusted key (trusted_keys)
FAILED = "failed"  # reading, compiling or storing failed (counted in stats()["errors"])
STATUSES = (REWARMED, PRESENT, CHANGED, NOT_HERE, NO_PROGRAM, UNTRUSTED, FAILED)


@dataclass(frozen=True)
class Rewarmed:
    """One source entry, and what rewarming it did."""

    key: str  # the source entry
    label: str
    jaxlib: str  # the source's jaxlib
    status: str  # one of STATUSES
    new_key: str = ""  # this version's key for its program ("" when not known)
    detail: str = ""
    compile_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RewarmReport:
    """What a rewarm did: every source entry's `Rewarmed`, in the order they were chosen."""

    jaxlib: str  # this process's
    results: list[Rewarmed] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = Counter(r.status for r in self.results)
        return {status: found[status] for status in STATUSES}

    @property
    def ok(self) -> bool:
        return not any(r.status == FAILED for r in self.results)

    def to_dict(self) -> dict:
        return {
            "jaxlib": self.jaxlib,
            "entries": len(self.results),
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }


def sources(infos: list[EntryInfo], jaxlib: str, from_jaxlib: str | None) -> list[EntryInfo]:
    """The executables to rewarm: entries of this format written by another jaxlib than
    `jaxlib` (by `from_jaxlib` alone when given), the most recently used first."""
    chosen = [
        i
        for i in infos
        if not i.label.startswith(entry.ALIAS_LABEL_PREFIX)
        and i.format_version == entry.FORMAT_VERSION
        and i.jaxlib
        and (i.jaxlib == from_jaxlib if from_jaxlib else i.jaxlib != jaxlib)
    ]
    return sorted(chosen, key=lambda i: (-i.last_used, i.key))


def rewarm_cache(
    cache: CompilationCache,
    *,
    from_jaxlib: str | None = None,
    jobs: int | None = None,
    progress: Callable[[int, Rewarmed | None], None] | None = None,
) -> RewarmReport:
    """Rewarm `cache`'s store for this process's jaxlib (see the module docstring).
    `progress(total, None)` is called once the sources are chosen, then
    `progress(total, result)` as each is done."""
    from jax._src.lib import version_str

    if cache.readonly:
        raise ConfigError("rewarm stores entries: the cache is read-only")
    chosen = sources(list(cache.store.list()), version_str, from_jaxlib)
    report = RewarmReport(version_str)
    if progress is not None:
        progress(len(chosen), None)
    workers = max(1, min(jobs or DEFAULT_JOBS, os.cpu_count() or 1, len(chosen) or 1))
    with ThreadPoolExecutor(workers, thread_name_prefix="xlacache-rewarm") as pool:
        for result in pool.map(lambda info: _rewarm_one(cache, info), chosen):
            report.results.append(result)
            if progress is not None:
                progress(len(chosen), result)
    return report


def _rewarm_one(cache: CompilationCache, info: EntryInfo) -> Rewarmed:
    def done(status: str, detail: str = "", **more: Any) -> Rewarmed:
        return Rewarmed(info.key, info.label, info.jaxlib, status, detail=detail, **more)

    try:
        blob = cache.store.peek(info.key)  # a tool's read: no use recorded
        if blob is None:
            return done(FAILED, "gone from the store")
        found = entry.decode(blob, info.key, check_body=False)  # the store verified it
    except Exception as exc:  # noqa: BLE001 - counted; the others go on
        counters.record_error("rewarm", exc)
        return done(FAILED, f"cannot read it: {exc}")
    if cache._checked(found).found is not Found.LOADED:
        return done(UNTRUSTED, "not signed by a trusted key")
    try:
        return _rebuild(cache, found, done)
    except Exception as exc:  # noqa: BLE001 - counted; the others go on
        counters.record_error("rewarm", exc)
        return done(FAILED, " ".join(str(exc).split())[:300])


def _rebuild(cache: CompilationCache, found: entry.Entry, done) -> Rewarmed:
    header = found.header
    text = found.program_text()
    if text is None or header.program.get("form") != jax_portable.PROGRAM_FORM:
        return done(NO_PROGRAM, "the entry keeps no program this version reads")
    if program_component(text) != header.components.get("hlo"):
        return done(FAILED, "its stored program is not the one its key names")
    try:
        backend, devices = jax_bridge.entry_devices(header)
        _check_device_kinds(header, devices)
    except ForeignEntryError as exc:
        return done(NOT_HERE, str(exc))
    try:
        module = jax_portable.parse(text)
        options = jax_portable.rebuild_options(header.program["options"], backend, devices)
    except jax_portable.NotRebuildable as exc:
        return done(CHANGED, str(exc))
    ident = jax_bridge.identity(backend, module, devices, options)
    key = ident.key
    if cache.store.contains(key):
        return done(PRESENT, new_key=key)
    landed = _flight(cache, key)
    if landed is not None and landed.landing is Landing.LOADED:
        return done(PRESENT, "stored by another worker meanwhile", new_key=key)
    lease = landed.lease if landed is not None else None
    try:
        start = time.perf_counter()
        executable = jax_bridge.compile_module(backend, module, devices, options)
        seconds = time.perf_counter() - start
        stored = cache.save(
            key,
            lambda: backend.serialize_executable(executable),
            seconds,
            ident.label,
            backend.platform,
            jax_bridge.load_context(options, list(devices.flat)),
            ident,
            publish=lease is not None,
            rewarmed_from=header.jaxlib,
        )
    finally:
        if lease is not None:
            lease.release()
    if not stored:
        return done(FAILED, "storing it failed (see stats()['errors'])", new_key=key)
    return done(REWARMED, new_key=key, compile_seconds=seconds)


def _check_device_kinds(header: entry.Header, devices: Any) -> None:
    """ForeignEntryError unless the entry was compiled for devices of the kinds these are."""
    recorded = header.summary.get("devices", {}).get("kinds")
    here = dict(Counter(d.device_kind for d in devices.flat))
    if isinstance(recorded, dict) and recorded != here:
        raise ForeignEntryError(f"compiled for {recorded} devices, these are {here}")


def _flight(cache: CompilationCache, key: str):
    """The single-flight over this version's key (None: single-flight off, or no leases):
    a worker compiles it under the store's lease, the others wait for its entry."""
    settings: SingleFlight | None = cache.single_flight
    table = cache._lease_table() if settings is not None else None
    if settings is None or table is None:
        return None

    def present() -> Lookup:
        return Lookup(Found.LOADED) if cache.store.contains(key) else ABSENT

    return Flight(settings, table, key, present, readonly=False, label=key[:16]).run()


def cache_for(store: Store, env: dict | None = None) -> CompilationCache:
    """A cache over `store` for rewarming, with the signing and trusted keys and the
    single-flight settings this process's environment gives (XLACACHE_SIGNING_KEY, ...)."""
    from types import SimpleNamespace

    from xlacache import assemble, config

    settings = dict(config.from_env() if env is None else env)
    keys = assemble.load_keys(
        SimpleNamespace(
            signing_key=settings.get("signing_key"), trusted_keys=settings.get("trusted_keys")
        )
    )
    flight = SingleFlight(
        ttl=settings.get("lease_ttl", SingleFlight.ttl),
        max_wait=settings.get("max_wait", SingleFlight.max_wait),
    )
    return CompilationCache(store, **keys, single_flight=flight)


def rewarm(
    store: str | os.PathLike | Store | None = None,
    *,
    from_jaxlib: str | None = None,
    jobs: int | None = None,
    progress: Callable[[int, Rewarmed | None], None] | None = None,
) -> RewarmReport:
    """Compile the stored programs of another jaxlib (or of `from_jaxlib`) for the installed
    one, in `store` (a directory, ``grpc://`` or ``gs://`` URL, or a `Store`; None: this
    process's cache, after `initialize_cache`), so the first process of this version loads
    them instead of compiling. Returns a `RewarmReport`; see `xlacache.rewarming`.

    A store named by URL uses this process's environment for its token, TLS files, signing
    and trusted keys (XLACACHE_TOKEN, XLACACHE_SIGNING_KEY, ...)."""
    if store is None:
        from xlacache import api

        cache = api.get_cache()
        if cache is None:
            raise ConfigError("xlacache.rewarm(): name a store, or call initialize_cache first")
        return rewarm_cache(cache, from_jaxlib=from_jaxlib, jobs=jobs, progress=progress)
    opened = store if isinstance(store, Store) else _open(os.fspath(store))
    cache = cache_for(opened)
    try:
        return rewarm_cache(cache, from_jaxlib=from_jaxlib, jobs=jobs, progress=progress)
    finally:
        if opened is not store:
            cache.close()


def _open(url: str) -> Store:
    from xlacache import config
    from xlacache.stores import is_remote_url, open_store

    options: dict[str, Any] = {"token": config.remote_token()}
    if is_remote_url(url):
        config.quiet_grpc_logging()
        options.update(config.remote_tls_files())
    return open_store(url, **{name: v for name, v in options.items() if v is not None})
