"""Single-flight in CompilationCache: workers that miss one key at once compile it once.

In-process, with threads standing in for workers and plain bytes for executables; the
pods of real JAX processes are in test_pod_flight.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import make_key
from tests.waiting import wait_for
from xlacache import counters
from xlacache.cache import CompilationCache, SingleFlight
from xlacache.errors import StoreUnavailableError
from xlacache.stores.leases import HeldLease, LeaseTable, MemoryLeases
from xlacache.stores.local import LocalStore

KEY = make_key(1)


class Compiler:
    """A compile that takes `seconds` and counts its calls."""

    def __init__(self, seconds: float = 0.5, result: bytes = b"exe") -> None:
        self.seconds = seconds
        self.result = result
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            self.calls += 1
        time.sleep(self.seconds)
        return self.result


def get(cache: CompilationCache, compile, key: str = KEY):
    return cache.get_or_compile(key, compile, load=lambda p: b"loaded:" + p, serialize=bytes)


def in_threads(n: int, fn) -> list:
    results: dict[int, object] = {}
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait(30)
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == n, "a worker did not finish"
    return [results[i] for i in range(n)]


def with_table(store: LocalStore, table: LeaseTable) -> LocalStore:
    store.leases = lambda: table  # the store's leases, replaced for this test
    return store


@pytest.mark.slow
def test_threads_missing_one_key_compile_it_once(tmp_path):
    store = LocalStore(tmp_path / "c")
    cache = CompilationCache(store, single_flight=SingleFlight(ttl=5))
    compiler = Compiler(seconds=1.0)
    results = in_threads(6, lambda i: get(cache, compiler))
    assert compiler.calls == 1
    assert sorted(results) == [b"exe"] + [b"loaded:exe"] * 5
    figures = counters.snapshot()
    assert figures["compiles_avoided"] == 5 and figures["misses"] == 1
    assert figures["hits"] == 5 and figures["wait_seconds"] > 0
    assert figures["errors"] == {}
    assert not (tmp_path / "c" / "leases" / f"{KEY}.lock").exists()  # released, removed


def test_without_single_flight_every_thread_compiles(tmp_path):
    cache = CompilationCache(LocalStore(tmp_path / "c"))
    compiler = Compiler(seconds=0.5)
    in_threads(4, lambda i: get(cache, compiler))
    assert compiler.calls == 4 and counters.snapshot()["compiles_avoided"] == 0


@pytest.mark.slow
def test_waiters_of_a_holder_that_stores_nothing_compile_at_once(tmp_path):
    # Compiles below min_compile_seconds are not stored: the waiters, finding no entry
    # when the holder lets go, compile without taking turns on the lease.
    store = LocalStore(tmp_path / "c")
    cache = CompilationCache(store, min_compile_seconds=60, single_flight=SingleFlight(ttl=5))
    compiler = Compiler(seconds=0.5)
    results = in_threads(4, lambda i: get(cache, compiler))
    assert results == [b"exe"] * 4 and compiler.calls == 4
    assert list(store.list()) == []


@pytest.mark.slow
def test_a_holder_whose_compile_fails_lets_the_waiters_compile(tmp_path):
    store = LocalStore(tmp_path / "c")
    cache = CompilationCache(store, single_flight=SingleFlight(ttl=5))
    calls = []

    def compile_():
        calls.append(1)
        time.sleep(0.5)
        if len(calls) == 1:
            raise RuntimeError("the user's program does not compile")
        return b"exe"

    results = in_threads(3, lambda i: get(cache, compile_))
    errors = [r for r in results if isinstance(r, RuntimeError)]
    assert len(errors) == 1 and len(calls) >= 2
    assert all(r in (b"exe", b"loaded:exe") for r in results if r not in errors)


@pytest.mark.slow
def test_an_expired_lease_is_taken_over_and_counted(tmp_path):
    table = MemoryLeases()
    cache = CompilationCache(
        with_table(LocalStore(tmp_path / "c"), table), single_flight=SingleFlight(ttl=5)
    )
    assert table.acquire(KEY, "a-holder-that-died", 1.0).granted  # never renewed
    compiler = Compiler(seconds=0.1)
    assert get(cache, compiler) == b"exe"
    figures = counters.snapshot()
    assert compiler.calls == 1 and figures["leases_taken_over"] == 1
    assert figures["wait_seconds"] > 0 and figures["compiles_avoided"] == 0


@pytest.mark.fallback
def test_every_wait_has_a_deadline(tmp_path):
    table = MemoryLeases()
    store = with_table(LocalStore(tmp_path / "c"), table)
    assert table.acquire(KEY, "a-hung-holder", 5).granted
    hung = HeldLease(table, KEY, "a-hung-holder", ttl=5)  # alive, renewing, never storing
    try:
        cache = CompilationCache(store, single_flight=SingleFlight(ttl=5, max_wait=0.6))
        compiler = Compiler(seconds=0.0)
        with pytest.warns(counters.CacheWarning, match="wait_timeout"):
            assert get(cache, compiler) == b"exe"
    finally:
        hung.release()
    figures = counters.snapshot()
    assert compiler.calls == 1 and figures["wait_timeouts"] == 1
    assert figures["errors"] == {"wait_timeout": 1}


class BrokenLeases(MemoryLeases):
    def acquire(self, name, holder, ttl):
        raise StoreUnavailableError("lease server unreachable")


@pytest.mark.fallback
def test_lease_failures_degrade_to_compiling(tmp_path):
    store = with_table(LocalStore(tmp_path / "c"), BrokenLeases())
    cache = CompilationCache(store, single_flight=SingleFlight())
    compiler = Compiler(seconds=0.0)
    with pytest.warns(counters.CacheWarning, match="remote error"):
        assert get(cache, compiler) == b"exe"
    assert compiler.calls == 1 and counters.snapshot()["errors"] == {"remote": 1}
    assert store.contains(KEY)  # stored as usual


@pytest.mark.slow
def test_a_reader_waits_for_the_writers_entry(tmp_path):
    writer_store = LocalStore(tmp_path / "c")
    writer = CompilationCache(writer_store, single_flight=SingleFlight(ttl=5))
    reader = CompilationCache(
        LocalStore(tmp_path / "c", readonly=True),
        single_flight=SingleFlight(ttl=5, writer_grace=30),
    )
    writer_compiler, reader_compiler = Compiler(seconds=1.0), Compiler(seconds=0.0)

    def worker(i: int):
        if i == 0:
            time.sleep(0.3)  # the writer comes late: the reader waits for it
            return get(writer, writer_compiler)
        return get(reader, reader_compiler)

    assert in_threads(2, worker) == [b"exe", b"loaded:exe"]
    assert reader_compiler.calls == 0 and writer_compiler.calls == 1
    assert counters.snapshot()["compiles_avoided"] == 1


def test_a_reader_with_no_writer_in_sight_compiles_at_once(tmp_path):
    LocalStore(tmp_path / "c").close()
    reader = CompilationCache(
        LocalStore(tmp_path / "c", readonly=True), single_flight=SingleFlight()
    )
    compiler = Compiler(seconds=0.0)
    assert get(reader, compiler) == b"exe"
    figures = counters.snapshot()
    assert compiler.calls == 1 and figures["wait_seconds"] == 0 and figures["writes"] == 0
    assert not (tmp_path / "c" / "leases").exists()  # a reader takes no lease


def test_a_reader_stops_waiting_when_the_writer_lets_go_without_an_entry(tmp_path):
    table = MemoryLeases()
    store = with_table(LocalStore(tmp_path / "c", create=True), table)
    assert table.acquire(KEY, "writer", 5).granted
    holder = HeldLease(table, KEY, "writer", ttl=5)
    threading.Timer(0.5, holder.release).start()
    reader = CompilationCache(
        with_table(LocalStore(tmp_path / "c", readonly=True), table),
        single_flight=SingleFlight(ttl=5, writer_grace=600),
    )
    compiler = Compiler(seconds=0.0)
    assert get(reader, compiler) == b"exe"  # not after the 600 s grace
    assert compiler.calls == 1 and store.get(KEY) is None


def test_a_reader_waits_for_no_writer_in_a_directory_nobody_made(tmp_path):
    # A reader's own directory (per-process caches): no writer will ever publish there.
    reader = CompilationCache(
        LocalStore(tmp_path / "mine", readonly=True),
        single_flight=SingleFlight(writer_grace=600),
    )
    compiler = Compiler(seconds=0.0)
    assert get(reader, compiler) == b"exe"  # at once, not after 600 s
    assert compiler.calls == 1 and not (tmp_path / "mine").exists()


# -- waking, dying, taking over (issue 17) -------------------------------------------------

HOLDER = """
import sys, time
from xlacache.stores.dir_leases import DirLeases
from xlacache.stores.leases import HeldLease
table = DirLeases(sys.argv[1])
assert table.acquire(sys.argv[2], "dying-holder", 600).granted
lease = HeldLease(table, sys.argv[2], "dying-holder", 600)
open(sys.argv[3], "w").close()
time.sleep(600)
"""


def test_a_waiter_is_woken_by_the_entrys_arrival(tmp_path):
    # Two workers on one directory: the waiter blocks on the holder's lock and is woken
    # when the holder stores its entry and lets go: a wake, not a poll.
    cache = CompilationCache(LocalStore(tmp_path / "c"), single_flight=SingleFlight(ttl=5))
    compiler = Compiler(seconds=0.5)
    assert sorted(in_threads(2, lambda i: get(cache, compiler))) == [b"exe", b"loaded:exe"]
    figures = counters.snapshot()
    assert compiler.calls == 1 and figures["compiles_avoided"] == 1
    assert figures["lease_wakes"] == 1 and figures["lease_polls"] == 0
    assert 0 < figures["wake_seconds"] <= figures["wait_seconds"]


def _killed_holder_pod(tmp_path, waiters: int, kill) -> tuple[list, Compiler]:
    """`waiters` workers (each its own store over one directory) miss the key a holder in
    another process has leased; `kill(proc)` kills it (mid-compile)."""
    import subprocess
    import sys

    root = tmp_path / "c"
    LocalStore(root).close()
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), KEY, str(ready)])
    try:
        wait_for(ready.exists, 60, "the holder to take the lease", procs=[proc])
        caches = [
            CompilationCache(LocalStore(root), single_flight=SingleFlight(ttl=600, max_wait=60))
            for _ in range(waiters)
        ]
        compiler = Compiler(seconds=0.05)
        kill(proc)
        results = in_threads(waiters, lambda i: get(caches[i], compiler))
    finally:
        proc.kill()
        proc.wait(30)
    return results, compiler


def test_a_killed_holder_is_taken_over_by_one_waiter(tmp_path):
    """The fast variant (make test-fast) of the test below: two waiters, the holder killed
    once one of them blocks on its lock."""

    def kill_once_blocked(proc) -> None:
        def blocked() -> bool:
            return any(t.name == "xlacache-lease-wait" for t in threading.enumerate())

        def killer() -> None:
            wait_for(blocked, 60, "a waiter to block on the holder's lock")
            proc.kill()

        threading.Thread(target=killer, daemon=True).start()

    results, compiler = _killed_holder_pod(tmp_path, 2, kill_once_blocked)
    assert compiler.calls == 1 and sorted(results) == [b"exe", b"loaded:exe"]
    figures = counters.snapshot()
    assert figures["leases_taken_over"] == 1 and figures["compiles_avoided"] == 1


@pytest.mark.slow
def test_of_the_waiters_of_a_killed_holder_exactly_one_compiles(tmp_path):
    results, compiler = _killed_holder_pod(
        tmp_path, 4, lambda proc: threading.Timer(1.0, proc.kill).start()
    )  # mid-compile, while all four wait
    # The dead holder's lease ended long before its 600 s ttl; one waiter took it over
    # and compiled, the others waited for it and loaded its entry.
    assert compiler.calls == 1
    assert sorted(results) == [b"exe"] + [b"loaded:exe"] * 3
    figures = counters.snapshot()
    assert figures["leases_taken_over"] == 1 and figures["compiles_avoided"] == 3


def test_a_reader_alone_says_it_waits_for_a_writer_and_when_it_gives_up(tmp_path, caplog):
    LocalStore(tmp_path / "c").close()  # a writer made the store, but is not running
    reader = CompilationCache(
        LocalStore(tmp_path / "c", readonly=True),
        single_flight=SingleFlight(writer_grace=0.3),
    )
    compiler = Compiler(seconds=0.0)
    with caplog.at_level("DEBUG", logger="xlacache"):
        assert get(reader, compiler) == b"exe"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 2
    assert lines[0][0] == "DEBUG" and "waiting up to 0.3 s for a writer" in lines[0][1]
    assert KEY[:16] in lines[0][1]
    assert lines[1][0] == "WARNING" and "no writer compiled" in lines[1][1]
    assert "compiling it here" in lines[1][1]
    caplog.clear()
    waited = counters.snapshot()["wait_seconds"]
    with caplog.at_level("WARNING", logger="xlacache"):
        assert get(reader, compiler, key=make_key(2)) == b"exe"
    assert caplog.records == []  # no writer in sight: the next miss does not wait
    assert compiler.calls == 2 and counters.snapshot()["wait_seconds"] == waited


def test_a_healthy_pods_reader_logs_no_warning_while_its_writer_comes(tmp_path, caplog):
    """The reader gets there first, its writer takes the key within the grace: a debug line,
    no warning (issue 27, 9)."""
    LocalStore(tmp_path / "c").close()
    reader = CompilationCache(LocalStore(tmp_path / "c", readonly=True),
                              single_flight=SingleFlight(writer_grace=60))  # fmt: skip
    writer = CompilationCache(LocalStore(tmp_path / "c"), single_flight=SingleFlight())
    got: list = []
    with caplog.at_level("DEBUG", logger="xlacache"):
        thread = threading.Thread(target=lambda: got.append(get(reader, Compiler(0.0))))
        thread.start()
        wait_for(lambda: any("waiting up to" in r.getMessage() for r in caplog.records), 30,
                 "the reader to wait for a writer")  # fmt: skip
        assert get(writer, Compiler(0.2)) == b"exe"
        thread.join(60)
    assert got == [b"loaded:exe"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == []
