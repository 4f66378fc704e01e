"""Read-only access sees what writers committed: the index's WAL, else the entry files."""

from __future__ import annotations

import json

from cli_helpers import cli_json

from tests.conftest import make_blob, make_key, run_python
from tests.test_local_store import readonly_mount_prefix
from xlacache.stores.local import LocalStore


def _live_writer(root, checkpointed: int, live: int) -> LocalStore:
    """`checkpointed` entries in the index file itself, then `live` more in its WAL."""
    with LocalStore(root) as first:
        for n in range(checkpointed):
            first.put(*make_blob(n))
    writer = LocalStore(root)  # stays open, so its rows stay in the write-ahead log
    for n in range(checkpointed, checkpointed + live):
        writer.put(*make_blob(n))
    return writer


def test_stats_inspect_and_export_see_a_live_writers_entries(tmp_path):
    root = tmp_path / "cache"
    writer = _live_writer(root, 3, 5)
    try:
        assert (root / "index.sqlite-wal").stat().st_size > 0
        assert cli_json("stats", root)["entries"] == 8
        assert cli_json("inspect", root)["total"] == 8
        exported = cli_json("export", root, tmp_path / "b.tar")
        assert exported["exported"] == 8
        with LocalStore(root, readonly=True) as ro:
            assert ro.summary().entries == 8
            assert {i.key for i in ro.list()} == {make_key(n) for n in range(8)}
    finally:
        writer.close()


def test_export_lists_entry_files_not_only_index_rows(tmp_path):
    root = tmp_path / "cache"
    with LocalStore(root) as store:
        for n in range(3):
            store.put(*make_blob(n))
        key, blob = make_blob(9)
        # An entry file whose index row never got written (a crash, a full disk).
        path = store.entry_path(key)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(blob)
    exported = cli_json("export", root, tmp_path / "b.tar")
    assert exported["exported"] == 4


MOUNTED_STATS = """
import json, sys
from xlacache.stores.local import LocalStore
with LocalStore(sys.argv[1], readonly=True) as s:
    print(json.dumps({"entries": s.summary().entries, "listed": len(list(s.list()))}))
"""


def test_read_only_mount_under_a_live_writer_sees_every_entry(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    writer = _live_writer(src, 3, 5)
    try:
        proc = run_python(MOUNTED_STATS, str(dst), prefix=readonly_mount_prefix(src, dst))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.splitlines()[-1]) == {"entries": 8, "listed": 8}
    finally:
        writer.close()
