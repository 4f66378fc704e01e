"""``F.grid_sample`` on lazy tensors: the 3-d sampler and both samplers' backward ops are
lowered (``lowering/grid_sample.py``), values and gradients as eager's, no CPU fallback."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from xlacache.lazy import metrics

MODES = [(2, m) for m in ("bilinear", "nearest", "bicubic")] + [(3, "bilinear"), (3, "nearest")]
# (padding, align_corners): each padding, each alignment (the border test takes the rest)
PADDINGS = [("zeros", False), ("border", True), ("reflection", False), ("reflection", True)]


def _both(x: torch.Tensor, grid: torch.Tensor, **kw: object) -> tuple[list, list]:
    """(eager's output and gradients, the lazy ones) for a random output gradient."""
    out = []
    go = None
    for dev in ("cpu", xl.device()):
        a = x.detach().to(dev).requires_grad_()
        g = grid.detach().to(dev).requires_grad_()
        y = F.grid_sample(a, g, **kw)
        if go is None:
            go = torch.randn(y.shape, dtype=y.dtype)
        y.backward(go.to(dev))
        out.append([t.detach().cpu() for t in (y, a.grad, g.grad)])
    return out[0], out[1]


def _shapes(dims: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if dims == 2:
        return (2, 3, 5, 7), (2, 4, 6, 2)
    return (2, 2, 4, 5, 6), (2, 3, 4, 5, 3)


@pytest.mark.parametrize("dims,mode", MODES)
def test_values_and_gradients_match_eager_without_fallback(dims: int, mode: str) -> None:
    torch.manual_seed(dims)
    shape, gshape = _shapes(dims)
    before = metrics.executed_fallback_ops()
    for pad, align in PADDINGS:
        x = torch.randn(shape, dtype=torch.float64)
        grid = torch.rand(gshape, dtype=torch.float64) * 2.6 - 1.3  # some outside [-1, 1]
        kw = {"mode": mode, "padding_mode": pad, "align_corners": align}
        eager, lazy = _both(x, grid, **kw)
        for name, e, got in zip(("output", "input grad", "grid grad"), eager, lazy, strict=True):
            torch.testing.assert_close(got, e, rtol=1e-11, atol=1e-11, msg=f"{kw} {name}")
    assert metrics.executed_fallback_ops() == before


@pytest.mark.parametrize("dims", [2, 3])
def test_coordinates_on_the_borders_take_eagers_gradients(dims: int) -> None:
    """Grid values on the borders and on whole pixels: clipped there, a coordinate passes no
    gradient; reflected, it flips; eager's conventions, not the ones autodiff of a clip gives."""
    torch.manual_seed(10 + dims)
    shape, gshape = _shapes(dims)
    ties = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], dtype=torch.float64)
    grid = ties[torch.randint(0, len(ties), gshape)]
    x = torch.randn(shape, dtype=torch.float64)
    for pad, align in itertools.product(("border", "reflection"), (False, True)):
        kw = {"mode": "bilinear", "padding_mode": pad, "align_corners": align}
        eager, lazy = _both(x, grid, **kw)
        torch.testing.assert_close(lazy[2], eager[2], rtol=1e-12, atol=1e-12, msg=str(kw))
        torch.testing.assert_close(lazy[1], eager[1], rtol=1e-12, atol=1e-12, msg=str(kw))
    assert (eager[2] == 0).any()  # the ties are there: some coordinate passed no gradient


def test_nan_coordinates_sample_as_eager_does() -> None:
    """Eager's 3-d kernel clips a NaN coordinate onto the upper border (``border``,
    ``reflection``) and reads nothing for it with ``zeros``."""
    x = torch.randn(1, 1, 3, 3, 3)
    grid = torch.full((1, 1, 1, 2, 3), float("nan"))
    grid[0, 0, 0, 1] = torch.tensor([0.2, float("nan"), -0.3])
    for pad in ("zeros", "border", "reflection"):
        want = F.grid_sample(x, grid, padding_mode=pad, align_corners=False)
        got = F.grid_sample(
            x.to(xl.device()), grid.to(xl.device()), padding_mode=pad, align_corners=False
        )
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


def test_bfloat16_gradients_are_computed_in_float32() -> None:
    """bfloat16 sampling is computed in float32 (as CUDA does): within bfloat16 rounding of
    the float64 gradients."""
    torch.manual_seed(3)
    x = torch.randn(2, 3, 5, 7).bfloat16()
    grid = (torch.rand(2, 4, 6, 2) * 2.4 - 1.2).bfloat16()
    go = torch.randn(2, 3, 4, 6).bfloat16()
    a = x.to(xl.device()).requires_grad_()
    g = grid.to(xl.device()).requires_grad_()
    F.grid_sample(a, g, align_corners=False).backward(go.to(xl.device()))
    a0, g0 = x.double().requires_grad_(), grid.double().requires_grad_()
    F.grid_sample(a0, g0, align_corners=False).backward(go.double())
    assert a.grad.dtype == g.grad.dtype == torch.bfloat16
    for got, want in ((a.grad, a0.grad), (g.grad, g0.grad)):
        err = (got.cpu().double() - want).abs().max().item()
        assert err <= 2**-7 * want.abs().max().item(), err


def test_compiled_backward_runs_as_one_program() -> None:
    """Under ``torch.compile(backend="xlacache")`` the backward graph lowers (no lazy run)."""
    import xlacache.lazy.dynamo as xc

    def f(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return (F.grid_sample(x, g, padding_mode="border", align_corners=False) ** 2).sum()

    torch.manual_seed(4)
    x, grid = torch.randn(2, 2, 4, 5, 6), torch.rand(2, 3, 4, 5, 3) * 2.4 - 1.2
    x0, g0 = x.clone().requires_grad_(), grid.clone().requires_grad_()
    f(x0, g0).backward()
    before = xc.report()
    x1, g1 = x.to(xl.device()).requires_grad_(), grid.to(xl.device()).requires_grad_()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.compile(f, backend="xlacache")(x1, g1).backward()
    after = xc.report()
    assert not [w for w in seen if "runs lazily" in str(w.message)]  # announced, if it did
    assert after["CompiledGraphLazyRun"] == before["CompiledGraphLazyRun"]
    assert after["CompiledGraph"] - before["CompiledGraph"] == 2  # forward and backward
    torch.testing.assert_close(x1.grad.cpu(), x0.grad)
    torch.testing.assert_close(g1.grad.cpu(), g0.grad, rtol=1e-5, atol=1e-4)
