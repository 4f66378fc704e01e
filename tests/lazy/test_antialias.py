"""Antialiased interpolation on lazy tensors (``lowering/antialias.py``): eager's windows and
weights, forward and backward, without CPU fallback for floating values; uint8 images run
eager's fixed-point CPU kernel, lazily and under ``torch.compile``."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc
from xlacache.lazy import metrics

SIZES = [((12, 17), (5, 6)), ((5, 6), (12, 17)), ((12, 17), (12, 9))]


def _both(x: torch.Tensor, **kw: object) -> tuple[list, list]:
    """(eager's output and input gradient, the lazy ones) for one random output gradient."""
    out, go = [], None
    for dev in ("cpu", xl.device()):
        a = x.detach().to(dev).requires_grad_()
        y = F.interpolate(a, antialias=True, **kw)
        if go is None:
            go = torch.randn(y.shape, dtype=y.dtype)
        y.backward(go.to(dev))
        out.append([y.detach().cpu(), a.grad.cpu()])
    return out[0], out[1]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_values_and_gradients_match_eager_without_fallback(mode: str) -> None:
    torch.manual_seed(0)
    before = metrics.executed_fallback_ops()
    for (size_in, size_out), align in zip(SIZES, (False, True, False), strict=True):
        x = torch.randn(2, 3, *size_in, dtype=torch.float64)
        kw = {"size": size_out, "mode": mode, "align_corners": align}
        eager, lazy = _both(x, **kw)
        for name, e, got in zip(("output", "gradient"), eager, lazy, strict=True):
            torch.testing.assert_close(got, e, rtol=1e-12, atol=1e-12, msg=f"{kw} {name}")
    assert metrics.executed_fallback_ops() == before


def test_an_infinite_value_reaches_only_the_windows_that_read_it() -> None:
    """Each output sums its own window only: an infinity in the last column leaves the first
    columns finite, as in eager (a dense resampling matrix would spread 0 * inf = NaN)."""
    x = torch.randn(1, 1, 8, 16)
    x[..., -1] = float("inf")
    eager, lazy = _both(x, size=(4, 8), mode="bilinear")
    assert lazy[0][..., :4].isfinite().all()
    torch.testing.assert_close(lazy[0], eager[0], equal_nan=True)


def test_uint8_images_run_eagers_kernel_on_the_cpu_lazily_and_compiled() -> None:
    x = torch.randint(0, 256, (1, 3, 12, 17), dtype=torch.uint8)
    want = F.interpolate(x, size=(5, 6), mode="bilinear", antialias=True)
    n = metrics.counter_value("aten::_upsample_bilinear2d_aa") or 0
    got = F.interpolate(x.to(xl.device()), size=(5, 6), mode="bilinear", antialias=True)
    assert torch.equal(got.cpu(), want)
    assert metrics.counter_value("aten::_upsample_bilinear2d_aa") == n + 1

    def resize(img: torch.Tensor) -> torch.Tensor:
        return F.interpolate(img, size=(5, 6), mode="bilinear", antialias=True)

    before = xc.report()["CompiledGraphLazyRun"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the lazily run graph is announced
        got = torch.compile(resize, backend="xlacache")(x.to(xl.device()))
    assert torch.equal(got.cpu(), want)
    assert xc.report()["CompiledGraphLazyRun"] == before + 1


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_the_weights_are_eagers_bit_for_bit(mode: str) -> None:
    """One-hot rows resampled read each weight alone: equal to eager's to the bit (its cubic
    filter's fused multiply-adds included)."""
    for n_in, n_out in ((17, 6), (31, 7), (6, 17)):
        rows = torch.eye(n_in).reshape(n_in, 1, 1, n_in)
        kw = {"size": (1, n_out), "mode": mode, "antialias": True}
        want = F.interpolate(rows, **kw)
        got = F.interpolate(rows.to(xl.device()), **kw).cpu()
        assert torch.equal(got, want), (n_in, n_out)
