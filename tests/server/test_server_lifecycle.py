"""Load, shutdown and restarts of the daemon as a real process."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request

import grpc
import pytest
from srvutil import make_entry, start_server

from tests.waiting import wait_for
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import CacheError
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.resilience import CircuitBreaker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_32_concurrent_clients_zero_errors_every_read_verified(server):
    entries = dict(make_entry(f"load-{i}", 64 * 1024 + i * 4096) for i in range(24))
    keys = list(entries)
    errors: list[BaseException] = []
    reads = [0] * 32
    stop = time.monotonic() + 6.0  # bounded run, not a timing assertion

    def client(n: int) -> None:
        store = GrpcStore(server.url, timeout=30)
        i = n
        try:
            while time.monotonic() < stop:
                key = keys[i % len(keys)]
                i += 7
                if n % 4 == 0 or not store.contains(key):
                    store.put(key, entries[key])
                blob = store.get(key)  # GrpcStore.get verifies header, length and body
                if blob is not None:
                    assert blob == entries[key]
                    reads[n] += 1
        except BaseException as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(r > 0 for r in reads)
    report = LocalStore(server.store, readonly=True).verify()
    assert report.corrupt == [] and report.checked == len(keys)
    assert server.proc.poll() is None


def _slow_upload(server, key, blob, pause_after: int, pause: float, result: dict) -> None:
    """Upload in 64 KiB chunks, pausing `pause` seconds after `pause_after` chunks."""
    stub = GrpcStore(server.url)._put_raw
    from xlacache import entry
    from xlacache.protocol import wire

    digest = entry.read_header(blob).payload_sha256
    step = 64 * 1024

    def messages():
        yield wire.put_first(key, len(blob), digest, blob[:step])
        for n, start in enumerate(range(step, len(blob), step)):
            if n == pause_after:
                result["paused"].set()
                time.sleep(pause)
            yield wire.put_chunk(blob[start : start + step])

    try:
        result["reply"] = stub(messages(), timeout=60)
    except grpc.RpcError as exc:
        result["error"] = exc.code()


def _no_partial_entries(store_dir) -> None:
    local = LocalStore(store_dir, readonly=True)
    report = local.verify()
    assert report.corrupt == []
    assert list((local.root / "tmp").iterdir()) == []


def _wait_until_server_is_handling_it(srv) -> None:
    """Until the upload is running in the server, not merely queued in a socket."""
    url = f"http://127.0.0.1:{srv.http_port}/status.json"
    wait_for(lambda: json.loads(urllib.request.urlopen(url, timeout=10).read())["active_rpcs"],
             30, "the upload to reach the server")  # fmt: skip


def test_sigterm_lets_an_upload_in_flight_finish(tmp_path):
    srv = start_server(tmp_path, "--shutdown-grace", "30s", "--metrics-listen", "127.0.0.1:0")
    key, blob = make_entry("graceful", 1024 * 1024)
    result = {"paused": threading.Event()}
    t = threading.Thread(target=_slow_upload, args=(srv, key, blob, 4, 2.0, result))
    t.start()
    assert result["paused"].wait(30)
    _wait_until_server_is_handling_it(srv)
    srv.send(signal.SIGTERM)
    t.join()
    assert srv.proc.wait(60) == 0
    assert "error" not in result and result["reply"].stored
    assert LocalStore(srv.store, readonly=True).get(key) == blob
    _no_partial_entries(srv.store)


def test_sigterm_past_the_grace_period_leaves_no_partial_entry(tmp_path):
    srv = start_server(tmp_path, "--shutdown-grace", "1s", "--metrics-listen", "127.0.0.1:0")
    key, blob = make_entry("cut", 1024 * 1024)
    result = {"paused": threading.Event()}
    t = threading.Thread(target=_slow_upload, args=(srv, key, blob, 4, 5.0, result))
    t.start()
    assert result["paused"].wait(30)
    _wait_until_server_is_handling_it(srv)
    srv.send(signal.SIGTERM)
    assert srv.proc.wait(60) == 0
    t.join()
    assert "error" in result
    local = LocalStore(srv.store, readonly=True)
    assert not local.contains(key)
    _no_partial_entries(srv.store)


def test_client_survives_server_death_and_reconnects_after_restart(tmp_path):
    srv = start_server(tmp_path)
    store = GrpcStore(srv.url, timeout=2, breaker=CircuitBreaker(base=0.2, cap=0.5))
    key, blob = make_entry("restart", 10_000)
    store.put(key, blob)
    srv.stop(signal.SIGKILL)
    with pytest.raises(CacheError):
        store.get(key)
    # Backing off: further calls fail at once, without touching the network.
    for _ in range(5):
        with pytest.raises(CacheError):
            store.contains(key)
    assert store.breaker.is_open
    # Same port, same directory: once the backoff passes, the same client reconnects.
    srv2 = start_server(tmp_path, store=srv.store, listen=srv.address)
    try:

        def reconnected():
            try:
                return store.get(key)
            except CacheError:
                return None

        assert wait_for(reconnected, 30, "the client to reconnect", interval=0.2) == blob
    finally:
        srv2.stop()


def test_stats_rpc_counts_requests(server):
    store = GrpcStore(server.url)
    key, blob = make_entry("count", 1000)
    store.put(key, blob)
    store.get(key)
    counters = store.server_stats().counters
    assert counters["requests.Put.OK"] == 1 and counters["requests.Get.OK"] == 1
    with pytest.raises(grpc.RpcError):
        store._stub.Delete(pb.DeleteRequest(key="nope"), timeout=5)
    assert store.server_stats().counters["requests.Delete.INVALID_ARGUMENT"] == 1
