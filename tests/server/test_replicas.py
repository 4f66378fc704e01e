"""Several `xlacache serve --store gs://... --cache-dir DIR` replicas over one bucket:
read-through and write-through, leases every replica agrees on, one replica killed while
another keeps serving, and the store commands through a replica."""

from __future__ import annotations

import signal

import pytest
from srvutil import make_entry, start_bucket_server

from tests.cli_helpers import cli_json, read_bundle
from tests.stores.backends import corrupt_object
from xlacache.errors import StoreUnavailableError
from xlacache.stores.gcs import GCSStore, entry_name
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def replicas(tmp_path, gcs, request):
    """Start replicas over the test's bucket (through its fault proxy) on demand."""
    started = []

    def start(name: str):
        srv = start_bucket_server(tmp_path, gcs.url(), gcs.env, name=name)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop(signal.SIGKILL)


@pytest.mark.fallback
def test_replicas_share_entries_and_leases_and_survive_one_dying(replicas, gcs):
    a, b = replicas("a"), replicas("b")
    key, blob = make_entry("shared")
    with GrpcStore(a.url, timeout=10) as via_a, GrpcStore(b.url, timeout=10) as via_b:
        via_a.put(key, blob)
        assert GCSStore(gcs.url()).contains(key)  # acknowledged: in the bucket
        assert not LocalStore(b.cache_dir, readonly=True).contains(key)
        assert via_b.get(key) == blob  # read through from the bucket
        assert LocalStore(b.cache_dir, readonly=True).contains(key)  # and kept on b's disk
        # One lease table for both: the bucket's.
        lease = make_entry("compiling")[0]
        assert via_a.leases().acquire(lease, "holder-1", 30).granted
        refused = via_b.leases().acquire(lease, "holder-2", 30)
        assert not refused.granted and refused.holder == "holder-1"
        assert via_b.leases().holder(lease) == "holder-1"

        a.stop(signal.SIGKILL)
        with pytest.raises(StoreUnavailableError):
            via_a.get(key)
        # b serves on: entries, writes, and the lease a granted (renewed through b).
        assert via_b.get(key) == blob
        other, other_blob = make_entry("after-a-died")
        via_b.put(other, other_blob)
        assert via_b.leases().renew(lease, "holder-1", 30)
        via_b.leases().release(lease, "holder-1")
        assert via_b.leases().acquire(lease, "holder-2", 30).granted

    c = replicas("c")  # a fresh replica with an empty disk sees everything
    with GrpcStore(c.url, timeout=10) as via_c:
        assert via_c.get(key) == blob and via_c.get(other) == other_blob
        assert {i.key for i in via_c.list()} == {key, other}


def test_a_put_is_acknowledged_only_once_the_bucket_has_it(replicas, gcs):
    replica = replicas("only")
    key, blob = make_entry("refused")
    gcs.proxy.fail(503, times=100, method="POST", path="/upload/")
    with GrpcStore(replica.url, timeout=30) as client:
        with pytest.raises(StoreUnavailableError):
            client.put(key, blob)
        assert not LocalStore(replica.cache_dir, readonly=True).contains(key)  # not served
        assert not client.contains(key)
        gcs.proxy.clear()
        client.put(key, blob)
        assert GCSStore(gcs.url()).objects.stat(entry_name(key)) is not None
        assert client.get(key) == blob


def test_store_commands_through_a_replica_see_the_bucket(replicas, gcs, tmp_path):
    bucket = GCSStore(gcs.url())
    entries = dict(make_entry(f"e{n}") for n in range(3))
    for key, blob in entries.items():
        bucket.put(key, blob)  # written by another replica, or directly
    replica = replicas("cli")
    assert cli_json("stats", replica.url)["entries"] == 3
    assert {e["key"] for e in cli_json("inspect", replica.url)["entries"]} == set(entries)
    bad = next(iter(entries))
    corrupt_object(bucket, bad)
    assert cli_json("verify", replica.url, "--repair")["corrupt"] == [bad]
    assert not bucket.contains(bad)
    exported = cli_json("export", replica.url, str(tmp_path / "b.tar"))
    manifest, _ = read_bundle(tmp_path / "b.tar")
    assert exported["exported"] == 2
    assert {e["key"] for e in manifest["entries"]} == set(entries) - {bad}
    pruned = cli_json("prune", replica.url, "--max-size", "0")
    assert pruned["count"] == 2 and list(bucket.list()) == []


@pytest.mark.parametrize(
    "cli, message",
    [
        ({"store": "gs://bucket/prefix"}, "needs --cache-dir"),
        ({"store": "/srv/cache", "cache_dir": "/var/cache/x"}, "goes with --store gs://"),
        ({"store": "grpc://cache:7070"}, "use a directory or gs://"),
    ],
)
def test_bucket_settings_are_checked(cli, message):
    from xlacache.errors import ConfigError
    from xlacache.server.config import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(cli, env={})
    if "gs://" in cli["store"]:
        config = load_config({**cli, "cache_dir": "/var/cache/x"}, env={})
        assert config.cache_dir == "/var/cache/x"
