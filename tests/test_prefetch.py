"""Prefetching: a restarted job finds the executables of its last run already loaded."""

import json
import threading

import pytest

from tests.conftest import JAX_PROGRAM, make_key, run_json
from tests.waiting import wait_for
from xlacache import counters, entry
from xlacache.cache import CompilationCache
from xlacache.stores.local import LocalStore


def put(store, n, context, payload=b"exe", **header):
    store.put(make_key(n), entry.encode(make_key(n), payload + bytes([n]), compile_seconds=2.0,
                                        context=context, **header))  # fmt: skip


def never(*_):
    raise AssertionError("must not be called")


def test_prefetched_executable_serves_the_request(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {"devices": [0]})
    cache = CompilationCache(store)
    loaded = []
    thread = cache.prefetch(lambda e: loaded.append(e.header.key) or b"loaded", ready=lambda: True)
    thread.join(10)
    assert loaded == [make_key(1)]
    got = cache.get_or_compile(make_key(1), compile=never, load=never, serialize=never,
                               context={"devices": [0]})  # fmt: skip
    assert got == b"loaded"
    figures = counters.snapshot()
    assert figures["hits"] == figures["prefetch_hits"] == 1 and figures["misses"] == 0


def test_other_context_is_not_served_from_prefetch(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {"devices": [0]})
    cache = CompilationCache(store)
    cache.prefetch(lambda e: b"for device 0", ready=lambda: True).join(10)
    got = cache.get_or_compile(make_key(1), compile=never, load=lambda p: b"loaded here",
                               serialize=never, context={"devices": [1]})  # fmt: skip
    assert got == b"loaded here"
    assert counters.snapshot()["prefetch_hits"] == 0


def test_prefetch_waits_for_the_runtime(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {})
    cache = CompilationCache(store)
    up, asked_twice = threading.Event(), threading.Event()
    asked, loaded = [], []

    def ready() -> bool:
        asked.append(up.is_set())
        if len(asked) == 2:
            asked_twice.set()
        return asked[-1]

    thread = cache.prefetch(lambda e: loaded.append(e.header.key) or b"x", ready=ready,
                            patience=600)  # fmt: skip
    assert asked_twice.wait(30)  # it asked, was told no, and asked again...
    assert thread.is_alive() and loaded == []  # ...loading nothing meanwhile
    up.set()
    thread.join(30)
    assert loaded == [make_key(1)] and not thread.is_alive()


def test_prefetch_gives_up_on_a_runtime_that_never_comes(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {})
    cache = CompilationCache(store)
    asked = []
    thread = cache.prefetch(never, ready=lambda: asked.append(1) and False, patience=0.05)
    thread.join(30)
    assert not thread.is_alive() and asked
    # Gave up: the request loads for itself.
    got = cache.get_or_compile(make_key(1), compile=never, load=lambda p: b"mine", serialize=never)
    assert got == b"mine"
    assert counters.snapshot()["prefetch_hits"] == 0


def test_a_request_before_the_prefetch_reaches_it_loads_itself(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {})
    cache = CompilationCache(store)
    cache.prefetch(lambda e: b"prefetched", ready=lambda: False, patience=30)
    got = cache.get_or_compile(make_key(1), compile=never, load=lambda p: b"mine", serialize=never)
    assert got == b"mine"  # no waiting on a prefetch that has not started


def test_only_the_most_recently_used_are_prefetched(tmp_path):
    store = LocalStore(tmp_path / "c")
    for n in (4, 0, 3, 1, 2):  # created (and never used since) at 1000 + n
        put(store, n, {}, created=1000.0 + n)
    cache = CompilationCache(store)
    loaded = []
    cache.prefetch(lambda e: loaded.append(e.header.key), ready=lambda: True, limit=2).join(10)
    assert loaded == [make_key(3), make_key(4)]  # in the order they were last used


@pytest.mark.slow
def test_second_process_gets_every_program_from_prefetch(tmp_path):
    cold = run_json(JAX_PROGRAM, str(tmp_path / "c"))
    warm = run_json(JAX_PROGRAM, str(tmp_path / "c"))
    assert warm["stats"]["misses"] == 0 and warm["loss"] == cold["loss"]
    assert warm["stats"]["prefetch_hits"] == warm["stats"]["hits"] == cold["stats"]["misses"]
    off = run_json(JAX_PROGRAM, str(tmp_path / "c"), json.dumps({"prefetch": 0}))
    assert off["stats"]["prefetch_hits"] == 0 and off["stats"]["hits"] == cold["stats"]["misses"]


# -- what prefetch counts (issue 20, bugs 1 and 2) -------------------------------------------


def test_a_prefetched_entry_is_a_use_only_once_a_request_takes_it(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {})
    put(store, 2, {})
    before = {i.key: i for i in store.list()}
    cache = CompilationCache(store)
    cache.prefetch(lambda e: b"loaded", ready=lambda: True).join(10)
    assert cache.get_or_compile(make_key(2), compile=never, load=never, serialize=never,
                                context={}) == b"loaded"  # fmt: skip
    store.flush_hits()
    after = {i.key: i for i in store.list()}
    # Prefetched and never asked for: not a hit, not a use (inspect, LRU, prune --unused-for).
    assert after[make_key(1)].hits == 0
    assert after[make_key(1)].last_used == before[make_key(1)].last_used
    assert after[make_key(2)].hits == 1
    assert after[make_key(2)].last_used > before[make_key(2)].last_used
    figures = counters.snapshot()
    assert figures["hits"] == figures["prefetch_hits"] == 1
    assert figures["bytes_read"] == store.stat(make_key(2)).size  # what was used, once


@pytest.mark.fallback
def test_an_untrusted_entry_is_counted_once(tmp_path):
    from tests.test_signing import keypair

    _, trusted, _, _ = keypair("ed25519")
    store = LocalStore(tmp_path / "c")
    for n in range(3):
        put(store, n, {})  # unsigned
    cache = CompilationCache(store, readonly=True, trusted=trusted)
    with pytest.warns(counters.CacheWarning, match="untrusted"):
        cache.prefetch(never, ready=lambda: True).join(10)  # never deserialized
        for n in range(3):
            got = cache.get_or_compile(make_key(n), compile=lambda: b"compiled", load=never,
                                       serialize=never, context={})  # fmt: skip
            assert got == b"compiled"
    figures = counters.snapshot()
    assert figures["errors"] == {"untrusted": 3}
    assert figures["bytes_read"] == 0 and figures["hits"] == 0


def test_a_request_during_the_prefetch_of_its_entry_reads_it_once(tmp_path):
    store = LocalStore(tmp_path / "c")
    put(store, 1, {})
    cache = CompilationCache(store)
    loading, release = threading.Event(), threading.Event()

    def slow_load(found):
        loading.set()
        release.wait(10)
        return b"prefetched"

    thread = cache.prefetch(slow_load, ready=lambda: True)
    assert loading.wait(10)
    got = []
    request = threading.Thread(target=lambda: got.append(cache.get_or_compile(
        make_key(1), compile=never, load=never, serialize=never, context={})))  # fmt: skip
    request.start()
    # The request waits on the load under way (and says so) before the load may end.
    wait_for(lambda: counters.snapshot()["coalesced_reads"], 30, "the request to wait")
    release.set()
    request.join(30)
    thread.join(10)
    assert got == [b"prefetched"]
    figures = counters.snapshot()
    assert figures["coalesced_reads"] == 1 and figures["prefetch_hits"] == 1
    assert figures["bytes_read"] == store.stat(make_key(1)).size
