"""Pods of real JAX processes over one store: one compile per program across the pod,
a holder SIGKILLed mid-compile replaced (at once where the store sees it die, else within
its lease's ttl), readers that write nothing anywhere. Stores: a shared directory, a
server, a bucket (fake-gcs-server).

Compiles are counted by wrapping JAX's backend compile in each worker (tests/podutil.py),
independently of xlacache's own figures.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.podutil import compile_count, result_of, run_pod, run_worker, start_worker
from tests.server.srvutil import start_server
from tests.stores.backends import tree_snapshot
from tests.waiting import wait_for
from xlacache.stores.gcs_leases import DEFAULT_SKEW
from xlacache.stores.remote import GrpcStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BACKENDS = ["dir", "server", "bucket"]
TTL = 3.0


@pytest.fixture(scope="module")
def alone(tmp_path_factory) -> dict:
    """One worker alone on an empty cache: the programs it compiles, and its loss."""
    return run_worker({"path": str(tmp_path_factory.mktemp("alone") / "cache")})


def server_calls(server) -> dict[str, float]:
    """The server's RPC counts since it started, as {"Method.CODE": n}."""
    with GrpcStore(server.url) as client:
        counters = client.server_stats().counters
    prefix = "requests."
    return {k.removeprefix(prefix): v for k, v in counters.items() if k.startswith(prefix)}


class Pod:
    """Where the workers of one test keep their entries."""

    def __init__(self, kind: str, tmp_path, request) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.env: dict[str, str] = {}
        self.remote: str | None = None
        self.server = None
        if kind == "server":
            self.server = start_server(tmp_path)
            request.addfinalizer(lambda: self.server.stop(signal.SIGKILL))
            self.remote = self.server.url
        elif kind == "bucket":
            self.gcs = request.getfixturevalue("gcs")
            self.remote = self.gcs.url()
            self.env = self.gcs.env

    def settings(self, i: int, **options) -> dict:
        """Worker i's settings: a shared directory, or its own in front of the remote."""
        if self.remote is None:
            return {"path": str(self.tmp_path / "shared"), "options": options}
        path = str(self.tmp_path / f"worker-{i}")
        return {"path": path, "options": {"remote": self.remote, **options}}

    @property
    def skew(self) -> float:
        return DEFAULT_SKEW if self.kind == "bucket" else 0.0


@pytest.fixture(params=BACKENDS)
def pod(request, tmp_path) -> Pod:
    return Pod(request.param, tmp_path, request)


def test_workers_missing_one_program_at_once_compile_it_once(pod, alone, tmp_path):
    n = compile_count(alone)
    assert n >= 2  # the arrays' programs and the step
    slow = {"compile_seconds": 0.5}  # the workers' compiles overlap, however loaded the machine
    workers = [({**pod.settings(i, role="writer"), **slow}, pod.env) for i in range(3)]
    results = run_pod(workers, tmp_path)
    assert sum(compile_count(r) for r in results) == n  # as many as one worker alone
    assert all(r["loss"] == alone["loss"] for r in results)
    stats = [r["stats"] for r in results]
    assert sum(s["hits"] for s in stats) == 3 * n - n  # loaded, most after waiting
    assert sum(s["compiles_avoided"] for s in stats) >= 1
    assert all(s["errors"] == {} for s in stats), stats


def test_without_single_flight_every_worker_compiles(alone, tmp_path):
    shared = {"path": str(tmp_path / "shared"), "options": {"single_flight": False}}
    pod = [({**shared, "compile_seconds": 0.5}, None)] * 3  # their compiles overlap
    results = run_pod(pod, tmp_path)
    assert sum(compile_count(r) for r in results) > compile_count(alone)


def test_readers_by_rank_wait_for_the_writer_and_write_nothing(tmp_path, alone):
    server = start_server(tmp_path)
    try:
        workers = [
            ({"path": str(tmp_path / f"w{rank}"), "options": {"remote": server.url}},
             {"RANK": str(rank)})
            for rank in range(3)
        ]  # fmt: skip
        writer, *readers = run_pod(workers, tmp_path)
        assert compile_count(writer) == compile_count(alone)
        for reader in readers:
            assert compile_count(reader) == 0  # every program: the writer's entry
            assert reader["stats"]["writes"] == reader["stats"]["uploads"] == 0
            assert reader["loss"] == alone["loss"]
        assert not (tmp_path / "w1").exists() and not (tmp_path / "w2").exists()
        calls = server_calls(server)
        assert calls.get("Put.OK") == compile_count(alone)  # the writer's, no reader's
        assert calls.get("LeaseWait.OK", 0) > 0  # the readers watched the writer's leases
        with GrpcStore(server.url) as client:
            figures = client.server_stats().counters  # as the readers reported their waits
        assert figures["compiles_avoided"] >= 1 and figures["wait_seconds"] > 0
        assert figures["leases_granted"] >= compile_count(alone)
    finally:
        server.stop(signal.SIGKILL)


def test_a_holder_killed_mid_compile_is_replaced(pod, alone, tmp_path):
    # A directory or a server sees the holder die: its lease ends at once, long before
    # its (here 600 s) ttl could run out. A bucket cannot: the lease expires after its ttl.
    ttl = TTL if pod.kind == "bucket" else 600.0
    options = {"role": "writer", "lease_ttl": ttl}
    hanging, waiting = tmp_path / "hanging", tmp_path / "waiting"
    holder = start_worker(
        {**pod.settings(0, **options), "hang_on": "step", "hanging": str(hanging)}, pod.env
    )
    waiter = None
    try:
        # It holds the step's lease and compiles "forever".
        wait_for(hanging.exists, 180, "the holder to compile", procs=[holder])
        waiter = start_worker({**pod.settings(1, **options), "waiting": str(waiting)}, pod.env)
        wait_for(waiting.exists, 180, "the waiter to wait on the holder", procs=[waiter])
        time.sleep(TTL)  # renewed all along: the waiter keeps waiting
        assert waiter.poll() is None
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        killed = time.time()
        result = result_of(waiter)  # well within the 600 s ttl
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    stats = result["stats"]
    assert stats["leases_taken_over"] == 1 and stats["wait_seconds"] > 0
    assert result["loss"] == alone["loss"]
    (step_compile,) = [t for name, t in result["compiles"] if "step" in name]
    if pod.kind == "bucket":  # after the ttl (plus the clock allowance and a few polls)
        assert step_compile - killed < TTL + pod.skew + 5.0
    if pod.kind == "server":
        with GrpcStore(pod.server.url) as client:
            assert client.server_stats().counters["leases_expired_on_disconnect"] == 1
    # The entry it stored serves the next worker.
    again = run_worker(pod.settings(2, role="writer"), pod.env)
    assert compile_count(again) == 0 and again["loss"] == alone["loss"]


def test_a_reader_writes_nothing_anywhere(pod, alone, tmp_path):
    run_worker(pod.settings(0, role="writer"), pod.env)  # the arrays' programs are stored
    if pod.kind == "dir":
        before = tree_snapshot(tmp_path / "shared", exclude=("index.sqlite-shm",))
    elif pod.kind == "server":
        before = tree_snapshot(pod.server.store, exclude=("index.sqlite",))
        calls_before = server_calls(pod.server)
    else:
        pod.gcs.proxy.reset_log()
    # A reader by rank, not waiting long for a writer that will not come.
    reader = run_worker(
        {**pod.settings(1, writer_grace=0.5), "variant": 1}, {**pod.env, "RANK": "1"}
    )
    # It loaded what was stored, compiled the new step itself, and stored nothing.
    new = [name for name, _ in reader["compiles"]]
    assert len(new) == 1 and "step" in new[0]
    assert reader["stats"]["hits"] == compile_count(alone) - 1
    assert reader["stats"]["writes"] == reader["stats"]["uploads"] == 0
    if pod.kind == "dir":
        assert tree_snapshot(tmp_path / "shared", exclude=("index.sqlite-shm",)) == before
        assert not list((tmp_path / "shared").glob("leases/*"))  # no lease taken
        return
    assert not (tmp_path / "worker-1").exists()  # no local directory made either
    if pod.kind == "server":
        assert tree_snapshot(pod.server.store, exclude=("index.sqlite",)) == before
        calls = server_calls(pod.server)
        written = {
            call: calls[call] - calls_before.get(call, 0)
            for call in calls
            if call.startswith(("Put.", "Lease.", "Delete.", "ReportCorrupt.", "Prune."))
        }
        assert set(written.values()) == {0}, written
        assert calls["LeaseWait.OK"] > calls_before.get("LeaseWait.OK", 0)  # it watched
    else:
        assert pod.gcs.proxy.writes() == []
