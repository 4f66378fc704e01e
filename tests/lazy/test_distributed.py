"""Multi-process data parallel (``xl.launch``, collectives, ``optimizer_step``): real jobs of
spawned processes on loopback, ``jax.distributed`` with gloo collectives."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

import xlacache.lazy as xl
from tests.conftest import child_env
from tests.lazy import _dist_workers as workers
from xlacache.lazy.distributed import env
from xlacache.lazy.distributed.launch import LaunchError
from xlacache.stores.local import LocalStore

pytestmark = pytest.mark.xdist_group("distributed")


@pytest.mark.slow
def test_collectives_and_process_names_in_a_two_process_job():
    r0, r1 = xl.launch(workers.collectives, nprocs=2)
    for r in (r0, r1):
        assert r["sum"] == [3.0, 2.0]  # [1, 0] + [2, 2]
        assert r["max"] == [2.0, 2.0] and r["min"] == [2.0, 0.0]  # min times scale 2
        assert r["mul"] == [2.0, 0.0]
        assert r["gather"] == [[1.0, 0.0], [2.0, 2.0]]  # rank order
        assert r["mesh"] == 10 and r["rdv"] == ["r0", "r1"]
        assert r["list"] == [[1.0, 1.0], [2.0, 2.0, 2.0]]  # a list is reduced in place
        assert r["scalar"] == 1.0 and r["flag"] == [True]
    assert r0["names"] == (2, 0, 0, True) and r1["names"] == (2, 1, 1, False)


@pytest.mark.slow
def test_two_process_training_matches_one_process_on_the_combined_batch():
    steps, batch = 4, 8
    alone = xl.launch(workers.train, args=(steps, batch), nprocs=1)  # runs here, world 1
    assert alone["world"] == 1
    r0, r1 = xl.launch(workers.train, args=(steps, batch), nprocs=2)
    assert r0["world"] == 2 and r0["losses"] == r1["losses"]
    assert alone["losses"][-1] < alone["losses"][0]
    torch.testing.assert_close(
        torch.tensor(r0["losses"]), torch.tensor(alone["losses"]), rtol=1e-5, atol=0
    )
    for name, value in alone["params"].items():
        torch.testing.assert_close(r0["params"][name], value, rtol=1e-5, atol=1e-7)
        assert torch.equal(r0["params"][name], r1["params"][name])  # replicas stay identical


@pytest.mark.slow
def test_a_worker_killed_mid_run_stops_the_job_with_a_clear_error(tmp_path):
    marker = str(tmp_path / "step2-rank")
    with pytest.raises(LaunchError, match=r"rank 1 was killed by SIGKILL") as info:
        xl.launch(workers.killed_mid_run, args=(marker,), nprocs=2)
    assert info.value.rank == 1
    assert "stopped the other 1 worker" in str(info.value)
    assert not (tmp_path / "step2-rank1").exists()  # it died before finishing step 2


@pytest.mark.slow
def test_a_worker_exception_is_raised_by_launch():
    with pytest.raises(LaunchError, match=r"rank 1 raised ValueError: boom on purpose") as info:
        xl.launch(workers.raise_on_rank_1, nprocs=2)
    assert "Traceback" in str(info.value)  # the worker's traceback comes along


@pytest.mark.slow
def test_ranks_that_trace_different_collective_graphs_get_an_error_not_a_wrong_sum():
    # psum over constants would fold to ``constant * world`` on each rank: 0 and 2, not 1
    with pytest.raises(LaunchError, match=r"ranks run different programs at cross-process"):
        xl.launch(workers.rank_dependent_constant, nprocs=2)


@pytest.mark.slow
def test_ranks_pair_by_execution_so_evictions_on_one_rank_do_not_break_the_check(monkeypatch):
    # rank 0 evicts and compiles again each round, rank 1 hits its in-memory cache: pairing
    # by compiles would wait for a program rank 1 never compiles
    monkeypatch.setenv("XLACACHE_COLLECTIVE_TIMEOUT", "30s")
    r0, r1 = xl.launch(workers.evicting, args=(3,), nprocs=2)
    assert r0["evictions"] >= 4 and r1["evictions"] == 0
    assert r0["compiles"] > r1["compiles"]
    for r in (r0, r1):
        assert r["sums"] == [[2.0, 6.0, 10.0]] * 3  # 2 * ([0, 1, 2] + [1, 2, 3])
        assert r["gathers"] == [[[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]] * 3


@pytest.mark.slow
def test_collectives_within_replica_groups():
    results = xl.launch(workers.grouped, nprocs=4)
    values = [[r + 1.0, 10.0 * r] for r in range(4)]
    for rank, r in enumerate(results):
        group = [0, 2] if rank % 2 == 0 else [1, 3]
        assert r["sum"] == [sum(values[g][i] for g in group) for i in range(2)]
        assert r["max"] == [max(values[g][i] for g in group) * 0.5 for i in range(2)]
        assert r["gather"] == [values[g] for g in reversed(group)]  # in the group's order
        assert r["all"] == [10.0, 60.0]  # one group of every rank: all processes
        assert "every rank of 4 exactly once" in r["bad"]


def test_launch_runs_in_place_for_one_process_and_checks_nprocs():
    assert xl.launch(workers.names, nprocs=1) == (0, 1, 0, 1)
    assert xl.launch(workers.names, debug_single_process=True) == (0, 1, 0, 1)
    with pytest.raises(ValueError, match="nprocs"):
        xl.launch(workers.names, nprocs=0)


def test_collectives_with_one_process_are_identities():
    dev = xl.device()
    t = torch.tensor([1.0, -2.0], device=dev)
    assert xl.all_reduce("sum", t, scale=0.5).cpu().tolist() == [0.5, -1.0]
    assert xl.all_gather(t).cpu().tolist() == [1.0, -2.0]
    ts = [t.clone()]
    assert xl.all_reduce("max", ts, scale=2.0) is ts and ts[0].cpu().tolist() == [2.0, -4.0]
    with pytest.raises(ValueError, match="reduce type"):
        xl.all_reduce("avg", t)
    assert xl.mesh_reduce("x", 3, sum) == 3 and xl.rendezvous("t", b"p") == [b"p"]


def _store_files(root) -> dict[str, tuple[int, int]]:
    """Every file of a store directory but SQLite's index (the writer counts hits there)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("index.sqlite")
    }


@pytest.mark.slow
def test_a_four_process_job_compiles_each_program_once_and_readers_write_nothing(tmp_path):
    cache = tmp_path / "shared"
    LocalStore(cache).close()  # the job's shared directory, made before it starts
    cold = xl.launch(workers.train, args=(2, 8, str(cache)), nprocs=4)
    writer, readers = cold[0], cold[1:]
    programs = writer["stats"]["misses"]  # the lazy graphs, and JAX's own small programs
    assert programs >= writer["counters"]["UncachedCompile"] >= 3
    assert writer["stats"]["writes"] >= programs  # executables, and their alias entries
    for r in readers:  # same keys as rank 0: each program loaded, none compiled or written
        assert r["counters"]["UncachedCompile"] == 0, r["counters"]
        assert r["stats"]["misses"] == r["stats"]["writes"] == 0, r["stats"]
        assert r["stats"]["hits"] == programs and r["stats"]["errors"] == {}
        assert r["losses"] == writer["losses"]
    # the store holds exactly what the writer wrote, and no lease is left behind
    entries = [p for p in (cache / "entries").rglob("*") if p.is_file()]
    assert len(entries) == writer["stats"]["writes"]
    assert not [p for p in (cache / "leases").rglob("*") if p.is_file()]
    # warm: nobody compiles, and nothing in the store changes
    before = _store_files(cache)
    warm = xl.launch(workers.train, args=(2, 8, str(cache)), nprocs=4)
    assert _store_files(cache) == before
    for r in warm:
        assert r["counters"]["UncachedCompile"] == 0 and r["stats"]["misses"] == 0, r["stats"]
        assert r["stats"]["writes"] == 0 and r["losses"] == writer["losses"]


@contextlib.contextmanager
def _listening_above_a_free_port() -> Iterator[int]:
    """A free port P while something listens on P + 1."""
    for _ in range(50):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1] - 1
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            yield port
            return
    raise AssertionError("no free port below a listening one in 50 tries")


ONE_PROCESS_COORDINATOR = """
import sys, jax
address = f"127.0.0.1:{sys.argv[1]}"
jax.distributed.initialize(address, 1, 0, coordinator_bind_address=address,
                           initialization_timeout=60)
print("joined", jax.process_count(), flush=True)
"""


def test_a_reserved_coordinator_port_is_refused_to_others_and_bound_by_the_coordinator():
    """``xl.launch`` holds its coordinator's port for the job: a port only picked and let go
    once went to a concurrent job, whose task 0 then registered with ours ("tried to
    connect with a different incarnation", both jobs aborted)."""
    with env.reserve_port() as reserved:
        port = reserved.getsockname()[1]
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # nobody else gets it, asked for or picked
        code = [sys.executable, "-c", ONE_PROCESS_COORDINATOR, str(port)]
        out = subprocess.run(code, capture_output=True, text=True, timeout=120, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["joined", "1"]  # JAX's coordinator bound it beside


TORCHRUN_JOINS = """
import pathlib, sys
import jax
from xlacache.lazy.distributed import env
job = env.join()
# One file per worker: two workers printing to torchrun's one pipe interleave their writes.
line = f"{job.rank} {job.coordinator} {jax.process_count()}"
(pathlib.Path(sys.argv[1]) / f"rank{job.rank}").write_text(line)
"""


@pytest.mark.slow
def test_torchrun_workers_agree_on_a_free_coordinator_port_through_torchruns_store(tmp_path):
    """MASTER_PORT + 1 is often taken (torchrun's own connections get ports next to
    MASTER_PORT, and JAX's coordinator aborts the process when it cannot bind): here it is."""
    script = tmp_path / "joins.py"
    script.write_text(TORCHRUN_JOINS)
    with _listening_above_a_free_port() as port:
        run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        run += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
        run += [str(script), str(tmp_path)]
        out = subprocess.run(run, capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    lines = sorted(path.read_text().split() for path in tmp_path.glob("rank*"))
    assert [line[0] for line in lines] == ["0", "1"] and lines[0][1:] == lines[1][1:]
    host, _, agreed = lines[0][1].rpartition(":")
    assert host == "127.0.0.1" and int(agreed) not in (port, port + 1)
    assert lines[0][2] == "2"  # one jax.distributed job of two processes


@pytest.mark.slow
def test_an_index_out_of_range_raises_on_the_rank_whose_program_took_it():
    r0, r1 = xl.launch(workers.embedding_past_vocabulary_on_rank_1, nprocs=2)
    assert r0["reads"][0] == r1["reads"][0]  # the same sum on both ranks
    assert isinstance(r0["reads"][1], float)  # its own ids were in range
    assert r1["reads"][1] == "DeviceIndexError"
