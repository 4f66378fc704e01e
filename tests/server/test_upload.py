"""Streamed uploads: written to tmp/ as they arrive (direct I/O or not), adopted whole."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import grpc
import pytest
from srvutil import make_entry, start_server

from tests.waiting import wait_for
from xlacache import entry
from xlacache.errors import ConfigError, CorruptEntryError
from xlacache.protocol import wire
from xlacache.server import diskio
from xlacache.server.config import load_config
from xlacache.stores import durability
from xlacache.stores.local import STALE_TEMP_SECONDS, LocalStore
from xlacache.stores.remote import GrpcStore

pytestmark = pytest.mark.timeout(120)

SIZES = [0, 1, 4095, 4096, 4097, 3 * 8192 + 5, 100_000]


def _write(path, data: bytes, step: int, direct: bool, pool) -> bool:
    fd, is_direct = diskio.open_temp(path, direct)
    try:
        writer = diskio.TempWriter(fd, is_direct, pool)
        view = memoryview(data)
        for start in range(0, len(data), step):
            writer.write(view[start : start + step])
        writer.finish()
    finally:
        os.close(fd)
    return is_direct


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("step", [1000, 8192, 65536])
def test_temp_writer_writes_exactly_the_bytes(tmp_path, direct, size, step):
    pool = diskio.BufferPool(size=8192, keep=2)  # small: chunks straddle buffers
    data = os.urandom(size)
    path = tmp_path / "t.tmp"
    is_direct = _write(path, data, step, direct, pool)
    assert path.read_bytes() == data
    assert direct or not is_direct
    with pytest.raises(FileExistsError):  # temp files are created exclusively
        diskio.open_temp(path, direct)


def test_temp_writer_falls_back_when_direct_writes_are_refused(tmp_path, monkeypatch):
    if not diskio.O_DIRECT:
        pytest.skip("no O_DIRECT here")
    real_write = os.write
    refused = []

    def write(fd, data):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & diskio.O_DIRECT and len(refused) == 1:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        if not refused:
            refused.append(None)
        return real_write(fd, data)

    monkeypatch.setattr(diskio.os, "write", write)
    data = os.urandom(5 * 8192 + 123)
    path = tmp_path / "t.tmp"
    _write(path, data, 3000, True, diskio.BufferPool(size=8192))
    assert path.read_bytes() == data


def test_buffer_pool_keeps_few_idle_buffers():
    pool = diskio.BufferPool(size=4096, keep=2)
    bufs = [pool.get() for _ in range(5)]
    for b in bufs:
        pool.put(b)
    assert len(pool._idle) == 2 and sum(b.closed for b in bufs) == 3
    assert pool.get() in bufs


def test_put_file_adopts_a_written_entry(tmp_path):
    store = LocalStore(tmp_path / "s")
    key, blob = make_entry("adopt", 20_000)
    tmp = store.temp_path(key)
    tmp.write_bytes(blob)
    store.put_file(key, tmp)
    assert store.get(key) == blob and not tmp.exists()
    assert store.stat(key).size == len(blob)
    # With the caller's header and size: no read-back, the length still checked.
    key2, blob2 = make_entry("adopt-2", 20_000)
    tmp = store.temp_path(key2)
    tmp.write_bytes(blob2)
    store.put_file(key2, tmp, entry.read_header(blob2), len(blob2))
    assert store.get(key2) == blob2


@pytest.mark.parametrize("damage", ["key", "short", "long", "size", "outside"])
def test_put_file_refuses_and_removes_a_wrong_file(tmp_path, damage):
    store = LocalStore(tmp_path / "s")
    key, blob = make_entry("refuse", 20_000)
    header, size = None, None
    if damage == "key":
        key = make_entry("other", 10)[0]
    elif damage == "short":
        blob = blob[:-1]
    elif damage == "long":
        blob += b"x"
    elif damage == "size":
        header, size = entry.read_header(blob), len(blob) + 1
    tmp = store.temp_path(key) if damage != "outside" else tmp_path / "elsewhere.tmp"
    tmp.write_bytes(blob)
    with pytest.raises((CorruptEntryError, ValueError)):
        store.put_file(key, tmp, header, size)
    assert not tmp.exists() and not store.contains(key)
    assert list(store.tmp_dir.iterdir()) == []


def test_fsync_off_stores_the_same_without_fsync(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    store = LocalStore(tmp_path / "s", fsync=False)
    key, blob = make_entry("nosync", 5000)
    store.put(key, blob)
    tmp = store.temp_path(make_entry("nosync-2", 10)[0])
    key2, blob2 = make_entry("nosync-2", 5000)
    tmp.write_bytes(blob2)
    store.put_file(key2, tmp)
    assert calls == [] and store.get(key) == blob and store.get(key2) == blob2
    synced = LocalStore(tmp_path / "t")
    synced.put(key, blob)
    assert len(calls) == 2  # the file and its directory


def test_background_fsync_syncs_after_the_write_returns(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    store = LocalStore(tmp_path / "s", fsync="background")
    store.files._syncer.interval = 3600.0  # no batch before close: deterministic
    keys = []
    for n in range(3):
        key, blob = make_entry(f"bg-{n}", 5000)
        store.put(key, blob)
        keys.append(key)
        assert store.get(key) == blob  # readable at once, before any fsync
    assert synced == []
    store.close()  # syncs what is pending: each entry, then each directory once
    paths = [str(store.entry_path(k)) for k in keys]
    dirs = list(dict.fromkeys(str(store.entry_path(k).parent) for k in keys))
    assert synced == paths + dirs
    monkeypatch.setattr(os, "fsync", real_fsync)
    with LocalStore(tmp_path / "s", fsync="background") as again:
        assert again.verify().corrupt == [] and again.summary().entries == 3


def test_fsync_off_syncs_only_on_request_and_only_recent_entries(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    store = LocalStore(tmp_path / "s", fsync="off")
    old_key, old = make_entry("old", 5000)
    store.put(old_key, old)
    pending = store.files._syncer._pending
    pending[store.entry_path(old_key)] -= durability.RECENT_SECONDS  # the kernel's by now
    key, blob = make_entry("recent", 5000)
    store.put(key, blob)
    assert synced == [] and store.get(key) == blob
    assert store.sync() == 1
    assert synced == [str(store.entry_path(key)), str(store.entry_path(key).parent)]
    assert store.sync() == 0
    store.close()
    assert len(synced) == 2  # closing syncs nothing with fsync off


@pytest.mark.slow
def test_an_entry_torn_by_a_machine_crash_is_a_miss_never_a_wrong_answer(tmp_path):
    """What fsync off risks: after a power loss an entry may be zero-filled or cut short.
    Reads find it (header, length, body SHA-256), it is removed, and the next put heals."""
    srv = start_server(tmp_path)
    try:
        store = GrpcStore(srv.url)
        zeroed_key, zeroed = make_entry("zeroed", 300_000)
        cut_key, cut = make_entry("cut", 300_000)
        store.put(zeroed_key, zeroed)
        store.put(cut_key, cut)
    finally:
        srv.stop(signal.SIGKILL)
    local = LocalStore(srv.store, readonly=True)
    path = local.entry_path(zeroed_key)
    torn = bytearray(path.read_bytes())
    torn[-100_000:] = bytes(100_000)  # the body's tail never reached the disk
    path.write_bytes(torn)
    cut_path = local.entry_path(cut_key)
    cut_path.write_bytes(cut_path.read_bytes()[:150_000])
    srv = start_server(tmp_path, store=srv.store)
    try:
        store = GrpcStore(srv.url)
        with pytest.raises(CorruptEntryError):
            store.get(zeroed_key)  # the client's check; it reports, the server confirms
        assert store.get(cut_key) is None  # the server's own length check: a miss
        assert not store.contains(zeroed_key) and not store.contains(cut_key)
        assert {i.key for i in store.list()} == set()
        store.put(zeroed_key, zeroed)
        assert store.get(zeroed_key) == zeroed
    finally:
        srv.stop()


@pytest.mark.slow
def test_stale_temp_files_are_removed_at_startup(tmp_path):
    store = LocalStore(tmp_path / "s")
    old, fresh = store.tmp_dir / "old.tmp", store.tmp_dir / "fresh.tmp"
    old.write_bytes(b"x")
    fresh.write_bytes(b"y")
    past = time.time() - STALE_TEMP_SECONDS - 10
    os.utime(old, (past, past))
    srv = start_server(tmp_path, store=store.root)
    try:
        assert not old.exists() and fresh.exists()
    finally:
        srv.stop()


def test_settings_for_fsync_and_direct_io():
    assert load_config({"store": "/s"}, env={}).fsync == "off"
    assert not load_config({"store": "/s"}, env={}).direct_io
    c = load_config({"store": "/s"}, env={"XLACACHE_SERVE_FSYNC": "0"})
    assert c.fsync == "off" and not c.direct_io
    assert load_config({"store": "/s"}, env={"XLACACHE_SERVE_FSYNC": "true"}).fsync == "always"
    assert load_config({"store": "/s", "fsync": "Always"}, env={}).fsync == "always"
    with pytest.raises(ConfigError):
        load_config({"store": "/s", "fsync": "sometimes"}, env={})
    assert load_config({"store": "/s", "direct_io": "yes"}, env={}).direct_io


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags", [[], ["--no-fsync"], ["--fsync", "always"], ["--fsync", "off", "--direct-io"]]
)
def test_round_trip_with_each_write_mode(tmp_path, flags):
    srv = start_server(tmp_path, *flags)
    try:
        store = GrpcStore(srv.url)
        for i, size in enumerate([10, 4096 * 3, 5 * 1024 * 1024 + 7]):
            key, blob = make_entry(f"mode-{i}", size)
            store.put(key, blob)
            assert store.get(key) == blob
        local = LocalStore(srv.store, readonly=True)
        assert local.verify().corrupt == [] and list(local.tmp_dir.iterdir()) == []
    finally:
        assert srv.stop() == 0
    if "always" not in flags:  # off (the default): a graceful stop syncs recent entries
        assert "fsync off: the kernel writes entries back" in srv.log_text()
        assert "synced 3 recently stored entries" in srv.log_text()


def _upload(server, key, blob, step, after, pause=None, fail=False):
    """A raw Put of `blob` in `step`-byte chunks; after `after` chunks: wait or fail."""
    stub = GrpcStore(server.url)._put_raw
    digest = entry.read_header(blob).payload_sha256

    def messages():
        yield wire.put_first(key, len(blob), digest, blob[:step])
        for n, start in enumerate(range(step, len(blob), step)):
            if n == after:
                if pause is not None:
                    pause.set()
                    time.sleep(60)
                if fail:
                    raise RuntimeError("client gave up")
            yield wire.put_chunk(blob[start : start + step])

    return stub(messages(), timeout=60)


def _tmp_files(store_dir) -> list:
    return list((store_dir / "tmp").iterdir())


@pytest.mark.slow
def test_upload_abandoned_mid_stream_leaves_no_temp_file(server):
    key, blob = make_entry("abandoned", 3 * 1024 * 1024)
    with pytest.raises(grpc.RpcError):
        _upload(server, key, blob, 256 * 1024, after=4, fail=True)
    wait_for(lambda: _tmp_files(server.store) == [], 20, "the temporary file to go")
    assert not LocalStore(server.store, readonly=True).contains(key)
    # Bad digest, several chunks in: also nothing left behind.
    stub = GrpcStore(server.url)._put_raw
    damaged = bytearray(blob)
    damaged[-3] ^= 1
    digest = entry.read_header(blob).payload_sha256
    msgs = [wire.put_first(key, len(blob), digest, bytes(damaged[:65536]))]
    msgs += [wire.put_chunk(bytes(damaged[i : i + 65536])) for i in range(65536, len(blob), 65536)]
    with pytest.raises(grpc.RpcError) as err:
        stub(iter(msgs), timeout=30)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    assert _tmp_files(server.store) == [] and GrpcStore(server.url).get(key) is None


@pytest.mark.slow
def test_sigkill_mid_upload_leaves_no_entry(tmp_path):
    srv = start_server(tmp_path)
    key, blob = make_entry("killed", 4 * 1024 * 1024)
    paused = threading.Event()
    result = {}

    def run():
        try:
            _upload(srv, key, blob, 512 * 1024, after=3, pause=paused)
        except grpc.RpcError as exc:
            result["code"] = exc.code()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert paused.wait(30)
    wait_for(lambda: _tmp_files(srv.store), 20, "the server to begin writing the upload to tmp/",
             interval=0.02)  # fmt: skip
    srv.stop(signal.SIGKILL)
    local = LocalStore(srv.store, readonly=True)
    assert not local.contains(key) and local.verify().corrupt == []
    partial = _tmp_files(srv.store)
    assert len(partial) == 1 and partial[0].stat().st_size < len(blob)
