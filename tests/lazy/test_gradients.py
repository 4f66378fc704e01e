"""Gradients where a function has no derivative are eager's, not NaN: pairwise distances
between coincident points (``cdist``, ``pdist``: eager's kernels give those terms 0)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl

DEV = xl.device()


def _points() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, generator=g, dtype=torch.float64)
    x[3] = x[1]  # a zero distance
    x[4, 0] = x[0, 0]  # a zero difference in one coordinate
    y = torch.randn(4, 3, generator=g, dtype=torch.float64)
    y[0] = x[2]
    return x, y


@pytest.mark.parametrize("p", [0, 0.5, 1, 1.5, 2, 3, math.inf])
@pytest.mark.parametrize("op", ["cdist_self", "cdist", "pdist"])
def test_pairwise_distance_gradients_at_coincident_points_are_eagers(op, p):
    fns = {
        "cdist_self": lambda a, b: torch.cdist(a, a, p),
        "cdist": lambda a, b: torch.cdist(a, b, p),
        "pdist": lambda a, b: F.pdist(a, p),
    }

    def grads(dev):
        x, y = (t.to(dev).requires_grad_() for t in _points())
        out = fns[op](x, y)
        weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(out.shape)
        (out * weights.to(dev)).sum().backward()
        return [out.detach(), x.grad, y.grad if y.grad is not None else torch.zeros(())]

    for got, want in zip(grads(DEV), grads(torch.device("cpu")), strict=True):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-9, atol=1e-12)
