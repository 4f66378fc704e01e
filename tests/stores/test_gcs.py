"""GCSStore beyond the contract: layout, create-once, faults, deadlines, listing lag, readers.

Every test gets a fresh bucket in the session's fake-gcs-server, behind a FaultProxy
that records each request and injects 429/503/403 answers or stalls on demand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import make_blob, make_key
from tests.stores.backends import corrupt_object
from xlacache import counters, entry
from xlacache.errors import (
    ConfigError,
    CorruptEntryError,
    InvalidRequestError,
    NotACacheError,
    PermissionDeniedError,
    ReadOnlyError,
    ServerBusyError,
    ServerError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from xlacache.stores import open_store
from xlacache.stores.base import PrunePolicy
from xlacache.stores.gcs import MARKER, GCSStore, entry_name
from xlacache.stores.gcs_objects import GCSObjects, RetryPolicy, parse_url
from xlacache.stores.local import LocalStore
from xlacache.stores.tiered import TieredStore

pytestmark = pytest.mark.timeout(180)

DAY = 86400.0
FAST_RETRY = RetryPolicy(attempts=6, initial=0.01, maximum=0.05)


def uploads(proxy) -> list[tuple[str, str, int]]:
    return [r for r in proxy.writes() if r[0] == "POST" and "/upload/" in r[1]]


def test_url_forms():
    assert parse_url("gs://bucket") == ("bucket", "")
    assert parse_url("gs://bucket/a/b/") == ("bucket", "a/b")
    assert parse_url("gcs://bucket//p") == ("bucket", "p")
    for bad in ("gs://", "gs:///p", "s3://bucket/p", "bucket/p"):
        with pytest.raises(ConfigError):
            parse_url(bad)


def test_open_store_and_layout_match_a_local_cache(gcs, tmp_path):
    store = open_store(gcs.url("team/cache/"))
    assert isinstance(store, GCSStore) and store.url == f"gs://{gcs.bucket}/team/cache"
    key, blob = make_blob(1, compile_seconds=3.25, label="jit_train_step")
    store.put(key, blob)
    local = LocalStore(tmp_path / "local")
    local.put(key, blob)
    local_names = sorted(
        str(p.relative_to(local.root)) for p in local.root.rglob("*") if p.is_file()
    )
    names = sorted(o.name for o in store.objects.list(""))
    assert names == ["XLACACHE", entry_name(key)]
    assert entry_name(key) in local_names and "XLACACHE" in local_names
    data, obj = store.objects.read(entry_name(key))
    assert data == blob  # the very bytes of a local entry file
    marker = json.loads(store.objects.read("XLACACHE")[0])
    assert marker["format_version"] == entry.FORMAT_VERSION
    meta = store.objects.stat(entry_name(key)).metadata
    header = entry.read_header(blob)
    assert meta["label"] == "jit_train_step" and float(meta["compile-seconds"]) == 3.25
    assert int(meta["payload-size"]) == header.payload_size
    assert float(meta["created"]) == header.created
    # Listing takes everything from metadata: no body is read.
    gcs.proxy.reset_log()
    assert [i.key for i in store.list()] == [key]
    assert store.summary().entries == 1
    assert not [r for r in gcs.proxy.requests if "alt=media" in r[1]]
    # A bucket root works too.
    root = GCSStore(gcs.url(""))
    root.put(key, blob)
    assert root.get(key) == blob and entry_name(key) in {o.name for o in root.objects.list("")}


def test_a_prefix_that_is_no_cache(gcs):
    # An empty prefix is an empty cache (issue 27, 7): nothing written, nothing made.
    assert list(GCSStore(gcs.url("nothing"), create=False).list()) == []
    assert GCSStore(gcs.url("nothing"), readonly=True, create=False).summary().entries == 0
    assert gcs.proxy.writes() == []
    GCSStore(gcs.url("other")).objects.create("notes.txt", b"not a cache")
    GCSStore(gcs.url("other")).objects.delete(MARKER)
    with pytest.raises(NotACacheError, match="not an xlacache cache"):
        GCSStore(gcs.url("other"), create=False)
    with pytest.raises(NotACacheError, match="not an xlacache cache"):
        GCSStore(gcs.url("other"), readonly=True, create=False)
    # A reader may start before its writer has created anything.
    gcs.proxy.reset_log()
    reader = GCSStore(gcs.url("nothing"), readonly=True)
    assert reader.get(make_key(1)) is None and list(reader.list()) == []
    assert gcs.proxy.writes() == []
    with pytest.raises(NotACacheError, match="no such bucket"):
        GCSStore(f"gs://no-such-bucket-{gcs.bucket}/p")


def test_an_entry_is_created_once_and_never_overwritten(gcs):
    store = GCSStore(gcs.url())
    key, first = make_blob(2)
    _, second = make_blob(2)
    gcs.proxy.reset_log()
    store.put(key, first)
    generation = store.objects.stat(entry_name(key)).generation
    store.put(key, second)  # a no-op: the key exists
    assert store.get(key) == first
    assert store.objects.stat(entry_name(key)).generation == generation
    # The second write was refused by GCS itself.
    assert [status for _, _, status in uploads(gcs.proxy)] == [200, 412]
    # Directly, too: the precondition is GCS's, not a check done before writing.
    assert store.objects.create(entry_name(key), second) is None
    assert store.get(key) == first


@pytest.mark.slow
def test_large_entries_go_in_one_request_and_stay_create_once(gcs):
    """Past gcsfs's resumable threshold (50 MiB) an entry is still one multipart request,
    so ifGenerationMatch=0 holds (the emulator does not enforce it on resumable ones)."""
    store = GCSStore(gcs.url())
    key = make_key(64)
    blob = entry.encode(key, os.urandom(64 << 20), compile_seconds=9.0)
    store.put(key, blob)
    assert store.get(key) == blob
    ups = uploads(gcs.proxy)
    assert [status for _, _, status in ups] == [200, 200]  # the marker, the entry
    assert all("uploadType=multipart" in path for _, path, _ in ups)
    assert not any("resumable" in path for _, path, _ in gcs.proxy.requests)
    other = entry.encode(key, os.urandom(64 << 20), compile_seconds=1.0)
    assert store.objects.create(entry_name(key), other) is None  # 412, not overwritten
    assert store.get(key) == blob


def test_429_and_503_are_retried_with_backoff(gcs):
    store = GCSStore(gcs.url(), retry=FAST_RETRY)
    key, blob = make_blob(3)
    gcs.proxy.fail(429, times=2)
    gcs.proxy.fail(503, times=2)
    store.put(key, blob)
    gcs.proxy.fail(503, times=2, method="GET")
    assert store.get(key) == blob
    gcs.proxy.fail(500, times=1)
    gcs.proxy.fail(502, times=1)
    assert [i.key for i in store.list()] == [key]
    assert gcs.proxy.injected() == 8
    assert counters.snapshot()["gcs_retries"] == 8


def test_a_write_whose_answer_is_lost_still_leaves_one_entry(gcs):
    """The upload lands, the answer is a 503: the retry meets 412, which is success."""
    store = GCSStore(gcs.url(), retry=FAST_RETRY)
    key, blob = make_blob(4)
    gcs.proxy.reset_log()
    gcs.proxy.fail(503, times=1, method="POST", after=True)
    store.put(key, blob)
    assert store.get(key) == blob
    assert [status for _, _, status in uploads(gcs.proxy)] == [-503, 412]


def test_persistent_errors_give_up_then_the_breaker_stops_calling(gcs):
    store = GCSStore(gcs.url(), retry=FAST_RETRY)
    key, blob = make_blob(5)
    gcs.proxy.fail(503, times=10_000)
    gcs.proxy.reset_log()
    for _ in range(3):
        with pytest.raises(StoreUnavailableError):
            store.get(key)
    assert len(gcs.proxy.requests) == 3 * FAST_RETRY.attempts  # bounded attempts per call
    gcs.proxy.reset_log()
    with pytest.raises(StoreUnavailableError, match="backing off"):
        store.put(key, blob)
    assert gcs.proxy.requests == []  # the breaker is open: no request at all


@pytest.mark.slow
@pytest.mark.timeout(60)  # the stalls add up to minutes if a deadline is missed
def test_a_stalled_gcs_costs_one_deadline(gcs):
    store = GCSStore(gcs.url(), timeout=1.0, min_rate=1 << 40, retry=FAST_RETRY)
    key, blob = make_blob(6)
    store.put(key, blob)
    gcs.proxy.stall(20.0, times=50)
    with pytest.raises(StoreUnavailableError, match="no answer within"):
        store.get(key)
    gcs.proxy.reset_log()
    with pytest.raises(StoreUnavailableError, match="backing off"):  # the breaker tripped
        store.contains(key)
    assert gcs.proxy.requests == []


@pytest.mark.fallback
def test_forbidden_is_a_permission_error_and_a_tier_stops_uploading(gcs, tmp_path):
    store = GCSStore(gcs.url())
    remote = GCSStore(gcs.url())
    gcs.proxy.reset_log()
    gcs.proxy.fail(403, times=100, method="POST")
    key, blob = make_blob(7)
    with pytest.raises(StoreUnavailableError) as caught:
        store.put(key, blob)
    assert isinstance(caught.value, PermissionDeniedError)
    tier = TieredStore(LocalStore(tmp_path / "local"), remote)
    with pytest.warns(counters.CacheWarning):
        for n in range(3):
            tier.put(*make_blob(10 + n))
        assert tier.flush(30)
    assert counters.snapshot()["uploads"] == 0
    assert len(uploads(gcs.proxy)) == 2  # the store's, then the tier's first: it stopped after that


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, InvalidRequestError),
        (401, UnauthenticatedError),
        (403, PermissionDeniedError),
        (429, ServerBusyError),
        (503, ServerError),
    ],
)
def test_failures_are_typed_by_http_status_not_message_text(gcs, status, error):
    objects = GCSObjects(gcs.url(), retry=RetryPolicy(attempts=2, initial=0.01, maximum=0.01))
    gcs.proxy.fail(status, times=10, method="GET")  # the body's message says nothing useful
    with pytest.raises(error) as caught:
        objects.stat("some-object")
    assert f"HTTP {status}" in str(caught.value)


@pytest.mark.slow
def test_gcs_users_do_not_import_the_grpc_client():
    code = "import sys, xlacache.stores.gcs; print(*sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.split()
    assert "xlacache.stores.resilience" in loaded
    assert not [m for m in loaded if m.startswith(("xlacache.stores.remote", "xlacache.protocol"))]


def test_listing_may_lag_but_get_finds_a_fresh_entry(gcs):
    store = GCSStore(gcs.url())
    old_key, old = make_blob(8)
    new_key, new = make_blob(9)
    store.put(old_key, old)
    gcs.proxy.hidden_in_listings.append(new_key)  # as if the listing had not caught up
    store.put(new_key, new)
    assert [i.key for i in store.list()] == [old_key]
    assert store.get(new_key) == new
    assert store.contains(new_key) and store.stat(new_key).size == len(new)


def test_a_reader_never_issues_a_write_request(gcs):
    writer = GCSStore(gcs.url())
    key, blob = make_blob(11, created=time.time() - 2 * DAY)  # due for a use record
    bad_key, bad = make_blob(12)
    writer.put(key, blob)
    writer.put(bad_key, bad)
    corrupt_object(writer, bad_key)
    gcs.proxy.reset_log()
    reader = GCSStore(gcs.url(), readonly=True, create=False)
    assert reader.get(key) == blob
    assert reader.get(make_key(13)) is None
    with pytest.raises(CorruptEntryError):
        reader.get(bad_key)
    assert reader.contains(bad_key)  # reported, not removed
    assert {i.key for i in reader.list()} == {key, bad_key}
    assert reader.stat(key) is not None and reader.summary().entries == 2
    assert len(reader.prune(PrunePolicy(max_size=0), dry_run=True)) == 2
    assert reader.verify().corrupt == [bad_key]
    for write in (
        lambda: reader.put(*make_blob(14)),
        lambda: reader.delete(key),
        lambda: reader.prune(PrunePolicy(max_size=0)),
        lambda: reader.verify(repair=True),
    ):
        with pytest.raises(ReadOnlyError):
            write()
    reader.close()
    assert gcs.proxy.requests, "the reader went through the proxy"
    assert gcs.proxy.writes() == []


def test_use_is_recorded_at_most_once_per_interval(gcs):
    store = GCSStore(gcs.url())
    key, blob = make_blob(15, created=time.time() - 2 * DAY)
    store.put(key, blob)
    assert store.stat(key).hits == 0
    for _ in range(3):
        assert store.get(key) == blob
    store.close()  # waits for the background use record
    info = store.stat(key)
    assert info.hits == 1 and time.time() - info.last_used < 600
    patches = [r for r in gcs.proxy.writes() if r[0] == "PATCH"]
    assert len(patches) == 1
    # Another process (a fresh store) sees the record and does not write again.
    again = GCSStore(gcs.url())
    assert again.get(key) == blob
    again.close()
    assert len([r for r in gcs.proxy.writes() if r[0] == "PATCH"]) == 1
    # prune --unused-for now keeps it; a fresh entry's use counts from its creation.
    assert store.prune(PrunePolicy(unused_for=DAY), dry_run=True) == []


def test_peek_leaves_hits_and_last_use_alone(gcs):
    """A tool's read (export, sign, diff) or prefetch's is no use: no metadata patch, and
    hits and last use stay as they were; the `get` after it is one."""
    store = GCSStore(gcs.url())
    created = time.time() - 2 * DAY
    key, blob = make_blob(16, created=created)
    store.put(key, blob)
    gcs.proxy.reset_log()
    assert store.peek(key) == blob and store.peek(key) == blob
    store.close()  # waits for background use records: there must be none
    assert [r for r in gcs.proxy.writes() if r[0] == "PATCH"] == []
    info = GCSStore(gcs.url()).stat(key)
    assert info.hits == 0 and info.last_used == pytest.approx(created)
    reader = GCSStore(gcs.url())
    assert reader.get(key) == blob
    reader.close()
    assert reader.stat(key).hits == 1


@pytest.mark.fallback
def test_use_records_stop_when_refused_and_can_be_turned_off(gcs):
    store = GCSStore(gcs.url())
    keys = []
    for n in range(3):
        key, blob = make_blob(20 + n, created=time.time() - 2 * DAY)
        store.put(key, blob)
        keys.append(key)
    gcs.proxy.fail(403, times=100, method="PATCH")
    for key in keys:
        store.get(key)
    store.close()
    assert len([r for r in gcs.proxy.requests if r[0] == "PATCH"]) == 1  # then it stopped
    assert store.stat(keys[0]).hits == 0
    off = GCSStore(gcs.url(), touch_interval=0)
    gcs.proxy.clear()
    gcs.proxy.reset_log()
    for key in keys:
        off.get(key)
    off.close()
    assert gcs.proxy.writes() == []


def test_prune_removes_by_age_and_counts(gcs):
    store = GCSStore(gcs.url())
    old_key, old = make_blob(30, created=time.time() - 10 * DAY)
    new_key, new = make_blob(31)
    store.put(old_key, old)
    store.put(new_key, new)
    removed = store.prune(PrunePolicy(older_than=5 * DAY))
    assert [i.key for i in removed] == [old_key]
    assert store.get(old_key) is None and store.get(new_key) == new
    assert counters.snapshot()["evictions"] == 1


def test_verify_reports_stray_objects(gcs):
    store = GCSStore(gcs.url())
    key, blob = make_blob(32)
    store.put(key, blob)
    store.objects.create("entries/zz/not-an-entry.xlac", b"junk")
    report = store.verify()
    assert report.checked == 2 and report.corrupt == ["entries/zz/not-an-entry.xlac"]
    assert [i.key for i in store.list()] == [key]  # strays are not listed as entries
    store.verify(repair=True)
    assert store.objects.stat("entries/zz/not-an-entry.xlac") is None
    assert store.get(key) == blob


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_an_unreachable_endpoint_fails_within_the_deadline(gcs):
    objects = GCSObjects(gcs.url(), endpoint_url="http://127.0.0.1:9", token="anon", timeout=2)
    with pytest.raises(StoreUnavailableError):
        objects.stat("XLACACHE")


@pytest.mark.fallback
def test_a_writer_without_create_permission_still_reads(gcs):
    writer = GCSStore(gcs.url())
    key, blob = make_blob(40)
    writer.put(key, blob)
    gcs.proxy.fail(403, times=100, method="POST")
    with pytest.warns(counters.CacheWarning, match="permission"):
        fresh_prefix = GCSStore(gcs.url("elsewhere"))  # cannot create its marker
    assert fresh_prefix.get(key) is None
    viewer = GCSStore(gcs.url())
    assert viewer.get(key) == blob
    with pytest.raises(StoreUnavailableError) as caught:
        viewer.put(*make_blob(41))
    assert isinstance(caught.value, PermissionDeniedError)


def test_miss_records_are_small_objects_that_writers_trim(gcs, monkeypatch):
    from xlacache.stores import gcs as gcs_module

    monkeypatch.setattr(gcs_module, "MAX_MISS_OBJECTS", 5)
    monkeypatch.setattr(gcs_module, "TRIM_MISSES_EVERY", 4)
    store = GCSStore(gcs.url())
    for n in range(13):
        store.report_miss({"time": 1000.0 + n, "key": make_key(n), "reason": "flags"})
    names = sorted(o.name for o in store.objects.list(gcs_module.MISSES))
    # Trimmed to the newest 5 after the 1st, 5th, 9th and 13th report.
    assert len(names) == 5 and all(n.endswith(".json") for n in names)
    assert [r["key"] for r in store.recent_misses(2)] == [make_key(12), make_key(11)]
    assert [r["time"] for r in store.recent_misses()] == [1000.0 + n for n in range(12, 7, -1)]
    gcs.proxy.reset_log()
    reader = GCSStore(gcs.url(), readonly=True)
    assert len(reader.recent_misses()) == 5 and not reader.can_report_misses
    assert gcs.proxy.writes() == []
    # A stray object under misses/ is skipped, not an error.
    store.objects.create(f"{gcs_module.MISSES}99999999999999999999-x.json", b"not json")
    assert len(store.recent_misses()) == 5
