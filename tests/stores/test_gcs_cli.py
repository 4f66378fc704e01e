"""The store commands on gs:// URLs: inspect, stats, prune, verify, export."""

from __future__ import annotations

import time

import pytest

from tests.cli_helpers import assert_one_line_error, cli_json, read_bundle, run
from tests.conftest import make_blob, run_python
from tests.stores.backends import corrupt_object
from xlacache.stores.gcs import MARKER, GCSStore

pytestmark = pytest.mark.timeout(180)

DAY = 86400.0


@pytest.fixture
def filled(gcs):
    """A gs:// cache with three entries created 0, 10 and 20 days ago: (url, {key: blob})."""
    store = GCSStore(gcs.url())
    blobs = {}
    for n, days in enumerate((0, 10, 20)):
        key, blob = make_blob(50 + n, compile_seconds=n + 1.0, created=time.time() - days * DAY)
        store.put(key, blob)
        blobs[key] = blob
    return store, blobs


def test_inspect_and_stats(filled):
    store, blobs = filled
    listing = cli_json("inspect", store.url)
    assert listing["store"] == store.url and listing["total"] == 3
    assert [e["key"] for e in listing["entries"]] == list(blobs)  # newest first
    stats = cli_json("stats", store.url)
    assert stats["entries"] == 3 and stats["bytes"] == sum(len(b) for b in blobs.values())
    assert stats["compile_seconds"] == pytest.approx(6.0)
    table = run("inspect", store.url)
    assert table.exit_code == 0 and store.url in table.stdout


def test_prune_dry_run_then_for_real(filled, gcs):
    store, blobs = filled
    gcs.proxy.reset_log()
    dry = cli_json("prune", store.url, "--older-than", "5d", "--dry-run")
    assert dry["count"] == 2 and gcs.proxy.writes() == []
    done = cli_json("prune", store.url, "--older-than", "5d")
    assert done["count"] == 2
    assert [i.key for i in store.list()] == [next(iter(blobs))]


def test_verify_and_repair(filled):
    store, blobs = filled
    bad = list(blobs)[1]
    corrupt_object(store, bad)
    result = run("verify", store.url)
    assert result.exit_code == 1 and bad in result.stdout
    repaired = cli_json("verify", store.url, "--repair")
    assert repaired["corrupt"] == [bad] and repaired["repaired"]
    assert cli_json("verify", store.url)["corrupt"] == []


def test_export_bundle(filled, tmp_path):
    store, blobs = filled
    bundle = tmp_path / "cache.tar"
    out = cli_json("export", store.url, str(bundle))
    assert out["exported"] == 3
    manifest, members = read_bundle(bundle)
    assert {e["key"] for e in manifest["entries"]} == set(blobs)
    assert {m.rsplit("/", 1)[1][:-5]: b for m, b in members.items()} == blobs


def test_a_prefix_without_a_cache_is_one_line_error(gcs):
    GCSStore(gcs.url("foreign")).objects.create("notes.txt", b"not a cache")
    GCSStore(gcs.url("foreign")).objects.delete(MARKER)
    line = assert_one_line_error(run("stats", gcs.url("foreign")), code=2)
    assert "not an xlacache cache" in line, line


@pytest.mark.slow
def test_without_gcsfs_a_gs_url_is_a_clear_error(tmp_path):
    code = (
        "import sys; sys.modules['gcsfs'] = None\n"  # as if gcsfs were not installed
        "from xlacache.cli.main import main\n"
        "sys.argv = ['xlacache', 'stats', 'gs://bucket/prefix']\n"
        "main()\n"
    )
    proc = run_python(code)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xlacache: error:"), proc.stderr
    assert "pip install 'xlacache[gcs]'" in lines[0]


def test_a_missing_bucket_is_named_as_such(gcs):
    line = assert_one_line_error(run("stats", "gs://no-such-bucket-here/x"), 2)
    assert "no such bucket 'no-such-bucket-here'" in line, line
    assert cli_json("stats", gcs.url("never-written"))["entries"] == 0  # an empty cache
