"""torch_xla's names (single-process meanings) and torch_xla's own example scripts, run through
``xlacache.lazy.compat`` with only their imports changed."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch

import xlacache.lazy as xl
import xlacache.lazy.compat as torch_xla
import xlacache.lazy.compat.core.xla_model as xm
import xlacache.lazy.compat.debug.metrics as met
import xlacache.lazy.compat.distributed.parallel_loader as pl
import xlacache.lazy.compat.distributed.xla_multiprocessing as xmp
import xlacache.lazy.compat.utils.serialization as xser
import xlacache.lazy.compat.utils.utils as xu
from xlacache.lazy.compat import runtime as xr

dev = xl.device()
EXAMPLES = Path(__file__).parent / "torch_xla_examples"
ROOT = Path(__file__).resolve().parents[2]


def _executions() -> int:
    return met.counter_value("ExecuteComputation") or 0


# ------------------------------------------------------------------ step closures


@pytest.mark.slow
def test_step_closures_run_after_the_barrier_in_order():
    seen: list = []
    x = torch.ones(3, device=dev)
    loss = (x * 2).sum()
    xm.add_step_closure(lambda t: seen.append(("a", t.item())), args=(loss,))
    xl.add_step_closure(lambda: seen.append(("b", None)))
    assert seen == []  # queued, not run
    before = _executions()
    xm.mark_step()
    assert seen == [("a", 6.0), ("b", None)]
    assert _executions() - before == 1  # the closure read device data: no second graph
    xm.mark_step()
    assert len(seen) == 2  # each closure runs once


def test_async_step_closures_keep_order_and_report_errors():
    seen: list = []
    ran, recorded = threading.Event(), threading.Event()
    for i in range(5):
        xm.add_step_closure(seen.append, args=(i,), run_async=True)
    xm.add_step_closure(ran.set, run_async=True)  # one thread, in order: after the five
    xl.sync()
    assert ran.wait(30)
    assert seen == [0, 1, 2, 3, 4]

    def boom() -> None:
        raise ValueError("closure failed")

    xm.add_step_closure(boom, run_async=True)
    xm.add_step_closure(recorded.set, run_async=True)  # runs once boom's failure is recorded...
    xl.sync()
    assert recorded.wait(30)
    with pytest.raises(RuntimeError, match="asynchronous step closure failed"):
        xl.sync()  # ...and raised by the next barrier
    xl.sync()  # once


# ------------------------------------------------------------------ torch_xla.compile


def test_compile_decorator_and_context_manager_sync():
    w = torch.ones(4, device=dev)

    @torch_xla.compile
    def step(x):
        return (x * w).sum()

    out = step(torch.arange(4.0).to(dev))
    assert out._v[0].op == "data"  # ran at the end of the call
    assert out.item() == 6.0
    with torch_xla.compile():
        y = w * 5
    assert y._v[0].op == "data" and y.tolist() == [5.0] * 4


def test_compile_full_graph_forbids_graph_breaks():
    x = torch.ones(3, device=dev)

    def breaks(t):
        return (t + 1).sum().item()  # runs a graph before the end

    with pytest.raises(RuntimeError, match="full_graph"):
        torch_xla.compile(breaks, full_graph=True)(x)
    assert torch_xla.compile(breaks)(x) == 6.0  # allowed without full_graph
    assert (x + 1).sum().item() == 6.0  # execution allowed again after the error


def test_compile_bounds_different_graphs():
    f = torch_xla.compile(lambda t: (t * 2).sum(), num_different_graphs_allowed=1)
    f(torch.ones(3, device=dev))
    f(torch.ones(3, device=dev))  # the same graph
    with pytest.raises(RuntimeError, match="different graphs"):
        f(torch.ones(5, device=dev))  # another shape: another graph


# ------------------------------------------------------------------ the other names


def test_rate_tracker(monkeypatch):
    from xlacache.lazy import steps

    now = [1000.0]  # a clock the test moves: exact rates, no sleeping
    monkeypatch.setattr(steps, "time", types.SimpleNamespace(time=lambda: now[0]))
    tracker = xm.RateTracker(smooth_factor=0.5)
    tracker.add(100)
    now[0] += 2.0
    assert tracker.rate() == 50.0  # the first rate: nothing to smooth with
    tracker.add(30)
    now[0] += 1.0
    assert tracker.rate() == 0.5 * 30.0 + 0.5 * 50.0
    tracker.add(20)
    assert tracker.global_rate() == 150 / 3.0  # everything added, since creation
    assert tracker.rate() == 0.0  # no time passed: no rate


def test_sample_generator_feeds_the_device_loader():
    data = (torch.zeros(2, 3), torch.ones(2, dtype=torch.int64))
    gen = xu.SampleGenerator(data=data, sample_count=3)
    assert len(gen) == 3
    batches = list(pl.MpDeviceLoader(gen, dev))
    assert len(batches) == 3 and all(b[0].device == dev for b in batches)
    assert batches[0][1].tolist() == [1, 1]


def test_process_names_single_process():
    assert xr.world_size() == xm.xrt_world_size() == 1
    assert xr.global_ordinal() == xm.get_ordinal() == xr.local_ordinal() == 0
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    assert xm.is_xla_tensor(torch.ones(1, device=dev)) and not xm.is_xla_tensor(torch.ones(1))
    assert xr.device_type() == "CPU" and xr.using_pjrt() and not xr.is_spmd()
    assert torch_xla.device() == xm.xla_device() == dev and torch_xla.devices() == [dev]
    buf = io.StringIO()
    xm.master_print("hello", 3, fd=buf)
    assert buf.getvalue() == "hello 3\n"
    assert xm.mesh_reduce("acc", 2.5, lambda xs: sum(xs) / len(xs)) == 2.5
    t = torch.ones(2, device=dev)
    assert xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5).tolist() == [0.5, 0.5]
    assert xmp.spawn(lambda i, a: (i, a), args=(7,), nprocs=1) == (0, 7)
    assert torch_xla.launch(lambda i: i * 10, debug_single_process=True) == 0
    with pytest.raises(ValueError, match="nprocs"):
        xmp.spawn(lambda i: i, nprocs=0)


def test_xser_saves_one_file_per_device_tensor_and_loads_cpu_tensors(tmp_path):
    """``torch_xla.utils.serialization``: a model and its optimizer state, a tensor saved twice
    (one file, one tensor back), host values kept; the loaded state trains on as before."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 4).to(dev)).sum().backward()
    opt.step()
    shared = model[0].weight
    data = {"model": model.state_dict(), "opt": opt.state_dict(), "again": [shared, shared],
            "host": torch.arange(3), "step": 7}  # fmt: skip
    path = tmp_path / "ckpt.pt"
    xser.save(data, path)
    files = sorted(p.name for p in (tmp_path / "ckpt.pt.tensors").iterdir())
    # the state dict's 4 tensors, AdamW's 2 moments per parameter (its steps are CPU tensors,
    # kept in the file itself), and the weight listed twice under "again": written once
    assert len(files) == 4 + 4 * 2 + 1, files
    loaded = xser.load(path)
    assert loaded["step"] == 7 and torch.equal(loaded["host"], torch.arange(3))
    assert loaded["again"][0] is loaded["again"][1]
    for k, v in model.state_dict().items():
        assert loaded["model"][k].device.type == "cpu"
        assert torch.equal(loaded["model"][k], v.cpu())
    again = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(dev)
    again.load_state_dict(loaded["model"])
    opt2 = torch.optim.AdamW(again.parameters(), lr=0.1)
    opt2.load_state_dict(loaded["opt"])
    x = torch.randn(5, 4).to(dev)
    for m, o in ((model, opt), (again, opt2)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(a.cpu(), b.cpu())


def test_manual_seed_reseeds_the_device_only():
    cpu_before = torch.rand(1)
    torch.manual_seed(0)
    cpu_expected = torch.rand(3)
    torch_xla.manual_seed(42)
    a = torch.randn(8, device=dev).cpu()
    torch_xla.manual_seed(42)
    assert torch.equal(torch.randn(8, device=dev).cpu(), a)
    assert xm.get_rng_state() == 42
    torch.manual_seed(0)
    assert torch.equal(torch.rand(3), cpu_expected) and cpu_before.shape == (1,)


def test_metrics_clearing_and_fallback_list():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device=dev)
    assert x.nonzero().flatten().tolist() == [1, 3]  # data-dependent shape: runs on CPU
    assert "aten::nonzero" in met.executed_fallback_ops()
    assert met.metric_data("ExecuteTime") is not None
    met.clear_counters()
    assert met.executed_fallback_ops() == [] and met.counter_value("ExecuteComputation") is None
    assert met.metric_data("ExecuteTime") is not None  # metrics stay
    met.clear_metrics()
    assert met.metric_data("ExecuteTime") is None and met.metric_names() == []


# ------------------------------------------------------------------ torch_xla's own scripts


def _script(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, *args],
        cwd=EXAMPLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_torch_xla_mnist_script_runs():
    """``test/test_train_mp_mnist.py`` from torch_xla, fake-data path, 10 steps of an epoch."""
    out = _script(
        [
            "run_mnist.py",
            "10",
            "--fake_data",
            "--num_epochs=1",
            "--batch_size=128",
            "--log_steps=5",
            "--num_cores=1",  # one process (launch would start one per core)
        ]
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    updates = [ln for ln in lines if ln.startswith("| Training Device=xla:0/0 Epoch=1")]
    assert [u.split()[4] for u in updates] == ["Step=0", "Step=5"]
    losses = [float(u.split()[5].split("=")[1]) for u in updates]
    assert losses[1] < losses[0]
    assert "Max Accuracy: 100.00%" in lines  # all-zero fake data and labels: learnt at once


@pytest.mark.slow
def test_torch_xla_decoder_only_example_runs():
    """``examples/train_decoder_only_base.py``: ``torch_xla.compile(full_graph=True)`` steps."""
    out = _script(["run_decoder_only.py", "12"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    report = json.loads(lines[-1])
    steps = [ln for ln in lines if ln.startswith("epoch: 1, step:")]
    assert [s.split(",")[1].strip() for s in steps] == ["step: 0", "step: 10"]
    losses = [float(s.split("loss: ")[1].split(",")[0]) for s in steps]
    assert losses[1] < losses[0]
    assert report["counters"]["UncachedCompile"] == 2  # first step, then one steady graph
    assert report["counters"]["ExecuteComputation"] == 12 and report["fallbacks"] == []
