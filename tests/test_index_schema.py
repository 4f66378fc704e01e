"""The index schema: migrations from earlier layouts keep their rows; prune chosen in SQL
agrees with `PrunePolicy.select`; entries and bytes by jaxlib version."""

from __future__ import annotations

import random
import sqlite3

import pytest

from tests.conftest import make_blob, make_key
from xlacache import entry
from xlacache.stores import index_schema
from xlacache.stores.base import EntryInfo, PrunePolicy, current_jaxlib
from xlacache.stores.index import Index
from xlacache.stores.local import LocalStore

# The index exactly as xlacache wrote it before issue 18 (schema version 2), DDL copied
# from that version's stores/index.py.
SCHEMA_V2 = """
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY NOT NULL,
    size INTEGER NOT NULL,
    payload_size INTEGER NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    hits INTEGER NOT NULL,
    compile_seconds REAL NOT NULL,
    label TEXT NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS entries_last_used ON entries(last_used);
CREATE INDEX IF NOT EXISTS entries_created ON entries(created);
CREATE TABLE IF NOT EXISTS totals (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    entries INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    payload_bytes INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    compile_seconds REAL NOT NULL
) STRICT;
INSERT OR IGNORE INTO totals VALUES (1, 0, 0, 0, 0, 0.0);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE totals SET entries = entries + 1, bytes = bytes + new.size,
        payload_bytes = payload_bytes + new.payload_size, hits = hits + new.hits,
        compile_seconds = compile_seconds + new.compile_seconds;
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE totals SET entries = entries - 1, bytes = bytes - old.size,
        payload_bytes = payload_bytes - old.payload_size, hits = hits - old.hits,
        compile_seconds = compile_seconds - old.compile_seconds;
END;
CREATE TRIGGER IF NOT EXISTS entries_changed AFTER UPDATE ON entries BEGIN
    UPDATE totals SET bytes = bytes + new.size - old.size,
        payload_bytes = payload_bytes + new.payload_size - old.payload_size,
        hits = hits + new.hits - old.hits,
        compile_seconds = compile_seconds + new.compile_seconds - old.compile_seconds;
END;
PRAGMA user_version = 2;
"""
OLD_JAXLIB = "0.6.2"


def _old_blob(n: int) -> tuple[str, bytes]:
    return make_blob(n, summary={"jaxlib": {"version": OLD_JAXLIB}}, platform_name="cpu")


def _write_v2_index(root, infos: list[tuple]) -> None:
    db = sqlite3.connect(root / "index.sqlite", isolation_level=None)
    db.executescript(SCHEMA_V2)
    db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)", infos)
    db.close()


def test_a_version_2_index_is_migrated_keeping_hits_and_last_use(tmp_path):
    root = tmp_path / "c"
    with LocalStore(root) as store:
        store.put(*make_blob(1))
        store.put(*_old_blob(2))
        rows = [tuple(list(store.stat(make_key(n)).to_dict().values())[:8]) for n in (1, 2)]
    for suffix in ("", "-wal", "-shm"):
        (root / f"index.sqlite{suffix}").unlink(missing_ok=True)
    # What training recorded, which no entry file holds: hits and last use.
    rows = [(*r[:4], 5000.0 + i, 7 + i, *r[6:]) for i, r in enumerate(rows)]
    _write_v2_index(root, rows)

    with LocalStore(root) as store:
        assert store.index.db is not None and not store.index.db.fresh
        one, two = store.stat(make_key(1)), store.stat(make_key(2))
        assert (one.hits, one.last_used, two.hits, two.last_used) == (7, 5000.0, 8, 5001.0)
        assert (one.jaxlib, two.jaxlib) == (current_jaxlib(), OLD_JAXLIB)  # backfilled
        assert two.platform == "cpu" and two.format_version == entry.FORMAT_VERSION
        assert store.summary().hits == 15  # the totals survive too
    db = sqlite3.connect(root / "index.sqlite")
    assert index_schema.version(db) == index_schema.VERSION
    assert db.execute("SELECT count(*) FROM entries WHERE jaxlib = ''").fetchone()[0] == 0
    db.close()


def test_an_index_of_an_unknown_version_starts_afresh(tmp_path):
    path = tmp_path / "index.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE entries (key TEXT)")
    db.execute("INSERT INTO entries VALUES ('x')")
    db.execute("PRAGMA user_version = 1")
    db.close()
    ix = Index(path)
    assert ix.fresh and ix.all() == [] and ix.summary().entries == 0
    ix.close()


def _random_infos(count: int, seed: int) -> list[EntryInfo]:
    rng = random.Random(seed)
    return [
        EntryInfo(
            key=make_key(n),
            size=rng.randrange(1, 1000),
            payload_size=5,
            created=rng.choice([10.0, 50.0, 90.0]),
            last_used=float(rng.randrange(100, 130)),
            hits=0,
            compile_seconds=0.0,
            label="",
            format_version=rng.choice([0, 2, 3, 3]),
            jaxlib=rng.choice(["", "0.10.2", "0.10.2", "0.9.2"]),
            platform="cpu",
            rewarmed_from=rng.choice(["", "", "0.9.2"]),
        )  # fmt: skip
        for n in range(count)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_the_sql_choice_is_the_policy_choice(tmp_path, seed):
    infos = _random_infos(300, seed)
    rng = random.Random(seed)
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(infos)
    for policy in [
        PrunePolicy(max_size=rng.randrange(0, 150_000)),
        PrunePolicy(stale_for="0.10.2"),
        PrunePolicy(older_than=40.0, max_size=50_000),
        PrunePolicy(unused_for=10.0, stale_for="0.9.2", max_size=20_000),
        PrunePolicy(max_size=10**9),
    ]:
        want = {i.key for i in policy.select(infos, now=140.0)}
        got = ix.select(policy, now=140.0)
        assert {i.key for i in got} == want, policy
        assert len(got) == len(want)
    ix.close()


def test_by_jaxlib_counts_entries_and_bytes(tmp_path):
    infos = _random_infos(200, 1)
    ix = Index(tmp_path / "index.sqlite")
    ix.upsert(infos)
    got = {v.jaxlib: (v.entries, v.bytes, v.rewarmed) for v in ix.by_jaxlib()}
    want: dict[str, tuple[int, int, int]] = {}
    for i in infos:
        n, b, r = want.get(i.jaxlib, (0, 0, 0))
        want[i.jaxlib] = (n + 1, b + i.size, r + bool(i.rewarmed_from))
    assert got == want and sum(v[2] for v in got.values()) > 0
    assert [v.jaxlib for v in ix.by_jaxlib()] == ["0.10.2", "0.9.2", ""]  # newest first
    ix.close()


def test_a_version_3_index_gains_the_rewarmed_column_keeping_its_rows(tmp_path):
    path = tmp_path / "index.sqlite"
    ix = Index(path)
    ix.upsert(_random_infos(20, 2))
    ix.close()
    db = sqlite3.connect(path, isolation_level=None)  # as version 3 left it
    db.execute("ALTER TABLE entries DROP COLUMN rewarmed_from")
    db.execute("PRAGMA user_version = 3")
    db.close()
    ix = Index(path)
    assert not ix.fresh and len(ix.all()) == 20
    assert {i.rewarmed_from for i in ix.all()} == {""}  # no entry was rewarmed before
    ix.close()
