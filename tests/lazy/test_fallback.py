"""The CPU fallback never returns a silently stale value: a view op it runs gives a copy, and
writing through that copy, or reading it after the viewed tensor changed, raises. An in-place op
it runs writes every argument the op writes, lists of tensors included."""

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


def _fused_sgd_state(device: object) -> tuple[list[torch.Tensor], ...]:
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g)]
    grads = [torch.randn(p.shape, generator=g) for p in ps]
    bufs = [torch.randn(p.shape, generator=g) for p in ps]
    return tuple([t.to(device) for t in ts] for ts in (ps, grads, bufs))


def test_inplace_op_writing_lists_updates_every_tensor():
    """``_fused_sgd_`` writes three lists of tensors (and returns nothing): each element of
    each list gets the CPU kernel's value, where the one-tensor in-place path would raise."""
    kw = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.0, nesterov=True)
    kw.update(maximize=False, is_first_step=False)
    want, got = _fused_sgd_state("cpu"), _fused_sgd_state(DEV)
    aten._fused_sgd_(*want, **kw)
    with pytest.warns(UserWarning, match="running it on CPU"):
        assert aten._fused_sgd_(*got, **kw) is None
    for w, g in zip(want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            assert torch.equal(b.cpu(), a)


def test_fallback_resizes_a_written_argument_as_eager():
    """An out= tensor of another shape takes the result's, as the CPU kernel resized it (its
    own warning): never a broadcast of the result into the old shape."""
    x = torch.randn(3, 4)
    vals = torch.empty(1, device=DEV)  # the kernel resizes it to (3,)
    idx = torch.empty(0, dtype=torch.long, device=DEV)
    args, outs = (x.to(DEV), 1), {"max": vals, "max_values": idx}
    dispatch.cpu_fallback(aten.max.dim_max, args, outs, warn=False)
    want = x.max(1)
    assert torch.equal(vals.cpu(), want.values) and torch.equal(idx.cpu(), want.indices)


@pytest.mark.fallback
def test_a_sparse_result_of_the_cpu_fallback_is_a_clear_error():
    """A sparse embedding's gradient is a sparse COO tensor: XLA arrays are dense, so it is
    refused with what to change, not a layout error from deep in the transfer."""
    emb = torch.nn.Embedding(10, 4, sparse=True).to(DEV)
    loss = emb(torch.tensor([1, 2, 1]).to(DEV)).sum()
    with pytest.raises(
        RuntimeError, match="sparse_coo tensor cannot be put on the device.*sparse=False"
    ):
        loss.backward()
    with pytest.raises(RuntimeError, match="sparse_coo tensor cannot be put on the device"):
        torch.eye(3).to_sparse().to(DEV)


@pytest.mark.filterwarnings("ignore:xlacache.lazy")
def test_an_eager_kernel_on_the_fallback_reads_its_own_conjugate_views():
    """Inside ``__torch_dispatch__`` the dispatcher skips the Conjugate key; an eager kernel
    that conjugates through a view (complex ``lstsq``'s residuals) must still see it, as in
    eager: they came out unconjugated, negative."""
    torch.manual_seed(0)
    a = torch.randn(4, 3, dtype=torch.complex64)
    b = torch.randn(4, 3, dtype=torch.complex64)
    want = torch.linalg.lstsq(a, b, driver="gels")
    got = torch.linalg.lstsq(a.to(DEV), b.to(DEV), driver="gels")
    assert torch.equal(got.solution.cpu(), want.solution)
    assert torch.equal(got.residuals.cpu(), want.residuals)
    assert (got.residuals.cpu() > 0).all()
