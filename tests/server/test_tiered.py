"""TieredStore: local first, remote second, uploads in the background, sick remote tolerated."""

from __future__ import annotations

import signal
import socket
import warnings

import pytest
from srvutil import READ_TOKEN, WRITE_TOKEN, make_entry

from xlacache import counters
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.resilience import CircuitBreaker
from xlacache.stores.tiered import TieredStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fresh_counters():
    counters.reset()
    yield
    counters.reset()


def tier(tmp_path, name, url, **kw) -> TieredStore:
    remote_kw = {k: kw.pop(k) for k in ("token",) if k in kw}
    readonly = kw.get("readonly", False)
    remote = GrpcStore(url, readonly=readonly, timeout=2, **remote_kw)
    return TieredStore(LocalStore(tmp_path / name), remote, **kw)


def test_put_uploads_in_background_and_other_worker_hits_remotely(tmp_path, server):
    a = tier(tmp_path, "a", server.url)
    key, blob = make_entry("shared", 200_000)
    a.put(key, blob)
    assert a.flush(30)
    assert counters.snapshot()["uploads"] == 1
    b = tier(tmp_path, "b", server.url)
    assert b.get(key) == blob
    assert counters.snapshot()["remote_hits"] == 1
    b.local.flush_hits()
    copy = b.local.stat(key)
    assert copy.hits == 1 and copy.last_used > copy.created - 1  # the use is recorded
    assert b.local.get(key) == blob  # written back locally
    a.close()
    b.close()


@pytest.mark.slow
def test_readonly_tier_never_uploads(tmp_path, server):
    ro = tier(tmp_path, "ro", server.url, readonly=True)
    key, blob = make_entry("ro", 1000)
    with pytest.raises(Exception):  # noqa: B017 - ReadOnlyError
        ro.put(key, blob)
    assert ro.flush(5)
    assert not GrpcStore(server.url).contains(key)


@pytest.mark.fallback
@pytest.mark.slow
def test_read_token_tier_stops_uploading_after_refusal(tmp_path, auth_server):
    worker = tier(tmp_path, "w", auth_server.url, token=READ_TOKEN)
    keys = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for i in range(3):
            key, blob = make_entry(f"rt-{i}", 1000)
            worker.put(key, blob)  # stored locally; the upload is refused by the server
            keys.append(key)
        assert worker.flush(30)
    assert all(worker.local.contains(k) for k in keys)
    admin_view = GrpcStore(auth_server.url, token=WRITE_TOKEN)
    assert not any(admin_view.contains(k) for k in keys)
    assert counters.snapshot()["uploads"] == 0


@pytest.mark.slow
def test_queue_full_drops_uploads_with_a_count(tmp_path, server):
    t = tier(tmp_path, "q", server.url, queue_entries=1, queue_bytes=1)
    key, blob = make_entry("dropped", 1000)
    t.put(key, blob)
    assert counters.snapshot()["uploads_dropped"] == 1
    assert t.local.contains(key)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.fallback
def test_dead_remote_degrades_to_local_with_one_warning(tmp_path):
    url = f"grpc://127.0.0.1:{_dead_port()}"
    t = TieredStore(LocalStore(tmp_path / "l"), GrpcStore(url, timeout=1))
    key, blob = make_entry("local-only", 1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(5):
            assert t.get(make_entry(f"miss-{i}", 10)[0]) is None
        t.put(key, blob)
        assert t.get(key) == blob
        assert t.flush(30)
    remote_warnings = [w for w in caught if "remote" in str(w.message)]
    assert len(remote_warnings) == 1
    assert counters.snapshot()["errors"]["remote"] >= 1
    assert t.remote.breaker.is_open
    t.close()


@pytest.mark.fallback
def test_server_killed_mid_run_tier_keeps_working(tmp_path, server):
    t = TieredStore(
        LocalStore(tmp_path / "k"),
        GrpcStore(server.url, timeout=1, breaker=CircuitBreaker(base=5, cap=5)),
    )
    first_key, first = make_entry("before", 1000)
    t.put(first_key, first)
    assert t.flush(30)
    server.stop(signal.SIGKILL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(10):
            key, blob = make_entry(f"after-{i}", 1000)
            assert t.get(key) is None
            t.put(key, blob)
            assert t.get(key) == blob
        assert t.get(first_key) == first
        assert t.flush(30)
    t.close()


@pytest.mark.fallback
@pytest.mark.slow
def test_hung_server_costs_short_timeouts_then_backs_off(tmp_path, server):
    t = TieredStore(LocalStore(tmp_path / "h"), GrpcStore(server.url, timeout=1))
    assert not t.remote.contains(make_entry("warm", 10)[0])  # connected before it hangs
    server.send(signal.SIGSTOP)  # accepts connections, answers nothing
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(3):  # each gives up after the 1 s connect/first-message timeout
                assert t.get(make_entry(f"hung-{i}", 10)[0]) is None
            assert t.remote.breaker.is_open  # so later compiles do not wait at all
            assert t.get(make_entry("hung-late", 10)[0]) is None
    finally:
        server.send(signal.SIGCONT)
