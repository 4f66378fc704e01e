"""The public entry points: `initialize_cache` and `stats`."""

from __future__ import annotations

import atexit
import errno
import logging
import os
import threading
from collections.abc import Sequence

from xlacache import config as config_mod
from xlacache import counters, jax_bridge
from xlacache.cache import CompilationCache, SingleFlight
from xlacache.config import CacheConfig
from xlacache.errors import ConfigError, kind_of
from xlacache.stores import Store, open_store
from xlacache.stores.local import LocalStore

log = logging.getLogger("xlacache")
_lock = threading.Lock()
_config: CacheConfig | None = None
_cache: CompilationCache | None = None


def initialize_cache(
    path: str | os.PathLike | None = None,
    readonly: bool | None = None,
    *,
    remote: str | None = None,
    token: str | None = None,
    max_size: int | str | None = None,
    max_age: float | str | None = None,
    min_compile_seconds: float | None = None,
    prefetch: int | None = None,
    job: str | None = None,
    explain: bool | None = None,
    keep_hlo: bool | None = None,
    signing_key: str | os.PathLike | None = None,
    trusted_keys: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
    role: str | None = None,
    single_flight: bool | None = None,
    lease_ttl: float | str | None = None,
    max_wait: float | str | None = None,
    writer_grace: float | str | None = None,
) -> None:
    """Route every XLA compilation of this process through a persistent cache.

    Call once, before the first compile. `path` is this process's local cache
    directory; `readonly=True` never writes (a shared read-only mount in an SPMD
    pod); `remote` names a shared store (``grpc://host:7070``) read after the local
    one and written in the background. Unset arguments come from the environment
    (see `xlacache.config`). Calling again with the same settings does nothing; with
    other settings it raises ConfigError. A cache that cannot be opened is reported
    once and compiling goes on without it. `prefetch` (default 32) executables used
    most recently are loaded in the background once JAX's backend is up, so a
    restarted job finds them ready; 0 turns that off. `job` names this process's job
    (XLACACHE_JOB): with a shared store, a writer records the executables it uses under
    it, and a new worker of the job (an empty local directory) fetches those in the
    background at start-up (docs/pods.md).

    `explain=True` logs why each miss missed (one line) and records it for
    `xlacache explain`; `keep_hlo=True` keeps the stripped module text in entries so
    explanations show differing lines. `signing_key` (key text or file) signs every
    entry written; with `trusted_keys`, only entries signed by one of them are loaded:
    others are misses, counted as errors["untrusted"] (see docs/trust.md). A key that
    cannot be read raises ConfigError.

    Pods (docs/pods.md): `role` is "writer" or "reader" (`readonly=True` is "reader");
    by default the process of rank 0 writes and the others read (the rank from a
    running jax.distributed job, else RANK / TPU_WORKER_ID / CLOUD_TPU_TASK_ID; no rank:
    a writer). A reader writes nothing anywhere. With `single_flight` (default on),
    workers sharing a store that miss one program at once compile it once: the others
    wait (at most `max_wait`, default 30 min) for its entry; a compiler that dies is
    replaced within `lease_ttl` (30 s). A reader waits up to `writer_grace` (10 s when
    its role comes from `role` or a rank, else 0) for a writer to start on a program.
    """
    global _config, _cache
    settings = config_mod.resolve(
        path,
        readonly=readonly,
        remote=remote,
        token=token,
        max_size=max_size,
        max_age=max_age,
        min_compile_seconds=min_compile_seconds,
        prefetch=prefetch,
        job=job,
        explain=explain,
        keep_hlo=keep_hlo,
        signing_key=signing_key,
        trusted_keys=trusted_keys,
        role=role,
        single_flight=single_flight,
        lease_ttl=lease_ttl,
        max_wait=max_wait,
        writer_grace=writer_grace,
        rank=_jax_rank(),
    )
    keys = _load_keys(settings)
    _check_job(settings)
    with _lock:
        if _config is not None:
            if settings == _config:
                return
            raise ConfigError(
                f"xlacache is already initialized ({_config.describe()}); "
                f"cannot re-initialize with ({settings.describe()})"
            )
        _config = settings
        log.info("xlacache: %s (%s)", settings.role, settings.role_origin)
        store = _open(settings)
        if store is None:
            return
        _cache = CompilationCache(
            store,
            settings.readonly,
            settings.min_compile_seconds,
            **keys,
            explainer=_explainer(settings, store),
            keep_module_text=settings.keep_hlo,
            single_flight=_single_flight(settings),
            job=settings.job,
        )
        jax_bridge.install(_cache, prefetch=settings.prefetch)
        atexit.register(_close)


def stats() -> dict:
    """This process's cache figures: hits, misses, writes, bytes read and written,
    compile seconds spent and saved, load seconds, and errors by kind."""
    return counters.snapshot()


def get_config() -> CacheConfig | None:
    """The settings initialize_cache resolved (role and role_origin included), or None."""
    return _config


def get_cache() -> CompilationCache | None:
    """The process's cache once initialized (None before, or if it could not open)."""
    return _cache


def is_initialized() -> bool:
    return _config is not None


def _jax_rank() -> tuple[int, str] | None:
    index = jax_bridge.process_index()
    return None if index is None else (index, "jax.process_index()")


def _single_flight(settings: CacheConfig) -> SingleFlight | None:
    if not settings.single_flight:
        return None
    return SingleFlight(
        ttl=settings.lease_ttl, max_wait=settings.max_wait, writer_grace=settings.writer_grace
    )


def _check_job(settings: CacheConfig) -> None:
    if settings.job is None:
        return
    from xlacache.stores.jobs import check_job

    try:
        check_job(settings.job)
    except ValueError as exc:
        raise ConfigError(f"job: {exc}") from None


def _load_keys(settings: CacheConfig) -> dict:
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


def _explainer(settings: CacheConfig, store: Store):
    """An Explainer when asked for: it compares with the local tier, records misses in
    the local directory unless this process is read-only, and reports them to the
    shared store where it takes them (a server always, a bucket unless read-only)."""
    if not settings.explain:
        return None
    from xlacache.explain import MISS_LOG, Explainer
    from xlacache.stores.tiered import TieredStore

    tiered = isinstance(store, TieredStore)
    local = store.local if tiered else store
    shared = store.remote if tiered else None if isinstance(store, LocalStore) else store
    writable = isinstance(local, LocalStore) and not local.readonly and not settings.readonly
    reporters = [shared] if shared is not None and shared.can_report_misses else []
    return Explainer(local, local.root / MISS_LOG if writable else None, reporters=reporters)


def _open(settings: CacheConfig) -> Store | None:
    local: Store | None = None
    try:
        local = _open_local(settings)
    except Exception as exc:  # noqa: BLE001 - no cache is better than no training
        counters.record_error(kind_of(exc), exc)
    if settings.remote is None:
        return local
    try:
        remote = open_store(settings.remote, readonly=settings.readonly, token=settings.token)
    except Exception as exc:  # noqa: BLE001
        counters.record_error("remote", exc)
        return local
    if local is None:
        return remote
    from xlacache.stores.tiered import TieredStore

    return TieredStore(local, remote, readonly=settings.readonly)


def _open_local(settings: CacheConfig) -> LocalStore | None:
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
        counters.record_error("permission", exc)
        return LocalStore(settings.path, readonly=True, **options)


def _close() -> None:
    if _cache is not None:
        _cache.close()


def _reset_for_tests() -> None:
    """Forget the process's cache (tests only)."""
    global _config, _cache
    with _lock:
        jax_bridge.uninstall()
        if _cache is not None:
            _cache.close()
        _config = None
        _cache = None
