"""The local store: atomic writes, verified reads, eviction, a derived index, many processes."""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import make_blob, make_key, run_python
from xlacache import counters, entry
from xlacache.cache import CompilationCache
from xlacache.errors import CorruptEntryError, NotACacheError, ReadOnlyError
from xlacache.stores.base import PrunePolicy
from xlacache.stores.local import LocalStore


@pytest.fixture
def store(tmp_path):
    with LocalStore(tmp_path / "cache") as s:
        yield s


def test_put_get_round_trip_and_index(store):
    key, blob = make_blob(1)
    assert store.get(key) is None
    store.put(key, blob)
    assert store.get(key) == blob
    assert store.contains(key)
    info = store.stat(key)
    assert (info.key, info.size, info.hits) == (key, len(blob), 1)
    assert [i.key for i in store.list()] == [key]
    assert store.summary().entries == 1
    assert store.delete(key) and not store.contains(key) and store.summary().entries == 0


def test_put_refuses_entry_under_other_key(store):
    _, blob = make_blob(1)
    with pytest.raises(CorruptEntryError):
        store.put(make_key(2), blob)
    assert not store.contains(make_key(2))


def test_not_a_cache(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotACacheError):
        LocalStore(tmp_path / "plain", create=False)
    with pytest.raises(NotACacheError):
        LocalStore(tmp_path / "missing", readonly=True, create=False)


def test_a_reader_before_its_writer_finds_nothing_then_the_writers_entries(tmp_path):
    reader = LocalStore(tmp_path / "later", readonly=True)  # nobody made it yet
    key, blob = make_blob(1)
    assert reader.get(key) is None and list(reader.list()) == [] and reader.leases()
    assert not (tmp_path / "later").exists()  # a reader makes nothing
    with LocalStore(tmp_path / "later") as writer:
        writer.put(key, blob)
    assert reader.get(key) == blob and [i.key for i in reader.list()] == [key]


@pytest.mark.fallback
@pytest.mark.parametrize("damage", ["flip", "truncate", "magic"])
def test_corrupt_entry_is_a_miss_and_is_removed(store, damage):
    key, blob = make_blob(1)
    store.put(key, blob)
    path = store.entry_path(key)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[:4] = b"JUNK"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEntryError):
        store.get(key)
    assert not path.exists() and store.stat(key) is None

    # Through the cache policy: counted, warned once, compiled again, replaced.
    path.write_bytes(bytes(data))
    cache = CompilationCache(store)
    with pytest.warns(counters.CacheWarning, match="corrupt"):
        result = cache.get_or_compile(
            key, compile=lambda: "compiled", load=bytes.decode, serialize=str.encode
        )
    assert result == "compiled"
    figures = counters.snapshot()
    assert figures["errors"] == {"corrupt": 1} and figures["misses"] == 1
    assert entry.decode(path.read_bytes(), key).payload() == b"compiled"


def test_index_deleted_is_rebuilt_from_headers(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as s:
        for n in range(5):
            s.put(*make_blob(n))
    for suffix in ("", "-wal", "-shm"):
        (root / f"index.sqlite{suffix}").unlink(missing_ok=True)
    with LocalStore(root) as s:
        assert s.summary().entries == 5
        assert {i.key for i in s.list()} == {make_key(n) for n in range(5)}


@pytest.mark.fallback
def test_corrupt_index_is_rebuilt(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as s:
        for n in range(3):
            s.put(*make_blob(n))
    for suffix in ("-wal", "-shm"):
        (root / f"index.sqlite{suffix}").unlink(missing_ok=True)
    (root / "index.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.warns(counters.CacheWarning, match="index"), LocalStore(root) as s:
        assert s.summary().entries == 3
    assert counters.snapshot()["errors"]["index"] >= 1


def test_reads_work_without_index(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as s:
        key, blob = make_blob(1)
        s.put(key, blob)
    (root / "index.sqlite").unlink()
    with LocalStore(root, readonly=True) as ro:
        assert ro.get(key) == blob
        assert [i.key for i in ro.list()] == [key]
    assert not (root / "index.sqlite").exists()  # read-only created nothing


def test_readonly_never_writes(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as s:
        key, blob = make_blob(1)
        s.put(key, blob)
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    with LocalStore(root, readonly=True) as ro:
        assert ro.get(key) == blob
        with pytest.raises(ReadOnlyError):
            ro.put(*make_blob(2))
        with pytest.raises(ReadOnlyError):
            ro.delete(key)
        path = ro.entry_path(key)
        path.write_bytes(path.read_bytes()[:-3])  # damage it behind the store's back
        with pytest.raises(CorruptEntryError):
            ro.get(key)
        assert path.exists()  # read-only: reported, not removed
    after = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    assert [p for p, _ in before] == [p for p, _ in after]


def test_size_cap_evicts_least_recently_used(tmp_path):
    blobs = [make_blob(n) for n in range(4)]
    size = len(blobs[0][1])
    with LocalStore(tmp_path / "c", max_size=int(size * 3.5)) as s:
        for key, blob in blobs[:3]:
            s.put(key, blob)
        s.get(blobs[0][0])  # 0 is now the most recently used; 1 is the least
        time.sleep(0.01)
        s.put(*blobs[3])
        assert {i.key for i in s.list()} == {blobs[n][0] for n in (0, 2, 3)}
        assert not s.contains(blobs[1][0])


def test_prune_by_age_and_use(tmp_path):
    now = time.time()
    with LocalStore(tmp_path / "c") as s:
        s.put(*make_blob(1, created=now - 10 * 86400))
        s.put(*make_blob(2, created=now - 3600))
        s.put(*make_blob(3))
        dry = s.prune(PrunePolicy(older_than=7 * 86400), dry_run=True)
        assert [i.key for i in dry] == [make_key(1)] and s.contains(make_key(1))
        s.prune(PrunePolicy(older_than=7 * 86400))
        assert not s.contains(make_key(1))
        s.prune(PrunePolicy(unused_for=60))
        assert [i.key for i in s.list()] == [make_key(3)]


def test_verify_and_repair(tmp_path):
    with LocalStore(tmp_path / "c") as s:
        for n in range(3):
            s.put(*make_blob(n))
        path = s.entry_path(make_key(1))
        path.write_bytes(path.read_bytes()[:-10])
        report = s.verify()
        assert report.checked == 3 and report.corrupt == [make_key(1)] and path.exists()
        report = s.verify(repair=True)
        assert report.repaired and not path.exists() and s.summary().entries == 2
        assert s.verify().corrupt == []


CONCURRENT_WORKER = """
import os, sys, json
from xlacache import entry
from xlacache.errors import CorruptEntryError
from xlacache.stores.local import LocalStore
root, worker = sys.argv[1], int(sys.argv[2])
store = LocalStore(root)
keys = [f"{n:064x}" for n in range(6)]
seen = corrupt = 0
for round_ in range(15):
    for key in keys:
        payload = (f"{key}:{worker}:{round_}:".encode()) * 3000
        store.put(key, entry.encode(key, payload, compile_seconds=1.0))
        try:
            blob = store.get(key)
        except CorruptEntryError:
            corrupt += 1
            continue
        if blob is not None:
            body = entry.decode(blob, key).payload()
            assert body.startswith(key.encode() + b":"), body[:80]
            seen += 1
print(json.dumps({"seen": seen, "corrupt": corrupt}))
"""


@pytest.mark.slow
def test_eight_processes_share_one_directory(tmp_path):
    root = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WORKER, str(root), str(w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for w in range(8)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["corrupt"] == 0 and r["seen"] == 90 for r in results)
    with LocalStore(root) as s:
        assert s.verify().corrupt == []
        assert s.summary().entries == 6
        assert sum(i.hits for i in s.list()) == 8 * 90
    assert list((root / "tmp").iterdir()) == []


KILLED_WRITER = """
import os, sys, time
from xlacache import entry
from xlacache.stores import local
real_fsync = os.fsync
def fsync_then_hang(fd):
    real_fsync(fd)
    print("writing", flush=True)
    time.sleep(600)
local.os.fsync = fsync_then_hang
store = local.LocalStore(sys.argv[1])
key = "ab" * 32
store.put(key, entry.encode(key, os.urandom(1 << 22), compile_seconds=3.0))
"""


def test_writer_killed_mid_write_leaves_no_visible_entry(tmp_path):
    root = tmp_path / "c"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"  # the whole temp file is on disk
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    key = "ab" * 32
    assert len(list((root / "tmp").iterdir())) == 1  # never read, and its writer is gone:
    with LocalStore(root) as s:  # a writable open removes it
        assert list((root / "tmp").iterdir()) == []
        assert s.get(key) is None and not s.contains(key)
        assert list(s.list()) == [] and s.verify().corrupt == []
        # A later writer of the same key succeeds.
        blob = entry.encode(key, b"fresh", compile_seconds=1.0)
        s.put(key, blob)
        assert s.get(key) == blob


def test_stale_temp_files_are_cleaned(tmp_path):
    with LocalStore(tmp_path / "c") as s:
        stale = s.tmp_dir / "dead.tmp"
        stale.write_bytes(b"partial")
        os.utime(stale, (time.time() - 7200, time.time() - 7200))
        assert s.verify().stale_temp_files == 1
        s.prune(PrunePolicy())
        assert not stale.exists()


READONLY_MOUNT_READER = """
import json, sys
from xlacache.stores.local import LocalStore
from xlacache.errors import ReadOnlyError
s = LocalStore(sys.argv[1], readonly=True)
blob = s.get(sys.argv[2])
out = {"hit": blob is not None, "listed": [i.key for i in s.list()]}
try:
    LocalStore(sys.argv[1]).put(sys.argv[2], blob)
    out["write"] = "succeeded"
except OSError as exc:
    out["write"] = exc.errno
print(json.dumps(out))
"""


def readonly_mount_prefix(src, dst):
    return ["unshare", "--mount", "--map-root-user", "sh", "-c",
            f'mount --bind -o ro "{src}" "{dst}" && exec "$0" "$@"']  # fmt: skip


def test_readonly_on_a_read_only_mount(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    key, blob = make_blob(1)
    with LocalStore(src) as s:
        s.put(key, blob)
    proc = run_python(READONLY_MOUNT_READER, str(dst), key, prefix=readonly_mount_prefix(src, dst))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["hit"] and out["listed"] == [key]
    assert out["write"] in (errno.EACCES, errno.EROFS)  # refused, whatever root may do


def _plant_file(store: LocalStore, key: str, blob: bytes) -> None:
    """An entry renamed into place whose index row was never written (crash, full disk)."""
    path = store.entry_path(key)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(blob)


def test_index_drift_is_reconciled_on_open_and_counted(tmp_path):
    root = tmp_path / "cache"
    blobs = [make_blob(n, payload=bytes([n]) * 5000, created=1.7e9 + n) for n in range(7)]
    size = len(blobs[0][1])
    assert all(len(b) == size for _, b in blobs)
    with LocalStore(root) as s:
        for key, blob in blobs[:2]:
            s.put(key, blob)
        for key, blob in blobs[2:6]:
            _plant_file(s, key, blob)
        gone = s.entry_path(blobs[1][0])
    gone.unlink()  # and a row whose file is gone
    counters.reset()
    with LocalStore(root, max_size=int(size * 3.5)) as s:
        assert {i.key for i in s.list()} == {k for k, _ in blobs[:6]} - {blobs[1][0]}
        assert s.summary().entries == 5 and s.summary().bytes == 5 * size
        assert counters.snapshot()["index_drift"] == 5
        s.put(*blobs[6])  # a write evicts what the cap says, planted entries included
        on_disk = sum(p.stat().st_size for p in (root / "entries").rglob("*.xlac"))
        assert on_disk <= size * 3.5 and s.summary().bytes == on_disk


def test_key_with_a_trailing_newline_is_malformed(store):
    key, blob = make_blob(1)
    with pytest.raises(ValueError):
        store.entry_path(key + "\n")
    with pytest.raises((ValueError, CorruptEntryError)):
        store.put(key + "\n", blob)


def test_verify_reports_a_file_in_place_of_a_shard_directory(tmp_path):
    with LocalStore(tmp_path / "c") as s:
        s.put(*make_blob(1))
        (s.entries_dir / "ff").write_bytes(b"not a directory")
        report = s.verify()
        assert report.corrupt == ["ff"]
        assert s.verify(repair=True).repaired
        assert not (s.entries_dir / "ff").exists() and s.verify().corrupt == []
        s.put(*make_blob(0xFF << 248))  # the shard works again


def test_verify_reports_the_temp_file_of_a_killed_writer(tmp_path):
    root = tmp_path / "c"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with LocalStore(root, readonly=True) as s:
        assert s.verify().stale_temp_files == 1  # its writer is gone: abandoned, not busy
    with LocalStore(root) as s:
        assert s.verify().stale_temp_files == 0  # opening removed it
        assert list((root / "tmp").iterdir()) == []


def test_each_cache_counts_its_own_figures(tmp_path):
    """``CompilationCache.stats()`` is the cache's own (two caches in one process do not mix);
    the process's ``counters`` get the sum; ``reset`` zeroes the cache's figures only."""
    one = CompilationCache(LocalStore(tmp_path / "one"))
    two = CompilationCache(LocalStore(tmp_path / "two"))
    key = make_key(7)

    def get(cache: CompilationCache) -> str:
        return cache.get_or_compile(key, lambda: "exe", bytes.decode, str.encode)

    assert get(one) == get(one) == get(two) == "exe"  # one: miss then hit; two: miss
    a, b = one.stats(), two.stats()
    assert (a["hits"], a["misses"], a["writes"]) == (1, 1, 1)
    assert (b["hits"], b["misses"], b["writes"]) == (0, 1, 1)
    assert a["bytes_read"] > 0 and b["bytes_read"] == 0 and set(a) <= set(counters.FIELDS)
    figures = counters.snapshot()
    assert (figures["hits"], figures["misses"], figures["writes"]) == (1, 2, 2)
    assert one.stats(reset=True)["hits"] == 1 and one.stats()["hits"] == 0
    assert counters.snapshot()["hits"] == 1


def test_a_cache_stats_names_every_figure_it_counts():
    import ast
    import inspect

    from xlacache import aliases, legacy
    from xlacache import cache as cache_mod

    counted = {
        node.args[0].value
        for part in (cache_mod, aliases, legacy)  # CompilationCache and its parts
        for node in ast.walk(ast.parse(inspect.getsource(part)))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "add"
        and getattr(getattr(node.func, "value", None), "attr", "") == "_tally"
        and isinstance(node.args[0], ast.Constant)
    }
    assert counted and counted == set(cache_mod._OWN_FIGURES)
