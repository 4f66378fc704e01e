"""Gradients through LU factors: torch's ``_linalg_det``/``_linalg_slogdet`` return the LU
factors of ``A^T`` for a contiguous real ``A`` (``_linalg_solve_ex``: of ``A``, left or right),
and their backward formulas solve with those factors. The runtime returns the same factors,
lazily and in compiled graphs: before, the gradients of ``det``/``slogdet`` (and of
``solve(left=False)``) on non-symmetric matrices were those of ``A^T``."""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl

torch.manual_seed(0)
A = torch.randn(5, 5)
BATCH = torch.randn(3, 4, 4)
B = torch.randn(5, 3)

CASES = {
    "det": lambda a: torch.linalg.det(a),
    "det of a transposed view": lambda a: torch.linalg.det(a.mT * 2),
    "slogdet": lambda a: torch.linalg.slogdet(a).logabsdet + torch.linalg.slogdet(a).sign,
    "Tensor.det": lambda a: a.det(),
    "logdet": lambda a: torch.logdet(a @ a.mT + torch.eye(a.shape[-1], device=a.device)),
    "solve": lambda a: torch.linalg.solve(a, B.to(a.device)),
    "solve left=False": lambda a: torch.linalg.solve(a, B.mT.to(a.device), left=False),
    # their graphs check LAPACK's info with an ordered op (AOTAutograd's with_effects), which
    # runs lazily in order
    "inv": lambda a: torch.linalg.inv(a),
    "cholesky": lambda a: torch.linalg.cholesky(a @ a.mT + torch.eye(a.shape[-1], device=a.device)),
}


def _grad(fn, x: torch.Tensor, dev, compiled: bool) -> tuple[torch.Tensor, torch.Tensor]:
    a = x.clone().to(dev).requires_grad_(True)
    f = torch.compile(fn, backend="xlacache") if compiled else fn
    out = f(a)
    out.sum().backward()
    return out.detach().cpu(), a.grad.cpu()


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("name", list(CASES))
def test_gradients_through_lu_factors_are_eagers(name, compiled):
    torch._dynamo.reset()
    for x in (A, BATCH) if "solve" not in name else (A,):  # the rhs is 5 x 3
        want = _grad(CASES[name], x, "cpu", False)
        got = _grad(CASES[name], x, xl.device(), compiled)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
