"""The public entry points: `initialize_cache` and `stats`.

The settings are `xlacache.config.SETTINGS` (initialize_cache's keyword arguments are
derived from it); the cache is put together by `xlacache.assemble.open_cache`; this
module keeps the process's one cache and installs it into JAX.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

from xlacache import assemble, counters, jax_bridge, variables
from xlacache import config as config_mod
from xlacache.cache import CompilationCache
from xlacache.config import CacheConfig
from xlacache.errors import ConfigError

log = logging.getLogger("xlacache")
_lock = threading.Lock()
_config: CacheConfig | None = None
_cache: CompilationCache | None = None


def initialize_cache(
    path: str | os.PathLike | None = None, readonly: bool | None = None, **settings
) -> None:
    """Route every XLA compilation of this process through a persistent cache.

    Call once, before the first compile. `path` is this process's local cache
    directory; `readonly=True` never writes (a shared read-only mount in an SPMD
    pod); `remote` names a shared store (``grpc://host:7070``, ``gs://bucket/prefix``)
    read after the local one and written in the background. Unset arguments come from
    the environment. Calling again with the same settings does nothing; with other
    settings it raises ConfigError. A cache that cannot be opened is reported once and
    compiling goes on without it; a signing or trusted key that cannot be read raises
    ConfigError.

    `prefetch` (default 32) executables used most recently are loaded in the background
    once JAX's backend is up. `explain=True` logs why each miss missed and records it
    (docs/why-recompile.md). `signing_key` signs every entry written; with
    `trusted_keys`, only entries signed by one of them are loaded (docs/trust.md).
    Pods (docs/pods.md): by default the process of rank 0 writes and the others read
    (`role`, `readonly`); workers that miss one program at once compile it once
    (`single_flight`, `lease_ttl`, `max_wait`, `writer_grace`). `tls_ca`, `tls_cert`
    and `tls_key` name PEM files for a ``grpcs://`` server (docs/trust.md).
    """
    global _config, _cache
    unknown = sorted(set(settings) - set(config_mod.BY_NAME) - {"path", "readonly"})
    if unknown:
        raise TypeError(f"initialize_cache() got an unexpected keyword argument {unknown[0]!r}")
    variables.check_environment()  # a misspelled XLACACHE_* setting: one warning
    resolved = config_mod.resolve(path, readonly=readonly, rank=_jax_rank(), **settings)
    with _lock:
        if _config is not None:
            if resolved == _config:
                return
            raise ConfigError(
                f"xlacache is already initialized ({_config.describe()}); "
                f"cannot re-initialize with ({resolved.describe()})"
            )
        counters.set_strict(resolved.strict)  # opening the stores already follows it
        try:
            cache = assemble.open_cache(resolved)  # ConfigError (keys): nothing is set
        except BaseException:
            counters.set_strict(None)
            raise
        _config = resolved
        log.info("xlacache: %s (%s)", resolved.role, resolved.role_origin)
        if cache is None:
            return
        _cache = cache
        jax_bridge.install(cache, prefetch=resolved.prefetch)
        atexit.register(_close)


initialize_cache.__signature__ = config_mod.signature()  # type: ignore[attr-defined]
initialize_cache.__doc__ = f"{initialize_cache.__doc__ or ''}\n    {config_mod.argument_docs()}\n"


def stats() -> dict:
    """This process's cache figures: every key of `counters.FIELDS` (hits, misses,
    writes, bytes, compile seconds spent and saved, ...; zero until counted), errors by
    kind, explained misses by reason, and `initialized`: False until `initialize_cache`
    ran (then nothing is cached and every figure stays zero). In strict mode it raises
    what a background thread kept (`counters.raise_deferred`)."""
    counters.raise_deferred()  # strict mode: what a background thread hid
    return {"initialized": _config is not None, **counters.snapshot()}


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
        counters.set_strict(None)
