"""From resolved settings to a ready cache: the one place a cache is put together.

`open_cache(settings)` opens the local directory (falling back to read-only where it
may not be written), the shared store (a server or a bucket) and the tier of both, loads
the signing and trusted keys, and gives the `CompilationCache` its explainer and
single-flight waits. `xlacache.api` calls it once per process; tests and tools may call
it to get a cache without installing it into JAX.
"""

from __future__ import annotations

import errno
import os

from xlacache import config, counters
from xlacache.cache import CompilationCache, SingleFlight
from xlacache.config import CacheConfig
from xlacache.errors import ConfigError, kind_of
from xlacache.stores import Store, is_remote_url, open_store
from xlacache.stores.local import LocalStore


def open_cache(settings: CacheConfig) -> CompilationCache | None:
    """The cache `settings` describe, or None when no store could be opened (reported:
    compiling goes on without a cache). Unreadable keys raise ConfigError."""
    keys = load_keys(settings)
    check_job(settings)
    store = open_stores(settings)
    if store is None:
        return None
    return CompilationCache(
        store,
        settings.readonly,
        settings.min_compile_seconds,
        **keys,
        explainer=explainer(settings, store),
        keep_module_text=settings.keep_hlo,
        single_flight=single_flight(settings),
        job=settings.job,
    )


def load_keys(settings: CacheConfig) -> dict:
    """The signer and trusted keys the settings name (ConfigError when unreadable)."""
    if settings.signing_key is None and settings.trusted_keys is None:
        return {}
    from xlacache import signing

    keys: dict = {}
    if settings.signing_key is not None:
        keys["signer"] = signing.load_signing_key(settings.signing_key)
    if settings.trusted_keys is not None:
        keys["trusted"] = signing.load_trusted_keys(settings.trusted_keys)
    return keys


def check_job(settings: CacheConfig) -> None:
    """A job name the shared store's manifests accept (ConfigError otherwise)."""
    if settings.job is None:
        return
    from xlacache.stores.jobs import check_job as check_name

    try:
        check_name(settings.job)
    except ValueError as exc:
        raise ConfigError(f"job: {exc}") from None


def single_flight(settings: CacheConfig) -> SingleFlight | None:
    """The waits for other workers' compiles (leases of the store), unless turned off."""
    if not settings.single_flight:
        return None
    return SingleFlight(
        ttl=settings.lease_ttl, max_wait=settings.max_wait, writer_grace=settings.writer_grace
    )


def explainer(settings: CacheConfig, store: Store):
    """An Explainer when asked for: it compares with the local tier, records misses in
    the local directory unless this process is read-only, and reports them to the
    shared store where it takes them (a server always, a bucket unless read-only)."""
    if not settings.explain:
        return None
    from xlacache.explain import MISS_LOG, Explainer
    from xlacache.stores.tiered import tiers

    local, shared = tiers(store)
    writable = local is not None and not local.readonly and not settings.readonly
    reporters = [shared] if shared is not None and shared.can_report_misses else []
    log = local.root / MISS_LOG if writable else None
    return Explainer(local if local is not None else store, log, reporters=reporters)


def open_stores(settings: CacheConfig) -> Store | None:
    """The local directory, the shared store, or the tier of both; a store that cannot be
    opened is reported (one warning, a counter) and left out."""
    local: Store | None = None
    try:
        local = open_local(settings)
    except Exception as exc:  # noqa: BLE001 - no cache is better than no training
        counters.record_error(kind_of(exc), exc)
    if settings.remote is None:
        return local
    options: dict = {"token": settings.token}
    if is_remote_url(settings.remote):  # a server: its TLS files; quiet gRPC (one warning)
        config.quiet_grpc_logging()
        options.update(tls_ca=settings.tls_ca, tls_cert=settings.tls_cert, tls_key=settings.tls_key)
    try:
        remote = open_store(settings.remote, readonly=settings.readonly, **options)
    except Exception as exc:  # noqa: BLE001
        counters.record_error("remote", exc)
        return local
    if local is None:
        return remote
    from xlacache.stores.tiered import TieredStore

    return TieredStore(local, remote, readonly=settings.readonly)


def open_local(settings: CacheConfig) -> LocalStore | None:
    """The local directory; read-only where this process may not write it (one warning)."""
    options = {"max_size": settings.max_size, "max_age": settings.max_age}
    if settings.readonly:
        if settings.remote is not None and not os.path.exists(settings.path):
            return None  # a reader that creates no directory: the remote alone serves it
        return LocalStore(settings.path, readonly=True, **options)
    try:
        return LocalStore(settings.path, **options)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        # A directory we may read but not write (e.g. a shared read-only mount).
        counters.record_error(
            "permission",
            exc,
            f"xlacache: cannot write the cache directory {settings.path} "
            f"({exc.strerror}): falling back to read-only (hits are served, nothing is "
            "stored; pass readonly=True or XLACACHE_READONLY=1 to say so and drop this warning)",
        )
        return LocalStore(settings.path, readonly=True, **options)
