"""`xlacache explain grpc://...` and gs://...: clients report their explained misses.

A client with XLACACHE_EXPLAIN=1 reports each miss to its server (ReportMiss, read
tokens may) or bucket (one small object each); the server keeps a bounded,
rate-limited ring persisted to its store directory.
"""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from srvutil import READ_TOKEN, WRITE_TOKEN, start_server, write_tokens

from tests.cli_helpers import run as run_cli
from tests.conftest import JAX_PROGRAM, make_key, run_python, xla_flags
from xlacache import counters, explain, misslog
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import (
    InvalidKeyError,
    InvalidRequestError,
    RateLimitedError,
    ServerBusyError,
    UnauthenticatedError,
)
from xlacache.server import misses as server_misses
from xlacache.server.service import MISS_REPORT_RATE
from xlacache.stores.remote import GrpcStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def record(n: int, **fields) -> dict:
    return {"time": 1.0, "key": make_key(n), "label": f"jit_{n}", "reason": "flags",
            "differences": [{"component": "xla_flags", "details": ["`--a=1` added"]}],
            **fields}  # fmt: skip


def test_read_tokens_report_and_the_server_names_the_client(auth_server):
    worker = GrpcStore(auth_server.url, token=READ_TOKEN, readonly=True, timeout=10)
    worker.report_miss(record(1, client="forged"))
    trainer = GrpcStore(auth_server.url, token=WRITE_TOKEN, timeout=10)
    trainer.report_miss(record(2))
    newest = worker.recent_misses()
    assert [(r["key"], r["client"]) for r in newest] == [
        (make_key(2), "trainer"),
        (make_key(1), "worker"),  # the token's name, not what the client claimed
    ]
    assert newest[0]["time"] > 1e9  # stamped by the server on receipt
    assert newest[1]["differences"] == record(1)["differences"]
    with pytest.raises(UnauthenticatedError):
        GrpcStore(auth_server.url, timeout=10).report_miss(record(3))
    shown = run_cli("explain", auth_server.url, "--json", "--token", READ_TOKEN)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["total"] == 2 and data["misses"][1]["client"] == "worker"
    table = run_cli("explain", auth_server.url, "--token", READ_TOKEN)
    assert "worker" in table.stdout and "--a=1" in table.stdout


def test_reports_are_size_bounded_and_rate_limited(server):
    store = GrpcStore(server.url, timeout=10)

    def send_raw(**fields) -> None:  # what a client that bounds nothing may send
        request = pb.ReportMissRequest(miss=pb.MissRecord(**{**record(1), **fields,
                                                            "differences": []}))  # fmt: skip
        store._call(lambda: store._unary(store._stub.ReportMiss, request))

    with pytest.raises(InvalidRequestError, match="at most"):
        send_raw(note="x" * (server_misses.MAX_REPORT_BYTES + 1))
    with pytest.raises(InvalidKeyError):
        store.report_miss(record(1, key="not-a-key"))
    send_raw(note="y" * 50_000)  # under the request bound: clipped by the server
    assert len(store.recent_misses(1)[0]["note"]) == misslog.MAX_TEXT
    store.report_miss(record(1, note="z" * 50_000))  # a client clips its own reports
    assert store.recent_misses(1)[0]["note"] == "z" * (misslog.MAX_TEXT - 3) + "..."
    # One client far past its burst: the server refuses some, and keeps what it took.
    sent = MISS_REPORT_RATE.burst + 300

    def report(n: int) -> bool:
        try:
            store.report_miss(record(n))
        except RateLimitedError:  # the gate's refusal, as for any method with a Rate
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        taken = sum(pool.map(report, range(100, 100 + sent)))
    assert 0 < taken < sent
    assert len(store.recent_misses()) == taken + 2  # and the two kept above
    assert store.server_stats().counters["miss_reports"] == taken + 2


def test_the_ring_survives_a_restart_and_lives_in_the_store_directory(tmp_path):
    srv = start_server(tmp_path)
    try:
        for n in range(3):
            GrpcStore(srv.url, timeout=10).report_miss(record(n))
    finally:
        assert srv.stop() == 0
    srv = start_server(tmp_path, store=srv.store)
    try:
        keys = [r["key"] for r in GrpcStore(srv.url, timeout=10).recent_misses()]
        assert keys == [make_key(n) for n in (2, 1, 0)]
    finally:
        srv.stop(signal.SIGKILL)
    on_disk = run_cli("explain", srv.store, "--json")  # the server host's own view
    assert [m["key"] for m in json.loads(on_disk.stdout)["misses"]] == keys


@pytest.mark.fallback
def test_explainer_reports_are_rate_limited_and_never_cost_the_compile(tmp_path, monkeypatch):
    class Refusing:
        def __init__(self, exc):
            self.exc = exc

        def report_miss(self, record):
            raise self.exc

    busy, broken = Refusing(ServerBusyError("busy")), Refusing(OSError(5, "I/O error"))
    monkeypatch.setattr(explain, "REPORT_BURST", 2)
    monkeypatch.setattr(explain, "REPORTS_PER_SECOND", 0.0)
    from xlacache.key import Identity, KeyInputs
    from xlacache.stores.local import LocalStore

    explainer = explain.Explainer(LocalStore(tmp_path / "c"), reporters=[busy, broken])
    inputs = KeyInputs(
        hlo=b"m", compile_options=b"", jaxlib_version="0.10.2", platform="cpu",
        platform_version="cpu", device_kinds=("cpu",), topology="{}", xla_flags=(),
    )  # fmt: skip
    with pytest.warns(counters.CacheWarning, match="explain error"):
        for _ in range(3):
            assert explainer.on_miss(Identity(inputs, label="jit_x")).reason == "new_program"
    figures = counters.snapshot()
    # Two reports went to both stores and failed; the third was over the burst.
    assert figures["miss_reports_dropped"] == 2 + 2 + 2
    assert figures["errors"] == {"explain": 2}  # the broken store's, not the busy one's
    assert figures.get("miss_reports", 0) == 0


@pytest.mark.fallback
def test_a_store_that_refuses_our_credentials_is_not_asked_again(tmp_path):
    from xlacache.errors import PermissionDeniedError
    from xlacache.stores.local import LocalStore

    class Forbidding:
        calls = 0

        def report_miss(self, record):
            Forbidding.calls += 1
            raise PermissionDeniedError("403: storage.objects.create denied")

    explainer = explain.Explainer(LocalStore(tmp_path / "c"), reporters=[Forbidding()])
    with pytest.warns(counters.CacheWarning, match="explain error"):
        explainer._report(record(1))
    explainer._report(record(2))
    assert Forbidding.calls == 1 and explainer.reporters == ()
    assert counters.snapshot()["errors"] == {"explain": 1}


# -- real JAX programs --------------------------------------------------------------


def run_jax(local, env: dict) -> dict:
    proc = run_python(JAX_PROGRAM, str(local), env={"JAX_PLATFORMS": "cpu", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_read_only_worker_flag_change_is_explained_on_the_server(tmp_path):
    srv = start_server(tmp_path, "--tokens", str(write_tokens(tmp_path / "tokens")))
    try:
        remote = {"XLACACHE_REMOTE": srv.url, "XLACACHE_EXPLAIN": "1"}
        cold = run_jax(tmp_path / "c", {**remote, "XLACACHE_TOKEN": WRITE_TOKEN})
        worker = run_jax(
            tmp_path / "c",
            {**remote, "XLACACHE_TOKEN": READ_TOKEN, "XLACACHE_READONLY": "1",
             "XLA_FLAGS": xla_flags("--xla_cpu_enable_fast_math=true")},
        )  # fmt: skip
        assert worker["stats"]["misses_by_reason"] == {"flags": worker["stats"]["misses"]}
        assert worker["stats"]["miss_reports"] == worker["stats"]["misses"]
        shown = run_cli("explain", srv.url, "--json", "--token", READ_TOKEN)
        misses = json.loads(shown.stdout)["misses"]
        assert len(misses) == cold["stats"]["misses"] + worker["stats"]["misses"]
        newest = misses[0]
        assert newest["reason"] == "flags" and newest["client"] == "worker"
        details = [d for diff in newest["differences"] for d in diff["details"]]
        assert "`--xla_cpu_enable_fast_math=true` added" in details
    finally:
        srv.stop(signal.SIGKILL)


@pytest.mark.slow
def test_misses_reported_to_a_bucket_are_shown_by_explain(gcs, tmp_path):
    url = gcs.url("explained")
    cold = run_jax(tmp_path / "c", {**gcs.env, "XLACACHE_REMOTE": url, "XLACACHE_EXPLAIN": "1"})
    assert cold["stats"]["miss_reports"] == cold["stats"]["misses"] >= 1
    gcs.proxy.reset_log()
    reader = run_jax(
        tmp_path / "r",
        {**gcs.env, "XLACACHE_REMOTE": url, "XLACACHE_EXPLAIN": "1", "XLACACHE_READONLY": "1",
         "XLA_FLAGS": xla_flags("--xla_cpu_enable_fast_math=true")},
    )  # fmt: skip
    assert gcs.proxy.writes() == []  # a read-only process writes nothing to a bucket
    assert reader["stats"].get("miss_reports", 0) == 0
    shown = run_cli("explain", url, "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["total"] == cold["stats"]["misses"]
    assert {m["reason"] for m in data["misses"]} == {"new_program"}
    assert any(m["label"] == "jit_step" for m in data["misses"])
