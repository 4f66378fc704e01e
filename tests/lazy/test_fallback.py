"""The CPU fallback never returns a silently stale value: a view op it runs gives a copy, and
writing through that copy, or reading it after the viewed tensor changed, raises."""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy import dispatch
from xlacache.lazy.lowering import LOWERINGS

DEV = xl.device()
aten = torch.ops.aten


def _unfold_on_cpu(x: torch.Tensor) -> torch.Tensor:
    """``x.unfold(0, 3, 2)`` (a view op) run by the CPU fallback."""
    return dispatch.cpu_fallback(aten.unfold.default, (x, 0, 3, 2), {}, warn=False)


def test_fallback_view_reads_like_eager():
    x = torch.arange(8.0)
    assert torch.equal(_unfold_on_cpu(x.to(DEV)).cpu(), x.unfold(0, 3, 2))


def test_write_through_fallback_view_raises():
    w = _unfold_on_cpu(torch.arange(8.0).to(DEV))
    with pytest.raises(NotImplementedError, match="write through a view"):
        w.mul_(2)


def test_fallback_view_of_updated_tensor_raises(monkeypatch):
    monkeypatch.delitem(LOWERINGS, aten.unfold.default)  # nothing can re-derive the view
    x = torch.arange(8.0).to(DEV)
    w = _unfold_on_cpu(x)
    x.add_(1)  # eager's view would see this
    with pytest.raises(NotImplementedError, match="cannot follow in-place updates"):
        w.cpu()


def test_fallback_view_with_a_lowering_follows_updates():
    x, e = torch.arange(8.0).to(DEV), torch.arange(8.0)
    w, we = _unfold_on_cpu(x), e.unfold(0, 3, 2)
    x.add_(1)
    e.add_(1)
    assert torch.equal(w.cpu(), we)


def test_write_through_dtype_view_reaches_the_tensor():
    x = torch.randn(2, 4)
    d = x.to(DEV)
    d.view(torch.int32).add_(1)
    x.view(torch.int32).add_(1)
    assert torch.equal(d.cpu(), x)
