"""Inputs the OpInfo suite's first samples miss (``benchmarks/opinfo_conformance.py
--samples 25`` found them): empty dims, one step, 0-d and empty operands, broadcast masks,
string paddings. Each equals eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl

X = torch.arange(12.0).reshape(3, 4)
CASES = {
    "flip of no dims": lambda d: X.to(d).flip(()),
    "logspace of one step": lambda d: torch.logspace(1.5, -3, 1, base=2, device=d),
    "transpose of a 0-d tensor": lambda d: torch.tensor(3.0).to(d).transpose(0, -1),
    "gather from a 0-d tensor": lambda d: torch.tensor(4.0).to(d).gather(0, torch.tensor(0).to(d)),
    "gather with an empty index": lambda d: X[0].to(d).gather(0, torch.zeros(2, 0).long().to(d)),
    "scatter_add with an empty index": lambda d: (
        X[0].to(d).scatter_add(0, torch.zeros(2, 0).long().to(d), torch.ones(2, 0).to(d))
    ),
    "scatter into a 0-d tensor": lambda d: (
        torch.tensor(2.0)
        .to(d)
        .scatter(0, torch.tensor(0).to(d), torch.tensor(5.0).to(d), reduce="multiply")
    ),
    "scatter_reduce of 0-d": lambda d: (
        torch.tensor(2.0)
        .to(d)
        .scatter_reduce(0, torch.tensor(0).to(d), torch.tensor(5.0).to(d), "amax")
    ),
    "masked_scatter broadcasting the input": lambda d: (
        X[0].to(d).masked_scatter((X > 5).to(d), -X.to(d))
    ),
    "masked_scatter with nothing masked": lambda d: X.to(d).masked_scatter(
        torch.zeros(3, 4, dtype=torch.bool).to(d), torch.zeros(0).to(d)
    ),
    "group_norm of an empty batch": lambda d: F.group_norm(torch.zeros(0, 4, 3).to(d), 2),
    "conv2d padding='valid'": lambda d: F.conv2d(
        torch.arange(50.0).reshape(1, 2, 5, 5).to(d),
        torch.ones(3, 2, 2, 3).to(d),
        stride=2,
        padding="valid",
    ),
    "conv3d padding='valid'": lambda d: F.conv3d(
        torch.arange(10.0).reshape(1, 1, 1, 1, 10).to(d),
        torch.ones(1, 1, 1, 1, 4).to(d),
        padding="valid",
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_inputs_equal_eager(name):
    want = CASES[name]("cpu")
    got = CASES[name](xl.device()).cpu()
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
