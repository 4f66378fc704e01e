"""`xlacache inspect --would-load`: what a worker starting on a cache loads ahead, exactly
what `CompilationCache.prefetch` loads (issue 20, item 10)."""

from __future__ import annotations

from tests.cli_helpers import assert_one_line_error, cli_json, make_cache, put_entry, run
from xlacache.cache import CompilationCache
from xlacache.stores.local import LocalStore


def _prefetched(root, limit: int) -> list[str]:
    """The keys a worker's prefetch loads, in order (the real thread, a recording loader)."""
    loaded: list[str] = []
    with LocalStore(root, readonly=True) as store:
        cache = CompilationCache(store, readonly=True)
        thread = cache.prefetch(lambda e: loaded.append(e.header.key), lambda: True, limit)
        thread.join(60)
        cache.close()
    return loaded


def test_would_load_is_what_prefetch_loads(tmp_path, monkeypatch):
    root = tmp_path / "c"
    keys = make_cache(root, ["a", "b", "c", "d"])  # created 0, 1, 2, 3 days ago
    with LocalStore(root) as store:
        put_entry(store, "alias", label="alias:jit_a")  # never prefetched
    shown = cli_json("inspect", root, "--would-load", "--prefetch", "3")
    assert shown["prefetch"] == 3 and shown["total"] == 5
    would = [e["key"] for e in shown["entries"]]
    assert would == [keys[2], keys[1], keys[0]]  # the 3 most recent, oldest use first
    assert would == _prefetched(root, 3)
    assert shown["bytes"] == sum(e["payload_size"] for e in shown["entries"])
    monkeypatch.setenv("XLACACHE_PREFETCH", "0")  # the worker's own setting by default
    assert cli_json("inspect", root, "--would-load")["entries"] == []
    table = run("inspect", root, "--would-load", "--prefetch", "1")
    assert table.exit_code == 0 and "prefetch=1 loads 1 entry" in " ".join(table.stdout.split())


def test_would_load_refuses_a_shared_store():
    """PATH is the worker's own directory: a server or a bucket is a one-line error, not an
    answer about some other cache (issue 27, 9)."""
    for url in ("grpc://127.0.0.1:1", "grpcs://cache:7070", "gs://bucket/prefix"):
        line = assert_one_line_error(run("inspect", url, "--would-load"), 2)
        assert "worker's own cache directory" in line and url in line, line
