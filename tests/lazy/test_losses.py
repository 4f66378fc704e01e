"""Losses whose lowering is the runtime's own, against eager CPU: where torch's decomposition
and eager's kernel disagree, eager's numbers are the ones a user gets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.device_checks import DeviceIndexError
from xlacache.lazy.dynamo import report

# targets before the first -1 count; rows with a repeated target, every class a target, no
# target at all, and positions after the -1 that name classes (torch 2.13's decomposition
# counts those as class 0: its losses were up to 4.5 off)
TARGETS = [
    [1, 3, -1, 0, 0, 0],
    [4, -1, 2, 2, 2, 2],
    [5, 0, 2, 4, 3, 1],
    [-1, 0, 0, 0, 0, 0],
    [1, 1, -1, 5, 0, 0],
    [2, 4, 5, 0, 1, -1],
]


def _multilabel(dev: torch.device | str, reduction: str, rows: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    if rows:  # rows == 1: one vector
        x = torch.randn(rows, 6).squeeze(0).to(dev).requires_grad_(True)
        t = torch.tensor(TARGETS[:rows]).squeeze(0).to(dev)
    else:  # a 0-d input: one class
        x = torch.tensor(0.5).to(dev).requires_grad_(True)
        t = torch.tensor(0).to(dev)
    loss = F.multilabel_margin_loss(x, t, reduction=reduction)
    weights = torch.arange(1.0, 1 + loss.numel()).reshape(loss.shape).to(dev)
    (loss * weights).sum().backward()
    return loss.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("rows", [6, 1, 0], ids=["batch", "vector", "scalar"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_and_its_gradient_are_eagers(reduction, rows):
    got = _multilabel(xl.device(), reduction, rows)
    want = _multilabel("cpu", reduction, rows)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_a_multilabel_target_out_of_range_raises_as_eager_does():
    x = torch.randn(2, 5).to(xl.device())
    t = torch.tensor([[1, -1, 7, 0, 0], [1, -1, 0, 0, 0]]).to(xl.device())  # after the -1 too
    with pytest.raises(DeviceIndexError, match="multilabel_margin_loss"):
        F.multilabel_margin_loss(x, t).item()


def test_a_compiled_graph_with_multilabel_margin_loss_runs_lazily_with_eagers_numbers():
    """AOTAutograd decomposes it with torch's own Python kernel whatever the backend asks
    (its losses were up to 5.8 off): such a graph runs lazily, and says why."""

    def step(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.multilabel_margin_loss(torch.tanh(x) * 3, t, reduction="none")

    torch.manual_seed(0)
    x, t = torch.randn(6, 6), torch.tensor(TARGETS)
    want = step(x.requires_grad_(True), t)
    want.sum().backward()
    xd = x.detach().to(xl.device()).requires_grad_(True)
    with pytest.warns(UserWarning, match="multilabel_margin_loss: torch's decomposition"):
        got = torch.compile(step, backend="xlacache")(xd, t.to(xl.device()))
    got.sum().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-6, atol=1e-6)
    assert any("multilabel_margin_loss" in r for r in report()["fallback_reasons"])


def _multi_margin(dev: torch.device | str, p: int, weighted: bool, reduction: str, rows: int):
    torch.manual_seed(0)
    x = torch.randn(rows, 5).squeeze(0).to(dev).requires_grad_(True)
    t = torch.tensor([0, 3, 4, 1][:rows]).squeeze(0).to(dev)
    w = torch.linspace(0.5, 2.0, 5).to(dev) if weighted else None
    loss = F.multi_margin_loss(x, t, p=p, margin=0.7, weight=w, reduction=reduction)
    weights = torch.arange(1.0, 1 + loss.numel()).reshape(loss.shape).to(dev)
    (loss * weights).sum().backward()
    return loss.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("rows", [4, 1], ids=["batch", "vector"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize(("p", "weighted"), [(1, False), (2, True)])
def test_multi_margin_loss_gradient_is_lowered_and_eagers(p, weighted, reduction, rows):
    fallbacks = metrics.counter_value("aten::multi_margin_loss_backward") or 0
    got = _multi_margin(xl.device(), p, weighted, reduction, rows)
    assert (metrics.counter_value("aten::multi_margin_loss_backward") or 0) == fallbacks
    want = _multi_margin("cpu", p, weighted, reduction, rows)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
