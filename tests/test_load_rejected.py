"""A verified entry that the loader rejects: counted, replaced once, never stored unloadable.

The real JAX case (a planted entry with a garbage executable, three processes) is
tests/test_jax_cache.py::test_an_entry_jax_cannot_load_is_counted_explained_and_replaced.
"""

import warnings

import pytest

from tests.conftest import make_blob
from xlacache import counters, entry
from xlacache.cache import CompilationCache, Outcome
from xlacache.stores.local import LocalStore


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
