"""Read-only writes nothing: not the tier's local directory on a remote hit, not the store
of a read-only cache, whatever the store itself would allow."""

from __future__ import annotations

import pytest

from tests.conftest import make_blob, make_key
from tests.stores.backends import tree_snapshot
from xlacache import counters
from xlacache.cache import CompilationCache
from xlacache.stores.local import LocalStore
from xlacache.stores.tiered import TieredStore


class RecordingStore(LocalStore):
    """A real LocalStore (writable) that records every write asked of it."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.writes: list[tuple[str, str]] = []

    def put(self, key, blob):
        self.writes.append(("put", key))
        return super().put(key, blob)

    def publish(self, key, blob):
        self.writes.append(("publish", key))
        return super().publish(key, blob)

    def put_stream(self, key, chunks):
        self.writes.append(("put_stream", key))
        return super().put_stream(key, chunks)

    def put_file(self, key, *args, **kw):
        self.writes.append(("put_file", key))
        return super().put_file(key, *args, **kw)

    def delete(self, key):
        self.writes.append(("delete", key))
        return super().delete(key)


def test_a_readonly_tier_copies_no_remote_hit_into_its_writable_local_directory(tmp_path):
    key, blob = make_blob(1)
    with LocalStore(tmp_path / "remote") as remote:
        remote.put(key, blob)
    local = LocalStore(tmp_path / "local")  # writable: only the tier's flag forbids writes
    tier = TieredStore(local, LocalStore(tmp_path / "remote", readonly=True), readonly=True)
    before = tree_snapshot(local.root, exclude=("index.sqlite-shm",))
    assert tier.contains(key) and tier.stat(key) is not None
    assert tier.get(key) == blob and tier.get(key) == blob  # a remote hit, twice
    assert tier.peek(key) == blob
    local.flush_hits()
    assert counters.snapshot()["remote_hits"] >= 2  # served by the remote tier
    assert not local.contains(key) and list(local.list()) == []
    assert tree_snapshot(local.root, exclude=("index.sqlite-shm",)) == before
    tier.close()


@pytest.mark.fallback
def test_a_readonly_cache_never_writes_its_store(tmp_path):
    store = RecordingStore(tmp_path / "c")  # writable: only the cache's flag forbids writes
    hit, broken = make_blob(1), make_blob(2, payload=b"broken")
    store.put(*hit)
    store.put(*broken)
    store.writes.clear()
    cache = CompilationCache(store, readonly=True)
    assert cache.readonly

    def load(payload: bytes) -> bytes:
        if payload == b"broken":
            raise ValueError("does not load")  # a failed load: a writer would drop the entry
        return b"loaded"

    compiled = cache.get_or_compile(make_key(3), compile=lambda: b"exe", load=load,
                                    serialize=lambda e: e)  # fmt: skip
    assert compiled == b"exe"  # a miss: compiled, not stored
    assert cache.get_or_compile(hit[0], compile=lambda: b"x", load=load, serialize=bytes) == (
        b"loaded"
    )
    with pytest.warns(counters.CacheWarning, match="rejected .*; compiling it, not replacing"):
        again = cache.get_or_compile(broken[0], compile=lambda: b"again", load=load,
                                     serialize=lambda e: e)  # fmt: skip
    assert again == b"again"
    assert not cache.save_alias(make_key(4), {"target": make_key(3)})
    cache.discard(hit[0])
    cache.prefetch(lambda e: b"prefetched", ready=lambda: True).join(30)
    cache.close()
    assert store.writes == []
    assert counters.snapshot()["misses"] == 2
    store.close()
