"""A malformed header is a corrupt entry everywhere: never stored, never listed, always reported."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pytest
from cli_helpers import assert_one_line_error, cli_json, run

from tests.conftest import forge_header, make_blob, make_key
from xlacache import entry
from xlacache.errors import CorruptEntryError
from xlacache.stores.base import PrunePolicy
from xlacache.stores.local import LocalStore

BAD_FIELDS = [
    {"created": "yesterday"},
    {"created": -1.0},
    {"created": math.inf},
    {"payload_size": -1},
    {"payload_size": "12"},
    {"payload_size": 1.5},
    {"payload_size": True},
    {"body_size": -5},
    {"compile_seconds": None},
    {"compile_seconds": -3.0},
    {"label": 7},
    {"platform": ["cpu"]},
    {"compression": "gzip"},
    {"format_version": 99},
    {"producer": "me"},
    {"producer": {"host": 1}},
    {"context": []},
    {"key": "ABC"},
    {"payload_sha256": "f" * 63},
    {"unknown_field": 1},
]


@pytest.mark.parametrize("change", BAD_FIELDS, ids=lambda c: json.dumps(c))
def test_decode_refuses_a_malformed_header(change):
    key, blob = make_blob(1)
    bad = forge_header(blob, **change)
    with pytest.raises(CorruptEntryError, match="header"):
        entry.decode(bad, None if "key" in change else key)
    with pytest.raises(CorruptEntryError):
        entry.read_header(bad)


def test_a_missing_field_is_refused():
    _, blob = make_blob(1)
    with pytest.raises(CorruptEntryError, match="created"):
        entry.read_header(forge_header(blob, drop=("created",)))


def test_every_header_field_has_a_check():
    names = {f.name for f in fields(entry.Header)}
    assert names == set(entry.HEADER_CHECKS)


def test_valid_headers_still_decode():
    key, blob = make_blob(2, created=0.0, compile_seconds=0)
    assert entry.decode(blob, key).header.created == 0.0


def _plant(store: LocalStore, n: int, **change) -> str:
    """An entry file with a forged header, written behind the store's back."""
    key, blob = make_blob(n)
    path = store.entry_path(key)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(forge_header(blob, **change))
    return key


def test_local_store_never_stores_and_never_lists_a_malformed_entry(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root, max_size=10**9) as store:
        key, blob = make_blob(1)
        with pytest.raises(CorruptEntryError):
            store.put(key, forge_header(blob, created="yesterday"))
        assert not store.contains(key)
        good = [make_blob(n) for n in range(2, 5)]
        for k, b in good:
            store.put(k, b)
        bad = [_plant(store, 10, created="yesterday"), _plant(store, 11, payload_size=-1)]
    with LocalStore(root, max_size=10**9) as store:  # opening reconciles: bad files stay out
        assert {i.key for i in store.list()} == {k for k, _ in good}
        assert store.summary().entries == 3
        assert store.stat(bad[0]) is None
        with pytest.raises(CorruptEntryError):
            store.get(bad[1])
        assert sorted(store.verify().corrupt) == sorted(bad[:1])  # bad[1] was removed by get
        size = max(len(b) for _, b in good)
        removed = store.prune(PrunePolicy(max_size=size))
        assert len(removed) == 2 and store.summary().entries == 1
        report = store.verify(repair=True)
        assert report.corrupt == bad[:1] and not store.entry_path(bad[0]).exists()


def test_cli_inspect_prune_verify_survive_a_malformed_entry(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as store:
        for n in range(3):
            store.put(*make_blob(n))
        bad = _plant(store, 20, created="yesterday")
    assert cli_json("inspect", root)["total"] == 3
    assert cli_json("stats", root)["entries"] == 3
    assert cli_json("prune", root, "--max-size", "0", "--dry-run")["count"] == 3
    result = run("verify", root, "--json")
    assert json.loads(result.stdout)["corrupt"] == [bad]
    assert_one_line_error(result, 1)
    assert cli_json("verify", root, "--repair")["corrupt"] == [bad]
    assert cli_json("verify", root)["corrupt"] == []
    assert make_key(20) == bad


@pytest.mark.fallback
def test_a_tier_never_copies_a_malformed_entry_from_its_remote(tmp_path):
    from xlacache import counters
    from xlacache.stores.tiered import TieredStore

    remote = LocalStore(tmp_path / "remote")  # any store: all verify with entry.verify
    key = _plant(remote, 30, payload_size=-1)
    tier = TieredStore(LocalStore(tmp_path / "local"), remote)
    with pytest.warns(counters.CacheWarning, match="corrupt"):
        assert tier.get(key) is None
    assert not tier.local.contains(key)
    assert counters.snapshot()["errors"] == {"corrupt": 1}
    tier.close()
