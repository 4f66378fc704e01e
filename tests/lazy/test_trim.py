"""A pending graph past ``XLA_TRIM_GRAPH_SIZE`` nodes runs before the next op is recorded
(``lazy/trim.py``, torch_xla's trim): a program that reaches no barrier runs graphs of a
bounded size, with the values it would have had."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.state import STATE


def _count(name: str) -> int:
    return metrics.counter_value(name) or 0


def _graph_sizes() -> list[int]:
    data = metrics.metric_data("GraphOps")
    return list(data[2]) if data else []


@pytest.fixture
def cap(monkeypatch):
    """A cap of 300 nodes, looked at every 20 top-level ops."""
    xl.sync()
    monkeypatch.setattr(STATE, "trim_size", 300)
    monkeypatch.setattr(STATE, "trim_every", 20)
    monkeypatch.setattr(STATE, "trim_at", 0)
    metrics.clear_all()


def _chain(dev: torch.device | str, n: int) -> torch.Tensor:
    x = torch.linspace(0, 1, 8).to(dev)
    for _ in range(n):
        x = x * 0.75 + 0.5
    return x


def test_a_graph_past_the_cap_runs_in_pieces_that_compile_once(cap):
    lazy = _chain(xl.device(), 1000)
    assert _count("TrimIrGraph") >= 5  # 2000 ops, no barrier: it ran on the way
    torch.testing.assert_close(lazy.cpu(), _chain("cpu", 1000), rtol=1e-6, atol=0)
    sizes = _graph_sizes()
    assert sizes and max(sizes) <= 300, sizes  # ops per graph: within the cap's nodes
    # the chain's two ops repeat, and the look comes every 20 ops: the same piece each time
    assert _count("UncachedCompile") <= 3, sizes


def test_an_evaluation_loop_without_barriers_keeps_its_graphs_bounded(cap, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from lazy_trim import evaluate  # the benchmark's workload: sums on the device, no sync

    got, want = evaluate(xl.device(), 60), evaluate("cpu", 60)
    assert got[0] == want[0]  # correct predictions
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=0)  # summed loss
    sizes = _graph_sizes()
    assert _count("TrimIrGraph") >= 2
    assert max(sizes) <= 300, sizes  # not one graph of all 60 batches (about 720 ops)


@pytest.mark.slow  # measured: about 2 s
def test_views_and_in_place_updates_across_pieces_stay_exact(cap):
    def run(dev: torch.device | str) -> torch.Tensor:
        buf = torch.zeros(6).to(dev)
        v = buf[1:4]
        w = buf.view(2, 3)
        for i in range(150):
            buf.add_(1)
            v.mul_(0.5)
            w[:, 0] += i
        return buf

    lazy = run(xl.device())
    assert _count("TrimIrGraph") >= 1
    torch.testing.assert_close(lazy.cpu(), run("cpu"), rtol=1e-6, atol=0)


def test_a_loop_that_reads_every_step_is_never_trimmed(monkeypatch):
    """The look walks the pending graph only once enough nodes were made to pass the cap, and
    a read leaves little pending: a steady loop keeps its one graph per step."""
    xl.sync()
    monkeypatch.setattr(STATE, "trim_size", 2000)
    monkeypatch.setattr(STATE, "trim_every", 20)
    monkeypatch.setattr(STATE, "trim_at", 0)
    metrics.clear_all()
    torch.manual_seed(0)
    dev = xl.device()
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(5, 6).to(dev), torch.tensor([0, 2, 1, 1, 0]).to(dev)
    compiled = []
    for _ in range(40):  # about 2,400 top-level ops, no sync: the look comes about 120 times
        before = _count("UncachedCompile")
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        model[0].weight.sum().item()
        compiled.append(_count("UncachedCompile") - before)
    assert _count("TrimIrGraph") == 0
    assert sum(compiled[4:]) == 0, compiled


@pytest.mark.slow  # a fresh interpreter imports torch and jax
def test_the_settings_are_torch_xlas():
    env = {**os.environ, "XLA_TRIM_GRAPH_SIZE": "1234", "XLA_TRIM_GRAPH_CHECK_FREQUENCY": "7"}
    code = "import xlacache.lazy; from xlacache.lazy.state import STATE as S; "
    code += "print(S.trim_size, S.trim_every)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["1234", "7"]
