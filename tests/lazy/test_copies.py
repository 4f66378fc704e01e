"""Copies where eager copies: ``contiguous``, ``reshape`` and ``flatten`` (methods and functions)
of a tensor eager lays out non-contiguously, ``out=`` tensors eager resizes, window factories.

Lazy tensors report contiguous strides (as torch_xla's do), so without more care
``x.t().contiguous()`` would be ``x.t()`` itself, and a write to it would reach ``x``, which eager
never changes. Each case runs in eager and on the device, and every tensor is compared after the
writes.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import xlacache.lazy as xl

dev = xl.device()


def _t_contiguous(x):
    y = x.t().contiguous()
    y.mul_(2)
    return x, y


def _slice_contiguous(x):
    y = x[:, 1:].contiguous()
    y.zero_()
    return x, y


def _t_reshape(x):
    y = x.t().reshape(-1)
    y.add_(100)
    return x, y


def _strided_slices_reshape(x):
    y = x[:, ::2].reshape(6)  # a copy in eager
    y.add_(1)
    z = x[::2].reshape(8)  # a view in eager: the write reaches x
    z.add_(7)
    return x, y, z


def _flatten_and_reshape_as(x):
    y = x.t().flatten()
    y.add_(1)
    z = x[1:].flatten()  # a view
    z.add_(5)
    w = x.t().reshape_as(torch.empty(12))
    w.add_(3)
    return x, y, z, w


def _function_forms(x):
    y = torch.reshape(x.t(), (12,))
    y.add_(1)
    z = torch.flatten(x[:, 1:])
    z.add_(2)
    w = torch.reshape(x[1:], (8,))  # a view
    w.add_(4)
    return x, y, z, w


def _layout_of_a_result(x):
    y = x.t() * 2  # eager keeps the transposed layout: contiguous() copies
    z = y.contiguous()
    z.add_(1)
    w = y.t().contiguous()  # contiguous again in eager: the same tensor
    w.add_(10)
    return x, y, z, w


def _inplace_transpose(x):
    x.t_()
    y = x.contiguous()
    y.add_(3)
    return x, y


def _expand_and_detach(x):
    y = x.unsqueeze(0).expand(2, 3, 4).contiguous()
    y[0].add_(1)
    z = x.t().detach().contiguous()
    z.add_(1)
    return x, y, z


def _contiguous_stays_a_view(x):
    y = x[1:].contiguous()  # rows: contiguous in eager, the same tensor
    y.add_(1)
    return x, y


CASES = [
    _t_contiguous,
    _slice_contiguous,
    _t_reshape,
    _strided_slices_reshape,
    _flatten_and_reshape_as,
    _function_forms,
    _layout_of_a_result,
    _inplace_transpose,
    _expand_and_detach,
    _contiguous_stays_a_view,
]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_copies_and_views_as_in_eager(fn):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    want = fn(x.clone())
    got = fn(x.clone().to(dev))
    for w, g in zip(want, got, strict=True):
        assert torch.equal(g.cpu(), w)


def test_a_copy_of_a_view_is_a_new_tensor_and_still_trains():
    """Autograd through the copies: gradients as eager's."""
    grads = []
    for d in ("cpu", dev):
        w = torch.randn(4, 3, generator=torch.Generator().manual_seed(1)).to(d).requires_grad_()
        h = w.t().contiguous()
        h.mul_(3)
        (h.reshape(-1).square().sum() + w.sum()).backward()
        grads.append(w.grad.cpu())
    assert torch.equal(grads[1], grads[0])


def _out_ops(d):
    x = torch.arange(12.0).reshape(3, 4).to(d)
    empty = torch.empty(0, device=d)
    r1 = torch.add(x, 1, out=empty)
    vals, idx = torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d)
    r2 = torch.max(x, 1, out=(vals, idx))
    ar = torch.empty(0, device=d)
    torch.arange(2, 9, 2, out=ar)
    ints = torch.empty(0, dtype=torch.int64, device=d)
    torch.arange(5, out=ints)
    cat = torch.empty(0, device=d)
    torch.cat([x, x], out=cat)
    same = (r1 is empty, r2[0] is vals, r2[1] is idx)
    return same, [empty, vals, idx, ar, ints, cat]


def test_out_tensors_are_resized_and_returned_as_in_eager():
    want_same, want = _out_ops("cpu")
    got_same, got = _out_ops(dev)
    assert got_same == want_same == (True, True, True)
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and torch.equal(g.cpu(), w)


def test_an_out_tensor_with_elements_is_resized_with_eagers_warning():
    x = torch.ones(3, 4, device=dev)
    out = torch.empty(2, device=dev)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.add(x, 1, out=out)
    assert out.shape == (3, 4) and torch.equal(out.cpu(), torch.full((3, 4), 2.0))
    assert any("An output with one or more elements was resized" in str(w.message) for w in seen)


@pytest.mark.parametrize(
    "window",
    ["hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window"],
)
def test_window_functions_on_the_device(window):
    fn = getattr(torch, window)
    for periodic in (True, False):
        got = fn(8, periodic=periodic, device=dev)
        assert got.device == dev
        torch.testing.assert_close(got.cpu(), fn(8, periodic=periodic))


def test_stft_with_a_device_window():
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(2))
    kw = {"n_fft": 16, "hop_length": 4, "return_complex": True}
    want = torch.stft(x, window=torch.hann_window(16), **kw)
    got = torch.stft(x.to(dev), window=torch.hann_window(16, device=dev), **kw)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_a_view_eager_refuses_runs_its_meta_kernel_once(monkeypatch):
    """The copy-then-view decision is kept with the shapes: a steady loop does not rerun (and
    raise in) the view's meta kernel every step."""
    from xlacache.lazy import record as record_mod

    calls = []
    real = record_mod.infer
    monkeypatch.setattr(record_mod, "infer", lambda f, *a: calls.append(f) or real(f, *a))
    x = torch.randn(5, 7, device=dev)
    first = x.t().reshape(35)
    views = calls.count(torch.ops.aten.view.default)
    calls.clear()
    again = x.t().reshape(35)
    assert views >= 1 and torch.ops.aten.view.default not in calls
    assert torch.equal(again.cpu(), first.cpu())


@pytest.mark.parametrize(
    "copy_op",
    [
        lambda x: torch.select_copy(x, 0, 1),
        lambda x: torch.slice_copy(x, 1, 0, 2),
        lambda x: torch.split_copy(x, 1),
        lambda x: torch.detach_copy(x),
        lambda x: torch.view_as_real_copy(torch.complex(x, -x)),
        lambda x: torch.view_as_complex_copy(torch.stack([x, -x], -1)),
    ],
)
def test_view_copy_ops_run_on_the_device_and_copy(copy_op):
    """A view op's functional form (``select_copy``: torch's own ``scan`` and functionalized
    graphs call them) is the view then a copy, on the device: a write to it leaves its
    input alone."""
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no CPU run
        got = copy_op(d)
    want = copy_op(x)
    got, want = (o if isinstance(o, (tuple, list)) else [o] for o in (got, want))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.cpu(), w)
        g.add_(100)
    assert torch.equal(d.cpu(), x)
