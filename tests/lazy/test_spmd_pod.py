"""SPMD pods: one mesh over 2 processes x 4 CPU devices (``xl.launch``, ``CPU_NUM_DEVICES``),
each process feeding its half of the global batch; one compile per pod through the cache.

Real jobs: spawned processes on loopback, ``jax.distributed`` with gloo collectives. Each test
is one or two jobs (a few seconds each, slow on a loaded machine).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from tests.conftest import child_env, xla_flags
from tests.lazy import _spmd_pod as workers
from tests.stores.backends import tree_snapshot
from xlacache.lazy.distributed.launch import LaunchError
from xlacache.stores.local import LocalStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import spmd_gpt  # noqa: E402
from gpt import GPT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed"), pytest.mark.timeout(600)]


@pytest.fixture
def pod(monkeypatch):
    """Every worker of a job started here gets 4 CPU devices; waits are short."""
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    monkeypatch.setenv("XLACACHE_COLLECTIVE_TIMEOUT", "60s")
    monkeypatch.setenv("XLACACHE_INIT_TIMEOUT", "120s")


def test_one_mesh_over_the_job_placement_reads_and_errors(pod, tmp_path):
    saved = tmp_path / "saved.pt"
    r0, r1 = xl.launch(workers.api, args=(str(saved),), nprocs=2)
    torch.manual_seed(0)
    w = torch.randn(8, 6)
    state = torch.load(saved)
    assert torch.equal(state["w"], w) and state["y"].shape == (8,)
    for rank, r in enumerate((r0, r1)):
        assert r["names"] == [8, 4, rank, 2]  # global devices, local ones, process, processes
        assert r["mesh"] == [[0, 0], [0, 0], [1, 1], [1, 1]]  # ids 0-3 on process 0
        assert "no device with id [8, 9, 10, 11, 12, 13, 14, 15]" in r["no_device"]
        assert "the job has 8: 2 process(es) x 4" in r["no_device"]
        # a global (8, 6) array: this process holds 4 of its 8 shards
        assert r["placed"] == [[8, 6], 4, "{devices=[4,2]<=[8]}"]
        assert r["w_ok"] and r["y_ok"] and r["whole_ok"] and r["after_ok"]
        assert r["cleared"] == ["{replicated}", 4, True]
        # the global batch: process 0's rows, then process 1's
        want = [
            [float(3 * i + j + 100 * (i >= 4) - 12 * (i >= 4)) for j in range(3)] for i in range(8)
        ]
        assert r["minibatch"] == want
        assert r["whole_shards"] == 4
        other = 1 - rank
        assert (
            f"rank(s) [{other}] hold another value than rank {rank} for mark_sharding"
            in (r["differs"])
        )
        assert f"rank(s) [{other}] run cross-process program" in r["inputs"]
        assert "with other inputs" in r["inputs"]
        assert "ranks run different programs" in r["graph"]
        assert f"rank {rank}: a read" in r["graph"] and f"rank {other}: a read" in r["graph"]
    # rank 0 read a sharded value that rank 1 skipped: both learn it at once, by name
    assert "rank 0: a read of a sharded value" in r0["skip"] and "rank 1: sync" in r0["skip"]
    assert "rank 1: sync" in r1["skip"] and "rank 0: a read of a sharded value" in r1["skip"]
    assert "rank(s) [1] exited before cross-process program" in r0["exited"]


def test_a_killed_worker_stops_the_pod_with_one_error_naming_it(pod, monkeypatch):
    # 4 devices per worker from XLA_FLAGS this time (a mesh of 8 needs both workers')
    monkeypatch.delenv("CPU_NUM_DEVICES")
    monkeypatch.setenv("XLA_FLAGS", xla_flags("--xla_force_host_platform_device_count=4"))
    with pytest.raises(LaunchError, match=r"rank 1 was killed by SIGKILL") as info:
        xl.launch(workers.killed, args=(2,), nprocs=2)
    assert info.value.rank == 1 and "stopped the other 1 worker" in str(info.value)


TINY = ["--layers", "1", "--dim", "16", "--heads", "2", "--seq", "8", "--vocab", "32"]
TINY += ["--batch", "8", "--steps", "3"]


def test_the_example_runs_as_a_pod_under_torchrun(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    run += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    out = subprocess.run(
        [*run, str(EXAMPLES / "spmd_gpt.py"), "--json", "--cache", str(tmp_path / "c"), *TINY],
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env({"CPU_NUM_DEVICES": "4", "XLACACHE_COLLECTIVE_TIMEOUT": "60s"}),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])  # rank 0 prints for the job
    assert r["procs"] == 2 and r["devices"] == 8  # CPU_NUM_DEVICES in each torchrun worker
    assert r["compiled_per_rank"][0] >= 2 and r["compiled_per_rank"][1] == 0
    assert r["writes_per_rank"][1] == 0 and r["losses"][-1] < r["losses"][0]


def eager(cfg) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The same training in plain PyTorch on CPU, on the global batches."""
    torch.manual_seed(0)
    model = GPT(cfg.vocab, cfg.d, cfg.heads, cfg.layers, cfg.seq, 0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    losses = []
    for batch in spmd_gpt.global_batches(cfg):
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, cfg.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach() for k, v in model.state_dict().items()}


def test_gpt_tensor_x_data_parallel_over_two_processes_compiles_once_per_pod(pod, tmp_path):
    cache = tmp_path / "shared"
    LocalStore(cache).close()  # the job's shared directory, made before it starts
    cfg = spmd_gpt.parse(["--mesh", "tp", *TINY, "--cache", str(cache), "--params"])
    losses, params = eager(cfg)
    assert losses[-1] < losses[0]

    cold = xl.launch(spmd_gpt.train, args=(cfg,), nprocs=2)
    writer, reader = cold
    assert writer["devices"] == 8 and writer["procs"] == 2
    assert "devices=[2,1,4]" in writer["qkv_sharding"]  # the model axis spans 2 devices
    for r in cold:  # a 4x2 (data x model) mesh over both processes, each fed half a batch
        torch.testing.assert_close(
            torch.tensor(r["losses"]), torch.tensor(losses), rtol=1e-5, atol=0
        )
        for name, value in params.items():  # sharded matmuls sum in another order, and
            # AdamW divides by sqrt(v): rounding differences of a few 1e-6 (seen 3.3e-6)
            torch.testing.assert_close(r["params"][name], value, rtol=1e-5, atol=1e-5)
    assert writer["losses"] == reader["losses"]
    # rank 0 compiled every program (first step, steady step, the gathers of the sharded
    # weights it read back); rank 1 loaded each of them and wrote nothing
    assert writer["compiled"] >= 3 and writer["cache"]["writes"] >= writer["compiled"]
    assert reader["compiled"] == 0
    assert reader["loaded_from_cache"] == writer["compiled"]
    assert reader["cache"]["writes"] == reader["cache"]["misses"] == 0
    entries = [p for p in (cache / "entries").rglob("*") if p.is_file()]
    assert len(entries) == writer["cache"]["writes"]  # executables and their aliases: rank 0's
    assert not [p for p in (cache / "leases").rglob("*") if p.is_file()]

    before = tree_snapshot(cache, exclude=("index.sqlite",))
    warm = xl.launch(spmd_gpt.train, args=(cfg,), nprocs=2)
    assert tree_snapshot(cache, exclude=("index.sqlite",)) == before  # nobody wrote anything
    for r in warm:  # every program by alias: nothing compiled, no sharded graph lowered
        assert r["compiled"] == 0 and r["lowered"] == 0, r
        assert r["loaded_by_alias"] == writer["compiled"] and r["cache"]["misses"] == 0
        assert r["losses"] == writer["losses"]
        for name, value in writer["params"].items():
            assert torch.equal(r["params"][name], value)


def test_an_index_out_of_range_in_a_program_over_the_pods_mesh_raises_on_every_process(pod):
    r0, r1 = xl.launch(workers.embedding_past_vocabulary, nprocs=2)
    assert isinstance(r0["reads"][0], float) and r0["reads"][0] == r1["reads"][0]
    assert r0["reads"][1] == r1["reads"][1] == "DeviceIndexError"
