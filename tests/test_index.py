"""The local store's SQLite index: O(1) totals, bounded eviction, reads that never write,
one connection per thread, paging in SQL, and a close that is never mistaken for damage."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from tests.conftest import make_blob, make_key, run_python
from xlacache import counters
from xlacache.errors import IndexBusyError, IndexClosedError, StoreIndexError
from xlacache.stores.base import EntryInfo
from xlacache.stores.index import CULL_LIMIT, Index, Limits, LocalIndex
from xlacache.stores.index_hits import HitBuffer
from xlacache.stores.local import LocalStore

WRITES = ("INSERT", "UPDATE", "DELETE", "BEGIN", "REPLACE")


class SqlLog:
    """Every statement run on an index connection, with the thread that ran it, and the
    SQLite VM steps each thread's connection took (a measure of rows visited)."""

    def __init__(self) -> None:
        self.statements: list[tuple[int, str]] = []
        self.steps: dict[int, int] = {}

    def attach(self, db: sqlite3.Connection) -> None:
        thread = threading.get_ident()

        def trace(sql: str) -> None:
            self.statements.append((thread, sql))

        def step() -> int:
            self.steps[thread] = self.steps.get(thread, 0) + 1
            return 0

        db.set_trace_callback(trace)
        db.set_progress_handler(step, 1)

    def writes(self, thread: int) -> list[str]:
        return [
            s for t, s in self.statements if t == thread and s.lstrip().upper().startswith(WRITES)
        ]


@pytest.fixture
def sql_log(monkeypatch) -> SqlLog:
    log = SqlLog()
    real_connect = Index._connect

    def connect(self):
        db = real_connect(self)
        log.attach(db)
        return db

    monkeypatch.setattr(Index, "_connect", connect)
    return log


def _info(n: int, size: int = 1000, last_used: float | None = None) -> EntryInfo:
    return EntryInfo(
        key=make_key(n), size=size, payload_size=2 * size, created=float(n),
        last_used=float(n) if last_used is None else last_used, hits=0,
        compile_seconds=0.5, label=f"e{n}",
    )  # fmt: skip


def test_a_hit_performs_no_sqlite_write_on_the_calling_thread(tmp_path, sql_log):
    with LocalStore(tmp_path / "c") as store:
        key, blob = make_blob(1)
        store.put(key, blob)
        me = threading.get_ident()
        before = len(sql_log.writes(me))
        for _ in range(5):
            assert store.get(key) == blob
        assert sql_log.writes(me)[before:] == []
        assert store.stat(key).hits == 5  # counted (in memory) and visible at once
        store.flush_hits()
    with LocalStore(tmp_path / "c", readonly=True) as ro:
        assert ro.stat(key).hits == 5


def test_a_hit_is_served_while_another_process_holds_the_write_lock(tmp_path):
    with LocalStore(tmp_path / "c") as store:
        key, blob = make_blob(1)
        store.put(key, blob)
        locker = sqlite3.connect(store.index_path, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")  # as a writer in another process would
        try:
            assert store.get(key) == blob
            with pytest.raises(StoreIndexError):
                store._index.flush_hits(busy_seconds=0.05)  # busy: the hit stays buffered
            assert store.stat(key).hits == 1
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        store.flush_hits()
    with LocalStore(tmp_path / "c", readonly=True) as ro:
        assert ro.stat(key).hits == 1


def test_a_new_index_waits_for_another_process_to_let_it_switch_to_wal(tmp_path):
    # SQLite refuses a journal-mode change blocked by another connection's write lock
    # at once, without its busy handler: processes opening a new store together hit it.
    path = tmp_path / "index.sqlite"
    creator = sqlite3.connect(path, isolation_level=None)
    creator.execute("BEGIN IMMEDIATE")  # a rollback-mode lock, as while another process
    # switches the new file to WAL (the race that eight processes opening one store met)
    creator.execute("CREATE TABLE other (x)")
    opened: list[object] = []
    opener = threading.Thread(target=lambda: opened.append(_open_or_error(path)))
    opener.start()
    opener.join(1.0)  # the opener is waiting (or has failed) by now
    creator.execute("COMMIT")
    creator.close()
    opener.join()
    assert isinstance(opened[0], Index), opened
    opened[0].close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()


def _open_or_error(path) -> object:
    try:
        return Index(path)
    except StoreIndexError as exc:
        return exc


def test_totals_are_kept_by_triggers(tmp_path):
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(_info(n) for n in range(10))
    ix.upsert([_info(3, size=5000)])  # a rewrite replaces its size
    ix.remove([make_key(0), make_key(9)])
    ix.note_hit(make_key(4))
    ix.flush_hits()
    s = ix.summary()
    assert (s.entries, s.bytes, s.payload_bytes, s.hits) == (8, 7 * 1000 + 5000, 24000, 1)
    assert s.compile_seconds == pytest.approx(4.0)
    ix.close()


def test_eviction_of_a_10000_entry_index_is_bounded_per_write_and_converges(tmp_path):
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(_info(n) for n in range(10_000))
    cap = 6_000 * 1000
    limits = Limits(max_size=cap)
    evicted: list[str] = []
    writes = 0
    while ix.summary().bytes > cap:
        writes += 1
        assert writes < 10_000 // (CULL_LIMIT - 1) + 2, "eviction does not converge"
        removed = ix.add(_info(20_000 + writes, last_used=1e9 + writes), limits)
        assert 0 < len(removed) <= CULL_LIMIT
        evicted += [r.key for r in removed]
    assert ix.summary().bytes <= cap
    # Least recently used first, and never an entry just written.
    assert evicted == [make_key(n) for n in range(len(evicted))]
    ix.close()


def test_every_lru_choice_is_the_one_selector(tmp_path):
    """Eviction inside a write, prune (the index's SQL and Python's) and prefetch choose
    by one LRU order (ties by key) and one cut: `lru_split`."""
    import random

    from xlacache.entry import FORMAT_VERSION
    from xlacache.prefetch import prefetch_choice
    from xlacache.stores.base import PrunePolicy, lru_split

    rng = random.Random(7)
    infos = [
        _info(n, size=rng.choice((100, 700, 1500)), last_used=float(rng.randrange(6)))
        for n in range(60)
    ]  # fmt: skip  (many ties in last_used)
    total = sum(i.size for i in infos)
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(rng.sample(infos, len(infos)))  # rows in another order than keys
    for cap in (0, 5_000, total // 2, total - 1, total):
        older, recent = lru_split(infos, cap)
        assert sum(i.size for i in recent) <= cap  # and one older more would not fit:
        assert not older or older[-1].size + sum(i.size for i in recent) > cap
        by_sql = ix.select(PrunePolicy(max_size=cap), now=1e9)
        assert [i.key for i in by_sql] == [i.key for i in older]
        assert PrunePolicy(max_size=cap).select(infos, now=1e9) == older
    loadable = {"format_version": FORMAT_VERSION, "jaxlib": "0.10.2"}  # prefetch's other filter
    payload = [EntryInfo(**{**i.to_dict(), "payload_size": i.size, **loadable}) for i in infos]
    assert prefetch_choice(payload, 7, 3_000, jaxlib="0.10.2") == lru_split(payload, 3_000, 7)[1]
    newest = _info(99, size=0, last_used=1e9)
    evicted = ix.add(newest, Limits(max_size=total - 2000, cull_limit=60))
    assert [i.key for i in evicted] == [i.key for i in lru_split(infos, total - 2000)[0]]
    ix.close()


def test_eviction_by_age_is_bounded_too(tmp_path):
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(_info(n) for n in range(100))  # created at 0..99 (1970): all too old
    removed = ix.add(_info(1000, last_used=2e9), Limits(max_age=86400))
    assert len(removed) == CULL_LIMIT and ix.summary().entries == 101 - CULL_LIMIT
    ix.close()


@pytest.mark.slow
def test_list_pages_cost_o_page_not_o_store(tmp_path, sql_log):
    costs = {}
    for entries in (1_000, 10_000):
        ix = Index(tmp_path / f"index-{entries}.sqlite")
        ix.upsert(_info(n) for n in range(entries))
        me = threading.get_ident()
        sql_log.steps.clear()
        page = ix.page(make_key(entries // 2), 10)
        costs[entries] = sql_log.steps.get(me, 0)
        assert [i.key for i in page] == [make_key(entries // 2 + 1 + i) for i in range(10)]
        ix.close()
    assert costs[10_000] < 1.5 * costs[1_000], costs
    assert costs[1_000] < 500, costs  # a page, not a scan


def test_one_connection_per_thread(tmp_path, sql_log):
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert([_info(1)])
    seen = []
    together = threading.Barrier(4)  # all alive at once: four distinct threads

    def read():
        together.wait()
        seen.append(ix.get(make_key(1)).key)
        together.wait()

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [make_key(1)] * 4
    assert len({t for t, _ in sql_log.statements}) == 5  # the main thread and four readers
    ix.close()
    with pytest.raises(IndexClosedError):
        ix.get(make_key(1))


def test_closing_the_store_while_another_thread_reads_never_rebuilds(tmp_path, monkeypatch):
    root = tmp_path / "c"
    with LocalStore(root) as store:
        keys = [store.put(*make_blob(n)) or make_key(n) for n in range(20)]
    rebuilds = []
    real_rebuild = LocalIndex.rebuild
    monkeypatch.setattr(
        LocalIndex, "rebuild", lambda self: rebuilds.append(1) or real_rebuild(self)
    )
    failures: list[BaseException] = []
    for _ in range(40):
        store = LocalStore(root)
        stop = threading.Event()

        def reader(store=store, stop=stop):
            try:
                while not stop.is_set():
                    assert len(list(store.list())) == 20
                    assert store.summary().entries in (0, 20)
                    store.stat(keys[3])
                    store.get(keys[5])
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        thread = threading.Thread(target=reader)
        thread.start()
        store.close()
        stop.set()
        thread.join()
    assert failures == [] and rebuilds == []
    assert not list(root.glob("index.sqlite.corrupt*"))
    assert "index" not in counters.snapshot()["errors"]


FORKING = """
import os, sys
from xlacache.stores.base import EntryInfo
from xlacache.stores.index import Index
path, key = sys.argv[1], "ab" * 32
ix = Index(path)
ix.upsert([EntryInfo(key, 10, 20, 1.0, 1.0, 0, 0.5, "x")])
ix.note_hit(key)
pid = os.fork()
if pid == 0:  # the child: the parent's connections and buffered hits are not its own
    ok = ix.get(key).hits == 0 and ix.summary().hits == 0
    ix.note_hit(key)
    ix.close()  # flushes the child's one hit
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
assert ix.get(key).hits == 2  # the parent's buffered hit plus the child's flushed one
ix.close()
ro = Index(path, readonly=True)
print(ro.get(key).hits)
"""


def test_forked_child_uses_its_own_connections(tmp_path):
    proc = run_python(FORKING, str(tmp_path / "index.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2"]  # one hit from each process, none twice


def test_a_last_flush_waits_for_a_running_one_and_loses_no_hit():
    """At exit the background flush may be mid-write, holding the buffered hits, when
    close's last flush runs: that one waits, and writes what the failed one put back."""
    entered, release, written = threading.Event(), threading.Event(), []

    def write(pending, busy_seconds):
        if not written:  # the background flush: the write lock stays busy
            written.append(None)
            entered.set()
            release.wait(30)
            raise IndexBusyError("busy")
        written.append(sum(hits for hits, _ in pending.values()))

    hits = HitBuffer(write)
    hits.requeue({"k": [5, 0.0]})  # five hits buffered (no background thread: two flushes)
    background = threading.Thread(target=lambda: pytest.raises(IndexBusyError, hits.flush))
    background.start()
    assert entered.wait(30)
    last = threading.Thread(target=hits.flush)
    last.start()
    last.join(0.2)
    release.set()
    background.join(30)
    last.join(30)
    assert written == [None, 5] and hits.total() == 0
