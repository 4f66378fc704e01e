"""The daemon over real gRPC: round trips, statuses for bad input, auth, health, metrics."""

from __future__ import annotations

import hashlib
import json
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from srvutil import ADMIN_TOKEN, READ_TOKEN, WRITE_TOKEN, make_entry, make_key, start_server

from xlacache import entry
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache._proto.v1 import cache_pb2_grpc as pb_grpc
from xlacache.errors import (
    CorruptEntryError,
    EntryTooLargeError,
    PermissionDeniedError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from xlacache.stores import PrunePolicy, open_store
from xlacache.stores.local import LocalStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def stub_for(server) -> pb_grpc.CacheStub:
    return pb_grpc.CacheStub(grpc.insecure_channel(server.address))


def bearer(token: str) -> tuple:
    return (("authorization", f"Bearer {token}"),)


def put_raw(stub, key, blob, digest=None, metadata=(), chunk=64 * 1024, size=None):
    digest = digest or entry.read_header(blob).payload_sha256

    def messages():
        yield pb.PutRequest(key=key, size=len(blob) if size is None else size,
                            payload_sha256=digest, data=blob[:chunk])  # fmt: skip
        for i in range(chunk, len(blob), chunk):
            yield pb.PutRequest(data=blob[i : i + chunk])

    return stub.Put(messages(), timeout=30, metadata=metadata)


def test_round_trip_and_inspection(server):
    store = open_store(server.url)
    key, blob = make_entry("round-trip", 3 * 1024 * 1024 + 17)  # several chunks
    assert store.get(key) is None
    store.put(key, blob)
    assert store.get(key) == blob
    assert store.contains(key) and not store.contains(make_key("absent"))
    info = store.stat(key)
    assert info.size == len(blob) and info.label == "round-trip" and info.hits >= 1
    assert store.summary().entries == 1
    # The server's directory is an ordinary local store in the same format.
    local = LocalStore(server.store, readonly=True)
    assert local.get(key) == blob
    assert store.verify().corrupt == []
    assert [i.key for i in store.prune(PrunePolicy(max_size=0), dry_run=True)] == [key]
    assert store.delete(key) and store.get(key) is None


def test_list_pages_through_every_entry(server):
    store = open_store(server.url)
    keys = set()
    for i in range(7):
        key, blob = make_entry(f"list-{i}", 100)
        store.put(key, blob)
        keys.add(key)
    assert {i.key for i in store.list(page_size=3)} == keys


def test_malformed_key_gets_invalid_argument(server):
    stub = stub_for(server)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Get(pb.GetRequest(key="../../etc/passwd"), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed cache key" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Contains(pb.ContainsRequest(keys=[make_key("ok"), "ABC"]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, blob = make_entry("k", 100)
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, "x" * 64, blob)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_digest_mismatch_is_rejected_and_nothing_stored(server):
    stub = stub_for(server)
    key, blob = make_entry("digest", 200_000)
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, key, blob, digest=hashlib.sha256(b"something else").hexdigest())
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    damaged = bytearray(blob)
    damaged[-5] ^= 0xFF  # body flipped in transit; declared digest is the true one
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, key, bytes(damaged), digest=entry.read_header(blob).payload_sha256)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    assert not open_store(server.url).contains(key)
    # An entry filed under another key, and a short stream, are refused too.
    other = make_key("other")
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, other, blob)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, key, blob, size=len(blob) + 10)  # header and size disagree
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        put_raw(
            stub, key, blob[:-10], size=len(blob), digest=entry.read_header(blob).payload_sha256
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nothing stored" in err.value.details()
    assert not open_store(server.url).contains(key)
    assert server.proc.poll() is None


def test_oversized_entry_gets_resource_exhausted(tmp_path):
    srv = start_server(tmp_path, "--max-entry-size", "1MiB", "--upload-memory", "2MiB")
    try:
        key, blob = make_entry("big", 2 * 1024 * 1024)
        with pytest.raises(grpc.RpcError) as err:
            put_raw(stub_for(srv), key, blob)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limit" in err.value.details()
        with pytest.raises(EntryTooLargeError):
            open_store(srv.url).put(key, blob)
        small_key, small = make_entry("small", 1000)
        open_store(srv.url).put(small_key, small)  # the server is still fine
        assert open_store(srv.url).get(small_key) == small
    finally:
        srv.stop()


def test_tokens_and_roles(auth_server):
    key, blob = make_entry("auth", 1000)
    stub = stub_for(auth_server)
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, key, blob)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub, key, blob, metadata=bearer("not-a-known-token-at-all"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:  # a read token can never write
        put_raw(stub, key, blob, metadata=bearer(READ_TOKEN))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED

    reader = open_store(auth_server.url, token=READ_TOKEN)
    with pytest.raises(PermissionDeniedError):
        reader.put(key, blob)
    assert not reader.contains(key)

    writer = open_store(auth_server.url, token=WRITE_TOKEN)
    writer.put(key, blob)
    assert reader.get(key) == blob
    with pytest.raises(PermissionDeniedError):
        writer.delete(key)  # deleting needs admin
    with pytest.raises(PermissionDeniedError):
        writer.prune(PrunePolicy(max_size=0))
    admin = open_store(auth_server.url, token=ADMIN_TOKEN)  # listed by its SHA-256
    assert admin.delete(key)
    with pytest.raises(UnauthenticatedError):
        open_store(auth_server.url).contains(key)  # no token at all
    assert issubclass(UnauthenticatedError, StoreUnavailableError)


def test_corrupt_entry_on_server_disk(server):
    store = open_store(server.url)
    key, blob = make_entry("rot", 50_000)
    store.put(key, blob)
    path = LocalStore(server.store, readonly=True).entry_path(key)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # bit rot in the body: only a full check sees it
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEntryError):
        store.get(key)  # verified end to end; the client reported it
    assert not store.contains(key)  # the server re-verified and removed it
    key2, blob2 = make_entry("truncated", 50_000)
    store.put(key2, blob2)
    path2 = LocalStore(server.store, readonly=True).entry_path(key2)
    path2.write_bytes(path2.read_bytes()[:-10])
    assert store.get(key2) is None  # wrong length: a miss, and removed
    assert not store.contains(key2)


def test_health_reflection_metrics_and_status_page(server):
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "xlacache.v1.Cache"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert "xlacache.v1.Cache" in names

    store = open_store(server.url)
    key, blob = make_entry("metrics", 10_000)
    store.put(key, blob)
    store.get(key)
    store.get(make_key("missing"))
    base = f"http://127.0.0.1:{server.http_port}"
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    for name in (
        'xlacache_requests_total{code="OK",method="Get"} 2.0',
        "xlacache_hits_total 1.0",
        "xlacache_misses_total 1.0",
        f"xlacache_bytes_sent_total {float(len(blob))}",
        f"xlacache_bytes_received_total {float(len(blob))}",
        "xlacache_store_entries 1.0",
        "xlacache_evictions_total",
        'xlacache_request_seconds_bucket{le="0.005",method="Put"}',
    ):
        assert name in metrics, (name, [m for m in metrics.splitlines() if "requests_total" in m])
    page = urllib.request.urlopen(base + "/", timeout=10).read().decode()
    assert "xlacache server" in page and "OPEN" in page
    status = json.loads(urllib.request.urlopen(base + "/status.json", timeout=10).read())
    assert status["hits"] == 1 and status["store"]["entries"] == 1
    assert urllib.request.urlopen(base + "/healthz", timeout=10).status == 200
    stats = store.server_stats()
    assert stats.counters["hits"] == 1 and stats.summary.entries == 1


def test_size_limit_evicts_least_recently_used(tmp_path):
    srv = start_server(tmp_path, "--max-size", "250KB")
    try:
        store = open_store(srv.url)
        keys = []
        for i in range(4):
            key, blob = make_entry(f"evict-{i}", 100_000)
            store.put(key, blob)
            keys.append(key)
        assert store.summary().bytes <= 250_000
        assert store.contains(keys[-1]) and not store.contains(keys[0])
    finally:
        srv.stop()
