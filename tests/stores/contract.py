"""The store contract: one mixin of tests every backend passes (fsspec's tests/abstract).

A backend's test module subclasses `StoreContract` and provides:

- a `store` fixture: a fresh, empty, writable store;
- `readonly_view(store)`: a read-only store over the same entries;
- `corrupt(store, key)`: damage the stored entry's body behind the store's back;
- `snapshot(store)`: a comparable picture of everything stored (and, where the
  backend can tell, of every write request), to check that nothing was written;
- `child_store_code(store)`: (Python source defining `store`, environment) that opens
  the same store in another process;
- optionally `settle(store)`: make finished writes visible (background uploads);
- `corrupt_get_raises`: False where get turns a corrupt entry into a miss (tiers).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import make_blob, make_key
from tests.waiting import wait_for
from xlacache import counters, entry
from xlacache.errors import CorruptEntryError, ReadOnlyError
from xlacache.stores.base import PrunePolicy, Store

DAY = 86400.0
CHILD_SECONDS = 120.0

_CHILD = """
import os, sys, time
from pathlib import Path
from xlacache import entry
key, out, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
{open_code}
blob = entry.encode(key, os.urandom(30000), compile_seconds=1.0, label=f"writer-{{os.getpid()}}")
out.write_bytes(blob)
ready.touch()
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)
store.put(key, blob)
store.close()
print("stored")
"""


def aged_blob(n: int, age: float, size: int = 2000) -> tuple[str, bytes]:
    """An entry created `age` seconds ago, with an incompressible payload of `size` bytes."""
    return make_blob(n, payload=os.urandom(size), created=time.time() - age)


class StoreContract:
    """Tests every Store backend passes. See the module docstring for the hooks."""

    corrupt_get_raises = True
    readonly_reports_misses = False  # a server takes miss reports from read-only clients

    # -- hooks ------------------------------------------------------------------------

    def readonly_view(self, store: Store) -> Store:
        raise NotImplementedError

    def corrupt(self, store: Store, key: str) -> None:
        raise NotImplementedError

    def snapshot(self, store: Store):
        raise NotImplementedError

    def child_store_code(self, store: Store) -> tuple[str, dict[str, str]]:
        raise NotImplementedError

    def settle(self, store: Store) -> None:
        """Make finished writes visible everywhere (nothing to do for most stores)."""

    # -- helpers ------------------------------------------------------------------------

    def put(self, store: Store, key: str, blob: bytes) -> None:
        store.put(key, blob)
        self.settle(store)

    def corrupt_get(self, store: Store, key: str) -> None:
        """A get of a corrupt entry: raises, or (tiers) is a counted miss."""
        if self.corrupt_get_raises:
            with pytest.raises(CorruptEntryError):
                store.get(key)
        else:
            before = counters.snapshot()["errors"].get("corrupt", 0)
            assert store.get(key) is None
            assert counters.snapshot()["errors"].get("corrupt", 0) > before

    # -- round trip and missing keys ----------------------------------------------------

    def test_round_trip(self, store):
        key, blob = make_blob(1, compile_seconds=2.5, label="jit_round_trip")
        assert store.get(key) is None
        self.put(store, key, blob)
        assert store.get(key) == blob
        assert store.contains(key)
        header = entry.read_header(blob)
        info = store.stat(key)
        assert (info.key, info.size, info.payload_size) == (key, len(blob), header.payload_size)
        assert (info.compile_seconds, info.label) == (2.5, "jit_round_trip")
        assert info.created == pytest.approx(header.created, abs=1e-3)
        assert info.last_used >= info.created

    def test_missing_keys(self, store):
        key = make_key(404)
        assert store.get(key) is None
        assert not store.contains(key)
        assert store.stat(key) is None
        assert store.delete(key) is False
        assert list(store.list()) == []

    def test_malformed_key_is_refused(self, store):
        with pytest.raises(ValueError):
            store.get("../../etc/passwd")

    def test_put_refuses_an_entry_under_another_key(self, store):
        _, blob = make_blob(1)
        with pytest.raises(CorruptEntryError):
            store.put(make_key(2), blob)
        self.settle(store)
        assert not store.contains(make_key(2))

    def test_rewriting_a_key_keeps_one_valid_entry(self, store):
        key, first = make_blob(3)
        _, second = make_blob(3)  # same key, other bytes (compiles are not deterministic)
        self.put(store, key, first)
        self.put(store, key, second)
        got = store.get(key)
        assert got in (first, second)
        entry.verify(got, key)
        assert [i.key for i in store.list()] == [key]

    # -- corrupt entries ----------------------------------------------------------------

    @pytest.mark.fallback
    def test_corrupt_entry_is_reported_and_removed(self, store):
        key, blob = make_blob(5)
        self.put(store, key, blob)
        self.corrupt(store, key)
        self.corrupt_get(store, key)
        assert store.get(key) is None
        assert not store.contains(key)
        self.put(store, key, blob)  # the next write replaces it
        assert store.get(key) == blob

    @pytest.mark.fallback
    def test_corrupt_entry_is_kept_by_a_readonly_store(self, store):
        key, blob = make_blob(6)
        self.put(store, key, blob)
        self.corrupt(store, key)
        reader = self.readonly_view(store)
        try:
            self.corrupt_get(reader, key)
            assert reader.contains(key)
        finally:
            reader.close()
        assert store.contains(key)

    # -- concurrency --------------------------------------------------------------------

    def test_concurrent_put_of_one_key_from_threads(self, store):
        key = make_key(7)
        blobs = [make_blob(7, payload=os.urandom(20000))[1] for _ in range(8)]
        barrier = threading.Barrier(len(blobs))
        errors: list[BaseException] = []

        def write(blob: bytes) -> None:
            try:
                barrier.wait(30)
                store.put(key, blob)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(b,)) for b in blobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        self.settle(store)
        got = store.get(key)
        assert got in blobs
        entry.verify(got, key)
        assert [i.key for i in store.list()] == [key]

    @pytest.mark.slow
    def test_concurrent_put_of_one_key_from_processes(self, store, tmp_path):
        self.check_concurrent_writers(store, tmp_path, writers=4)

    def check_concurrent_writers(self, store, tmp_path: Path, writers: int) -> list[bytes]:
        """`writers` processes put their own entry under one key at once; one valid entry
        results, byte for byte one of theirs. Returns the blobs they wrote."""
        key = make_key(8)
        open_code, env = self.child_store_code(store)
        script = tmp_path / "writer.py"
        script.write_text(_CHILD.format(open_code=textwrap.dedent(open_code)))
        go = tmp_path / "go"
        procs, outs, readies = [], [], []
        for i in range(writers):
            outs.append(tmp_path / f"blob-{i}")
            readies.append(tmp_path / f"ready-{i}")
            args = [sys.executable, str(script), key, str(outs[i]), str(readies[i]), str(go)]
            child_env = {**os.environ, **env}
            procs.append(
                subprocess.Popen(
                    args, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            )
        try:
            wait_for(lambda: all(r.exists() for r in readies), CHILD_SECONDS,
                     "every writer to get ready", procs=procs, interval=0.01)  # fmt: skip
            go.touch()  # all at once
            for p in procs:
                out, err = p.communicate(timeout=CHILD_SECONDS)
                assert p.returncode == 0, err.decode()[-3000:]
                assert out.decode().strip() == "stored"
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        self.settle(store)
        blobs = [o.read_bytes() for o in outs]
        got = store.get(key)
        assert got in blobs
        entry.verify(got, key)
        assert [i.key for i in store.list()] == [key]
        return blobs

    # -- listing, stat, delete, summary -------------------------------------------------

    def test_listing_and_paging(self, store):
        blobs = dict(make_blob(n) for n in range(7))
        for key, blob in blobs.items():
            store.put(key, blob)
        self.settle(store)
        infos = list(store.list())
        assert sorted(i.key for i in infos) == sorted(blobs)
        assert {i.key: i.size for i in infos} == {k: len(b) for k, b in blobs.items()}
        if "page_size" in inspect.signature(store.list).parameters:
            paged = [i.key for i in store.list(page_size=2)]
            assert sorted(paged) == sorted(blobs)

    def test_stat_and_delete(self, store):
        key, blob = make_blob(9)
        self.put(store, key, blob)
        assert store.stat(key).size == len(blob)
        assert store.delete(key) is True
        assert store.delete(key) is False
        assert store.stat(key) is None and store.get(key) is None
        assert not store.contains(key)

    def test_summary(self, store):
        blobs = [make_blob(n, compile_seconds=n + 0.5) for n in range(1, 4)]
        for key, blob in blobs:
            store.put(key, blob)
        self.settle(store)
        s = store.summary()
        assert s.entries == 3
        assert s.bytes == sum(len(b) for _, b in blobs)
        assert s.payload_bytes == sum(entry.read_header(b).payload_size for _, b in blobs)
        assert s.compile_seconds == pytest.approx(1.5 + 2.5 + 3.5)

    # -- prune ---------------------------------------------------------------------------

    def _aged(self, store) -> dict[str, tuple[float, bytes]]:
        """Four entries created 40, 30, 20 and 10 days ago: {key: (age, blob)}."""
        made = {}
        for n, days in enumerate((40, 30, 20, 10)):
            key, blob = aged_blob(20 + n, days * DAY)
            store.put(key, blob)
            made[key] = (days, blob)
        self.settle(store)
        return made

    def test_prune_by_age_and_use(self, store):
        made = self._aged(store)
        old = {k for k, (days, _) in made.items() if days > 25}
        listed = {i.key for i in store.prune(PrunePolicy(older_than=25 * DAY), dry_run=True)}
        assert listed == old
        assert {i.key for i in store.list()} == set(made)  # a dry run removes nothing
        removed = {i.key for i in store.prune(PrunePolicy(older_than=25 * DAY))}
        assert removed == old
        self.settle(store)
        assert {i.key for i in store.list()} == set(made) - old
        unused = {i.key for i in store.prune(PrunePolicy(unused_for=15 * DAY))}
        assert unused == {k for k, (days, _) in made.items() if days == 20}

    def test_prune_to_max_size_evicts_least_recently_used(self, store):
        made = self._aged(store)
        sizes = {k: len(b) for k, (_, b) in made.items()}
        newest_two = sorted(made, key=lambda k: made[k][0])[:2]
        cap = sum(sizes[k] for k in newest_two)
        removed = store.prune(PrunePolicy(max_size=cap))
        assert {i.key for i in removed} == set(made) - set(newest_two)
        self.settle(store)
        assert {i.key for i in store.list()} == set(newest_two)
        assert store.summary().bytes <= cap

    def test_prune_stale_and_counts_by_jaxlib(self, store):
        fresh = dict(make_blob(n) for n in range(40, 42))
        old = dict(make_blob(n, summary={"jaxlib": {"version": "0.6.2"}}) for n in (42, 43))
        for key, blob in {**fresh, **old}.items():
            store.put(key, blob)
        self.settle(store)
        jaxlib = entry.read_header(next(iter(fresh.values()))).jaxlib
        counts = {v.jaxlib: (v.entries, v.bytes) for v in store.by_jaxlib()}
        assert counts == {jaxlib: (2, sum(map(len, fresh.values()))),
                          "0.6.2": (2, sum(map(len, old.values())))}  # fmt: skip
        policy = PrunePolicy(stale_for=jaxlib)
        assert {i.key for i in store.prune(policy, dry_run=True)} == set(old)
        assert {i.key for i in store.prune(policy)} == set(old)
        self.settle(store)
        assert {i.key for i in store.list()} == set(fresh)

    # -- verify --------------------------------------------------------------------------

    def test_verify_and_repair(self, store):
        blobs = dict(make_blob(n) for n in range(30, 33))
        for key, blob in blobs.items():
            store.put(key, blob)
        self.settle(store)
        bad = make_key(31)
        self.corrupt(store, bad)
        report = store.verify()
        assert (report.checked, report.corrupt, report.repaired) == (3, [bad], False)
        assert store.contains(bad)  # verify alone removes nothing
        report = store.verify(repair=True)
        assert report.corrupt == [bad] and report.repaired
        self.settle(store)
        clean = store.verify()
        assert (clean.checked, clean.corrupt) == (2, [])
        assert bad not in {i.key for i in store.list()}
        assert all(store.get(k) == b for k, b in blobs.items() if k != bad)

    # -- recorded misses -----------------------------------------------------------------

    @staticmethod
    def miss_record(n: int, **fields) -> dict:
        return {"time": time.time(), "key": make_key(n), "label": f"jit_{n}",
                "reason": "flags", "note": "", "nearest": make_key(n + 1),
                "differences": [{"component": "xla_flags", "details": [f"`--x={n}` added"]}],
                "compared": 2, "host": "h", "pid": 7, **fields}  # fmt: skip

    def test_recorded_misses_come_back_newest_first_and_bounded(self, store):
        assert store.can_report_misses
        for n in (900, 901):
            store.report_miss(self.miss_record(n))
        huge = self.miss_record(
            902,
            note="x" * 20_000,
            differences=[{"component": "hlo", "details": ["d"] * 100}] * 100,
        )
        store.report_miss(huge)
        newest = store.recent_misses(3)
        assert [r["key"] for r in newest] == [make_key(n) for n in (902, 901, 900)]
        assert newest[1]["differences"] == self.miss_record(901)["differences"]
        assert newest[1]["nearest"] == make_key(902) and newest[1]["pid"] == 7
        assert newest[1]["reason"] == "flags" and newest[1]["label"] == "jit_901"
        assert len(newest[0]["note"]) <= 1000 and len(newest[0]["differences"]) <= 16
        assert all(len(d["details"]) <= 12 for d in newest[0]["differences"])
        assert len(store.recent_misses()) >= 3

    def test_a_readonly_store_records_no_misses(self, store):
        store.report_miss(self.miss_record(910))
        before = self.snapshot(store)
        reader = self.readonly_view(store)
        try:
            assert reader.recent_misses(1)[0]["key"] == make_key(910)
            if self.readonly_reports_misses:
                assert reader.can_report_misses
                reader.report_miss(self.miss_record(911))
                assert store.recent_misses(1)[0]["key"] == make_key(911)
                return
            assert not reader.can_report_misses
            with pytest.raises(ReadOnlyError):
                reader.report_miss(self.miss_record(911))
        finally:
            reader.close()
        assert self.snapshot(store) == before

    # -- read-only -----------------------------------------------------------------------

    def test_readonly_refuses_every_write_and_writes_nothing(self, store):
        key, blob = make_blob(40)
        self.put(store, key, blob)
        before = self.snapshot(store)
        reader = self.readonly_view(store)
        try:
            assert reader.readonly
            other_key, other = make_blob(41)
            with pytest.raises(ReadOnlyError):
                reader.put(other_key, other)
            with pytest.raises(ReadOnlyError):
                reader.delete(key)
            with pytest.raises(ReadOnlyError):
                reader.prune(PrunePolicy(max_size=0))
            with pytest.raises(ReadOnlyError):
                reader.verify(repair=True)
            # Reads, listings and dry runs work and write nothing either.
            assert reader.get(key) == blob and reader.get(other_key) is None
            assert reader.contains(key) and reader.stat(key).size == len(blob)
            assert [i.key for i in reader.list()] == [key]
            assert reader.summary().entries == 1
            assert [i.key for i in reader.prune(PrunePolicy(max_size=0), dry_run=True)] == [key]
            assert reader.verify().corrupt == []
        finally:
            reader.close()
        assert self.snapshot(store) == before
        assert not store.contains(other_key)
