"""Batch norm without an affine weight or bias (``nn.BatchNorm*d(affine=False)``, SimCLR's
projection head; ``F.batch_norm`` with running statistics only) trains and evaluates as eager:
outputs, running statistics and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xlacache.lazy as xl

DEV = xl.device()


def _module_steps(dev: torch.device | str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4, affine=False)).to(dev)
    out = []
    for train in (True, True, False):
        model.train(train)
        x = torch.randn(5, 6).to(dev).requires_grad_()
        y = model(x)
        (y * torch.arange(4.0).to(dev)).sum().backward()
        out += [y, x.grad, model[1].running_mean, model[1].running_var]
    return [t.detach().cpu() for t in out]


def test_a_batch_norm_without_affine_parameters_trains_as_in_eager():
    for got, want in zip(_module_steps(DEV), _module_steps("cpu"), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [None, "bias"])
def test_functional_batch_norm_with_a_missing_weight_is_eagers(training, affine):
    def run(dev):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(2, 3, 4, 5, generator=g).to(dev).requires_grad_()
        rm, rv = torch.randn(3, generator=g).to(dev), torch.rand(3, generator=g).to(dev)
        bias = torch.full((3,), 0.5).to(dev) if affine else None
        y = F.batch_norm(x, rm, rv, bias=bias, training=training, momentum=0.3)
        y.square().sum().backward()
        return [t.detach().cpu() for t in (y, x.grad, rm, rv)]

    for got, want in zip(run(DEV), run("cpu"), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_norm_no_update_without_a_weight_is_eagers(dtype):
    """The op torch's training IR gives an evaluation batch norm (its meta kernel refuses a
    missing weight, and says CUDA's statistics shapes)."""
    x, rm, rv = (t.to(dtype) for t in (torch.randn(2, 3, 4), torch.randn(3), torch.rand(3)))
    op = torch.ops.aten._batch_norm_no_update.default
    want = op(x, None, None, rm, rv, 0.1, 1e-5)
    got = op(x.to(DEV), None, None, rm.to(DEV), rv.to(DEV), 0.1, 1e-5)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batch_norm_without_running_statistics_saves_them_in_the_inputs_dtype(dtype):
    """``_native_batch_norm_legit.no_stats``, as eager's CPU kernel (its meta kernel, like
    CUDA, says float32 statistics)."""
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    op = torch.ops.aten._native_batch_norm_legit.no_stats
    want = op(x, None, None, True, 0.5, 1e-5)
    got = op(x.to(DEV), None, None, True, 0.5, 1e-5)
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w)
