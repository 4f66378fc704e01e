"""A verified entry that the loader rejects: counted, replaced once, never stored unloadable.

The real JAX case (a planted entry with a garbage executable, three processes) is
tests/test_jax_cache.py::test_an_entry_jax_cannot_load_is_counted_explained_and_replaced.
"""

import signal
import warnings

import pytest

from tests.conftest import make_blob
from xlacache import counters, entry
from xlacache.cache import CompilationCache, Outcome
from xlacache.stores.local import LocalStore
from xlacache.stores.tiered import TieredStore


def loader(rejects: set[bytes]):
    def load(payload: bytes) -> bytes:
        if payload in rejects:
            raise RuntimeError("INVALID_ARGUMENT: cannot deserialize")
        return payload

    return load


def ask(cache: CompilationCache, key: str, fresh: bytes, rejects: set[bytes]):
    compiles = []

    def compile_():
        compiles.append(1)
        return fresh

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = cache.get_or_compile_outcome(key, compile_, loader(rejects), lambda e: e)
    return got, len(compiles)


@pytest.mark.fallback
def test_a_rejected_entry_is_replaced_by_the_fresh_compile(tmp_path):
    store = LocalStore(tmp_path / "c")
    key, blob = make_blob(1, payload=b"rejected")
    store.put(key, blob)
    cache = CompilationCache(store)
    got, compiles = ask(cache, key, b"fresh", {b"rejected"})
    assert (got.value, got.outcome, compiles) == (b"fresh", Outcome.STORED, 1)
    assert counters.snapshot()["errors"] == {"load_rejected": 1}
    assert entry.decode(store.get(key), key).payload() == b"fresh"
    got, compiles = ask(cache, key, b"fresh", {b"rejected"})
    assert (got.value, got.outcome, compiles) == (b"fresh", Outcome.HIT, 0)
    assert counters.snapshot()["errors"] == {"load_rejected": 1}


@pytest.mark.fallback
def test_a_fresh_executable_the_loader_rejects_too_is_not_stored(tmp_path):
    store = LocalStore(tmp_path / "c")
    key, blob = make_blob(1, payload=b"rejected")
    store.put(key, blob)
    cache = CompilationCache(store)
    got, compiles = ask(cache, key, b"also rejected", {b"rejected", b"also rejected"})
    assert (got.value, got.outcome, compiles) == (b"also rejected", Outcome.COMPILED, 1)
    assert counters.snapshot()["errors"] == {"load_rejected": 1, "unloadable": 1}
    assert entry.decode(store.get(key), key).payload() == b"rejected"  # left as it was


def _replaced_in_the_shared_store(shared, tmp_path) -> None:
    """A verified entry the loader rejects, in the shared store: a worker replaces it there
    too (discarding it first: a server keeps what it has, "already present", and a bucket
    skips a large entry it holds), so the next worker loads the replacement."""
    stale, fresh = b"rejected" * (1 << 17), b"fresh" * (1 << 18)  # 1 MiB and more: "large"
    key, blob = make_blob(1, payload=stale)
    shared.put(key, blob)
    first = TieredStore(LocalStore(tmp_path / "worker-1"), shared)
    got, compiles = ask(CompilationCache(first), key, fresh, {stale})
    assert (got.outcome, compiles) == (Outcome.STORED, 1)
    assert first.flush(60)
    assert entry.decode(shared.get(key), key).payload() == fresh
    second = TieredStore(LocalStore(tmp_path / "worker-2"), shared)
    got, compiles = ask(CompilationCache(second), key, b"never", {stale})
    assert (got.value, got.outcome, compiles) == (fresh, Outcome.HIT, 0)
    assert counters.snapshot()["errors"] == {"load_rejected": 1}


@pytest.mark.slow  # a server to start (the bucket's variant runs in make test-fast)
@pytest.mark.fallback
def test_a_rejected_entry_is_replaced_through_a_server(tmp_path):
    from tests.server.srvutil import start_server
    from xlacache.stores.remote import GrpcStore

    server = start_server(tmp_path)
    try:
        _replaced_in_the_shared_store(GrpcStore(server.url, timeout=30), tmp_path)
    finally:
        server.stop(signal.SIGKILL)


@pytest.mark.fallback
def test_a_rejected_entry_is_replaced_in_a_bucket(tmp_path, gcs):
    from xlacache.stores.gcs import GCSStore

    _replaced_in_the_shared_store(GCSStore(gcs.url()), tmp_path)
