"""What a hostile or careless client sends gets a precise status and harms nobody else."""

from __future__ import annotations

import grpc
import pytest
from srvutil import make_entry, make_key, start_server
from test_server_rpc import put_raw, stub_for

from tests.conftest import forge_header
from tests.waiting import wait_for
from xlacache import entry
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import CorruptEntryError
from xlacache.stores import PrunePolicy, open_store
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.tiered import TieredStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize("change", [{"created": "yesterday"}, {"payload_size": -1}])
def test_upload_with_a_malformed_header_is_refused(server, change):
    key, blob = make_entry("forged", 4000)
    forged = forge_header(blob, **change)
    with pytest.raises(grpc.RpcError) as err:
        put_raw(stub_for(server), key, forged, digest=entry.read_header(blob).payload_sha256)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "header" in err.value.details()
    store = open_store(server.url)
    assert not store.contains(key)
    good_key, good = make_entry("good", 4000)
    store.put(good_key, good)
    assert [i.key for i in store.list()] == [good_key]
    assert store.summary().entries == 1


def test_a_malformed_entry_on_disk_breaks_nothing_and_is_never_copied(tmp_path, server):
    store = open_store(server.url)
    good_key, good = make_entry("good", 4000)
    store.put(good_key, good)
    key, blob = make_entry("planted", 4000)
    path = LocalStore(server.store, readonly=True).entry_path(key)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(forge_header(blob, created="yesterday"))
    assert [i.key for i in store.list()] == [good_key]
    assert store.stat(key) is None or store.stat(key).key == key
    assert store.summary().entries == 1
    assert store.prune(PrunePolicy(max_size=10**9)) == []
    assert store.verify().corrupt == [key]
    tier = TieredStore(LocalStore(tmp_path / "worker"), GrpcStore(server.url, timeout=5))
    assert tier.get(key) is None  # the server found it corrupt: a miss, and removed
    assert not tier.local.contains(key) and not path.exists()
    assert tier.get(good_key) == good
    tier.close()


def test_size_cap_holds_with_a_malformed_entry_on_disk(tmp_path):
    srv = start_server(tmp_path, "--max-size", "100KB")
    try:
        key, blob = make_entry("planted", 30_000)
        path = LocalStore(srv.store, readonly=True).entry_path(key)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(forge_header(blob, payload_size=-1))
        store = open_store(srv.url)
        for i in range(6):
            store.put(*make_entry(f"fill-{i}", 30_000))
        assert store.summary().bytes <= 100_000
    finally:
        srv.stop()


def test_garbage_request_bodies_get_invalid_argument(server):
    channel = grpc.insecure_channel(server.address)
    for method in ("Contains", "Stat", "List", "Delete", "Prune", "Verify", "ReportCorrupt"):
        call = channel.unary_unary(f"/xlacache.v1.Cache/{method}")
        with pytest.raises(grpc.RpcError) as err:
            call(b"\xff\xff\xff\xff garbage", timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
    get = channel.unary_stream("/xlacache.v1.Cache/Get")
    with pytest.raises(grpc.RpcError) as err:
        list(get(b"\x0a\xff\xff", timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert server.proc.poll() is None


def test_a_key_with_a_trailing_newline_is_malformed(server):
    stub = stub_for(server)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Get(pb.GetRequest(key=make_key("k") + "\n"), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_errors_carry_a_machine_readable_reason(server):
    stub = stub_for(server)
    with pytest.raises(grpc.RpcError) as err:
        stub.Stat(pb.StatRequest(keys=["nope"]), timeout=10)
    reasons = dict(err.value.trailing_metadata() or ())
    assert reasons.get("xlacache-reason") == "invalid_key"
    key, blob = make_entry("k", 1000)
    with pytest.raises(CorruptEntryError):
        open_store(server.url).put(key, forge_header(blob, compile_seconds=-1.0))


def test_list_pages_read_a_page_of_rows_not_the_store(tmp_path):
    from xlacache.server.config import ServerConfig
    from xlacache.server.metrics import ServerMetrics
    from xlacache.server.queries import Queries
    from xlacache.server.transfers import Transfers

    store = LocalStore(tmp_path / "s", fsync=False)
    keys = sorted(store.put(*make_entry(f"e{i}", 100)) or make_key(f"e{i}") for i in range(300))
    rows_read = []
    real_page = store.list_page

    def counted_page(after="", limit=1000):
        page = real_page(after, limit)
        rows_read.append(len(page))
        return page

    def no_full_listing():
        raise AssertionError("List must not list the whole store")

    store.list_page = counted_page
    store.list = no_full_listing
    config = ServerConfig(store=str(store.root))
    metrics = ServerMetrics(store.summary, None)
    queries = Queries(store, config, metrics, Transfers(store, config, metrics))
    seen, token = [], ""
    while True:
        reply = queries.list(pb.ListRequest(page_size=10, page_token=token), None)
        seen += [e.key for e in reply.entries]
        token = reply.next_page_token
        if not token:
            break
    assert seen == keys
    assert max(rows_read) <= 11 and len(rows_read) == 30
    store.close()


def test_server_reconciles_index_drift_periodically_and_counts_it(tmp_path):
    import urllib.request

    srv = start_server(tmp_path, "--reconcile-interval", "1s", "--metrics-listen", "127.0.0.1:0")
    try:
        store = open_store(srv.url)
        store.put(*make_entry("indexed", 1000))
        local = LocalStore(srv.store, readonly=True)
        for name in ("crash-1", "crash-2"):  # renamed into place, never indexed
            key, blob = make_entry(name, 1000)
            local.entry_path(key).parent.mkdir(exist_ok=True)
            local.entry_path(key).write_bytes(blob)
        wait_for(lambda: store.summary().entries >= 3, 60, "the index to take in the entries",
                 interval=0.2)  # fmt: skip
        assert store.summary().entries == 3
        assert len(list(store.list())) == 3
        url = f"http://127.0.0.1:{srv.http_port}/metrics"
        metrics = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "xlacache_index_drift_total 2.0" in metrics
    finally:
        srv.stop()
