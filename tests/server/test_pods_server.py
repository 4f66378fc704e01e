"""What a pod asks of a server beyond entries: coalesced read-through from a bucket, job
manifests for new workers, and uses of prefetched entries counted only once taken."""

from __future__ import annotations

import signal
import threading

import pytest
from srvutil import (
    ADMIN_TOKEN,
    READ_TOKEN,
    WRITE_TOKEN,
    make_entry,
    start_bucket_server,
    start_server,
    write_tokens,
)

from tests.waiting import wait_for
from xlacache import counters
from xlacache.cache import CompilationCache
from xlacache.errors import PermissionDeniedError
from xlacache.stores.gcs import GCSStore
from xlacache.stores.remote import GrpcStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SECONDS = 60.0


def never(*_):
    raise AssertionError("must not be called")


@pytest.fixture
def server(tmp_path):
    srv = start_server(tmp_path)
    yield srv
    srv.stop(signal.SIGKILL)


def served_hits(url: str, key: str) -> int:
    with GrpcStore(url, timeout=10) as client:
        return client.stat(key).hits


def test_a_new_reader_prefetches_its_jobs_entries_and_counts_them_when_used(server):
    keys = []
    with GrpcStore(server.url, timeout=10) as store:
        writer = CompilationCache(store, job="train-gpt")
        for n in range(3):
            key, blob = make_entry(f"program-{n}")
            store.put(key, blob)
            keys.append(key)
            assert writer.get_or_compile(key, never, load=lambda p: p, serialize=never)
        writer._recorder.flush()  # what a writer does every few seconds, and at exit
        assert store.jobs().keys("train-gpt", 10) == keys
    assert [served_hits(server.url, k) for k in keys] == [1, 1, 1]

    # A reader with no local directory: its hits all come from the server, via prefetch.
    counters.reset()
    store = GrpcStore(server.url, readonly=True, timeout=10)
    reader = CompilationCache(store, readonly=True, job="train-gpt")
    reader.prefetch(lambda e: b"loaded:" + e.header.key.encode(), ready=lambda: True).join(30)
    assert [served_hits(server.url, k) for k in keys] == [1, 1, 1]  # a prefetch is no use
    for key in keys[:2]:
        got = reader.get_or_compile(key, never, load=never, serialize=never, context={})
        assert got == b"loaded:" + key.encode()
    figures = counters.snapshot()
    assert figures["hits"] == figures["prefetch_hits"] == figures["remote_hits"] == 2
    assert figures["misses"] == 0
    reader.close()  # sends the uses (Touch)
    wait_for(lambda: [served_hits(server.url, k) for k in keys] == [2, 2, 1], SECONDS,
             "the touched hits")  # fmt: skip


def test_a_reader_without_a_local_directory_counts_remote_hits(server):
    key, blob = make_entry("plain")
    with GrpcStore(server.url, timeout=10) as store:
        store.put(key, blob)
    with GrpcStore(server.url, readonly=True, timeout=10) as store:
        reader = CompilationCache(store, readonly=True)
        assert reader.get_or_compile(key, never, load=lambda p: b"ok", serialize=never) == b"ok"
    figures = counters.snapshot()
    assert figures["hits"] == figures["remote_hits"] == 1


def test_job_manifests_keep_runs_in_order_and_take_writes_from_writers_only(tmp_path):
    srv = start_server(tmp_path, "--tokens", str(write_tokens(tmp_path / "tokens")))
    try:
        k = [make_entry(f"k{n}")[0] for n in range(4)]
        with GrpcStore(srv.url, token=WRITE_TOKEN, timeout=10) as writer:
            jobs = writer.jobs()
            assert jobs.keys("job-1", 10) == []
            jobs.record("job-1", "run-a", [k[0], k[1]])
            jobs.record("job-1", "run-a", [k[1], k[2]])  # the same run, later: after its own
            assert jobs.keys("job-1", 10) == [k[0], k[1], k[2]]
            jobs.record("job-1", "run-b", [k[3], k[1]])  # a newer run comes first
            assert jobs.keys("job-1", 10) == [k[3], k[1], k[0], k[2]]
            assert jobs.keys("job-1", 2) == [k[3], k[1]]
            with pytest.raises(ValueError, match="job name"):
                jobs.keys("../etc", 10)
        with GrpcStore(srv.url, token=READ_TOKEN, timeout=10) as reader:
            assert reader.jobs().keys("job-1", 1) == [k[3]]
            with pytest.raises(PermissionDeniedError):
                GrpcStore(srv.url, token=READ_TOKEN).jobs().record("job-1", "r", [k[0]])
        with GrpcStore(srv.url, token=ADMIN_TOKEN, timeout=10) as admin:
            assert admin.server_stats().counters["job_records"] == 3
        assert (srv.store / "jobs" / "job-1.json").is_file()
    finally:
        srv.stop(signal.SIGKILL)


def test_a_bucket_server_reads_a_key_through_once_for_many_readers(tmp_path, gcs):
    key, blob = make_entry("popular", size=1 << 20)
    GCSStore(gcs.url()).put(key, blob)
    srv = start_bucket_server(tmp_path, gcs.url(), gcs.env)
    try:
        gcs.proxy.reset_log()
        gcs.proxy.delay(1.0, method="GET", path=key)  # every reader asks during the fetch
        results: list[bytes | None] = []
        barrier = threading.Barrier(8)

        def read() -> None:
            with GrpcStore(srv.url, timeout=30) as client:
                barrier.wait(30)
                results.append(client.get(key))

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SECONDS)
        assert results == [blob] * 8
        fetched = [r for r in gcs.proxy.requests if r[0] == "GET" and key in r[1]]
        assert len(fetched) == 1  # one read from the bucket for eight readers
        with GrpcStore(srv.url, timeout=10) as client:
            figures = client.server_stats().counters
        assert figures["coalesced_reads"] == 7
    finally:
        srv.stop(signal.SIGKILL)


def test_closing_a_store_lets_a_use_record_in_flight_finish(server):
    """``close`` waits (within its timeout) for the Touch its background thread is sending,
    rather than closing the channel under it: the use is counted, and no error is hidden."""
    key, blob = make_entry("touched")
    with GrpcStore(server.url, timeout=10) as store:
        store.put(key, blob)
    store = GrpcStore(server.url, timeout=10)
    server.send(signal.SIGSTOP)  # the Touch below stays in flight until the server goes on
    try:
        store.record_hit(key)
        wait_for(lambda: not store._touches, SECONDS, "the toucher to take the use")
        threading.Timer(0.5, server.send, [signal.SIGCONT]).start()
        store.close()
    finally:
        server.send(signal.SIGCONT)
    assert served_hits(server.url, key) == 1


def test_closing_a_job_recorder_lets_its_write_in_flight_finish(server):
    """A writer's job manifest update in flight at exit finishes before the store closes:
    the key is recorded for the job's next workers, and no error is hidden."""
    from xlacache.job_recorder import JobRecorder

    key, _ = make_entry("recorded")
    store = GrpcStore(server.url, timeout=10)
    recorder = JobRecorder(store.jobs(), "train-gpt")
    server.send(signal.SIGSTOP)  # the manifest write below stays in flight
    try:
        recorder.note(key)
        wait_for(lambda: not recorder._pending, SECONDS, "the recorder to take the key")
        threading.Timer(0.5, server.send, [signal.SIGCONT]).start()
        recorder.close()
        store.close()
    finally:
        server.send(signal.SIGCONT)
    with GrpcStore(server.url, timeout=10) as reader:
        assert reader.jobs().keys("train-gpt", 10) == [key]
