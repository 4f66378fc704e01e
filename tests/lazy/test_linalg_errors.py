"""Factorizations that fail say what eager says: LAPACK's ``info`` (which leading minor is not
positive-definite) and the errors of ``torch.linalg`` and the deprecated ``torch.cholesky``."""

from __future__ import annotations

import warnings

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy.torch_internals import aten_op

DEV = xl.device()

NOT_PD = torch.tensor([[1.0, 2.0], [2.0, 1.0]])  # the minor of order 2 is not PD
CASES = {
    "pd": torch.tensor([[4.0, 2.0], [2.0, 3.0]]),
    "order 2": NOT_PD,
    "order 1": torch.tensor([[-1.0, 0.0], [0.0, 1.0]]),
    "order 2 of 3": torch.tensor([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
    "nan": torch.tensor([[float("nan"), 0.0], [0.0, 1.0]]),
    "batch": torch.stack([torch.eye(2), NOT_PD, torch.tensor([[-1.0, 0.0], [0.0, 1.0]])]),
    "float64": torch.tensor([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]).double(),
    "complex": torch.tensor([[1.0, 2j], [-2j, 1.0]]),
    "empty": torch.zeros(2, 0, 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cholesky_ex_info_is_lapacks(name):
    a = CASES[name]
    want = torch.linalg.cholesky_ex(a)
    got = torch.linalg.cholesky_ex(a.to(DEV))
    assert got.info.cpu().tolist() == want.info.tolist()
    ok = want.info == 0
    if ok.all():
        torch.testing.assert_close(got.L.cpu(), want.L)


def _error(fn, *args) -> str:
    try:
        fn(*args)
    except RuntimeError as e:  # torch.linalg.LinAlgError is a RuntimeError
        return f"{type(e).__name__}: {e}"
    return "no error"


@pytest.mark.parametrize("name", ["order 2", "order 2 of 3", "batch"])
def test_linalg_cholesky_raises_eagers_error(name):
    a = CASES[name]
    want = _error(torch.linalg.cholesky, a)
    assert "leading minor of order 2" in want
    assert _error(lambda t: torch.linalg.cholesky(t).cpu(), a.to(DEV)) == want


@pytest.mark.skipif(aten_op("cholesky") is None, reason="torch.cholesky is gone (torch 2.14)")
@pytest.mark.parametrize("name", ["pd", "order 2", "batch"])
@pytest.mark.parametrize("upper", [False, True])
def test_deprecated_cholesky_raises_where_eager_raises(name, upper):
    a = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cholesky is deprecated
        want = _error(torch.cholesky, a, upper)
        got = _error(lambda t, u: torch.cholesky(t, u).cpu(), a.to(DEV), upper)
        assert got == want
        if want == "no error":
            factor = torch.cholesky(a.to(DEV), upper).cpu()
            torch.testing.assert_close(factor, torch.cholesky(a, upper))
