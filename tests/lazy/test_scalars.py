"""Python numbers given to ops: graph inputs where they change from step to step (torch_xla's
scalars: every int but 0 and 1, every float), exact as constants where they do not fit, and
refused where eager refuses to convert them to the tensor's dtype."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from tests.conftest import REPO, run_python
from xlacache.lazy import metrics

DEV = xl.device()


def _compiles() -> int:
    return metrics.counter_value("UncachedCompile") or 0


def _step_ops(x, xi, mask, v):
    """The ops a step may give a changing Python number to."""
    return (
        x * v + v,
        (xi * v).remainder(v + 1),
        x.masked_fill(mask, v),
        torch.clamp(x, max=v),
        torch.where(mask, x, v),
        torch.full((2,), v, device=x.device),
        xi.new_full((3,), v),
    )


@pytest.mark.parametrize("kind", [int, float])
def test_a_changing_number_compiles_once(kind):
    x = torch.arange(4.0) - 1
    xi = torch.arange(4, dtype=torch.int32) - 1
    mask = torch.tensor([True, False, True, False])
    dx, dxi, dmask = x.to(DEV), xi.to(DEV), mask.to(DEV)
    xl.sync()
    seen = []
    for step in range(2, 8):
        v = kind(step) + (0.5 if kind is float else 0)
        got = _step_ops(dx, dxi, dmask, v)
        xl.sync()
        seen.append(_compiles())
        for g, w in zip(got, _step_ops(x, xi, mask, v), strict=True):
            assert g.dtype == w.dtype
            assert torch.equal(g.cpu(), w)
    assert seen[1:] == [seen[0]] * (len(seen) - 1)  # steps after the first compiled nothing


def test_the_first_steps_temporaries_are_not_outputs_of_its_graph():
    """A fresh process: torch imports Dynamo during the first op, and the reference cycle that
    import leaves must not keep the step's temporaries alive (as outputs of its program)."""
    code = (
        "import torch, xlacache.lazy as xl\n"
        "x = torch.ones(4).to(xl.device())\n"
        "xl.sync()\n"
        "for v in (3.5, 4.5, 5.5):\n"
        "    y = x * v + v\n"
        "    xl.sync()\n"
        "print(xl.metrics.counter_value('UncachedCompile'), y.cpu().tolist())\n"
    )
    out = run_python(code, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[0] == "1"  # one program for the three steps


def test_zero_and_one_stay_constants_as_in_torch_xla():
    x = torch.ones(3, device=DEV)
    xl.sync()
    (x * 2).cpu()
    before = _compiles()
    (x * 3).cpu()
    assert _compiles() == before  # 3 is the same program's input
    (x * 1).cpu()
    assert _compiles() == before + 1  # 1 is a constant of its own program


@pytest.mark.parametrize("v", [2**24, -(2**24), 2**24 + 1, 2**40 + 3, -(2**53) - 1])
def test_large_ints_stay_exact(v):
    x = torch.tensor([5, -7], dtype=torch.int64)
    got = (x.to(DEV) + v, x.to(DEV) * v, torch.full((2,), v, device=DEV))
    want = (x + v, x * v, torch.full((2,), v))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.cpu(), w)


def test_a_negative_int_wraps_into_unsigned_as_eager():
    u = torch.tensor([0, 7, 200], dtype=torch.uint8)
    mask = torch.tensor([True, False, True])

    def ops(t, m):
        return t.clone().fill_(-1), torch.where(m, t, -2), t.masked_fill(m, -255), t - 3

    for g, w in zip(ops(u.to(DEV), mask.to(DEV)), ops(u, mask), strict=True):
        assert torch.equal(g.cpu(), w)


def test_a_margin_losss_power_stays_a_constant():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([0, 3, 1, 4])
    for p in (1, 2):
        want = F.multi_margin_loss(x, t, p=p, margin=3)
        got = F.multi_margin_loss(x.to(DEV), t.to(DEV), p=p, margin=3)
        torch.testing.assert_close(got.cpu(), want)


_REFUSED = [
    (torch.int8, 300, lambda t, m, v: t.clone().fill_(v)),
    (torch.int8, -129, lambda t, m, v: torch.full_like(t, v)),
    (torch.int16, 40000, lambda t, m, v: t.new_full((2,), v)),
    (torch.int32, 2**40, lambda t, m, v: t.masked_fill(m, v)),
    (torch.int8, 300, lambda t, m, v: t.clamp(max=v)),
    (torch.int8, 300, lambda t, m, v: t.clamp_min(v)),
    (torch.int8, 300, lambda t, m, v: torch.where(m, t, v)),
    (torch.int8, 300, lambda t, m, v: t.scatter(0, torch.tensor([0], device=t.device), v)),
    (torch.uint8, -1, lambda t, m, v: F.pad(t, (1, 1), value=v)),
    (torch.uint8, -256, lambda t, m, v: t.clone().fill_(v)),
    (torch.int8, float("nan"), lambda t, m, v: t.clone().fill_(v)),
    (torch.float16, 70000, lambda t, m, v: t.masked_fill(m, v)),
    (torch.float16, 65519.0, lambda t, m, v: torch.full_like(t, v)),
    (torch.float16, 70000.0, lambda t, m, v: torch.ops.aten.hardtanh(t, -1.0, v)),
    (torch.float32, 1e39, lambda t, m, v: torch.where(m, t, v)),
    (torch.bfloat16, 1e39, lambda t, m, v: torch.addcmul(t, t, t, value=v)),
    (torch.int8, 300, lambda t, m, v: torch.addcmul(t, t, t, value=v)),
]


@pytest.mark.parametrize(("dtype", "value", "op"), _REFUSED)
def test_a_number_that_does_not_fit_is_refused_as_eager(dtype, value, op):
    t = torch.ones(3, dtype=dtype)
    m = torch.tensor([True, False, True])
    with pytest.raises(RuntimeError, match="without overflow") as eager:
        op(t, m, value)
    with pytest.raises(RuntimeError, match="without overflow") as lazy:
        op(t.to(DEV), m.to(DEV), value)  # at the op, as eager: not when the graph runs
    assert str(lazy.value) == str(eager.value)


_ACCEPTED = [
    (torch.int8, 300, lambda t, m, v: t + v),  # arithmetic converts unchecked, and wraps
    (torch.uint8, -255, lambda t, m, v: t.masked_fill(m, v)),
    (torch.float16, 70000.0, lambda t, m, v: torch.where(m, t, v)),  # inf, as eager
    (torch.float16, 70000.0, lambda t, m, v: torch.addcmul(t, t, t, value=v)),
    (torch.float16, float("inf"), lambda t, m, v: t.clone().fill_(v)),
    (torch.int8, 2.5, lambda t, m, v: t.clone().fill_(v)),
    (torch.bool, 2, lambda t, m, v: t.clone().fill_(v)),
]


@pytest.mark.parametrize(("dtype", "value", "op"), _ACCEPTED)
def test_a_number_eager_converts_is_converted_as_eager(dtype, value, op):
    t = torch.ones(3, dtype=dtype)
    m = torch.tensor([True, False, True])
    want = op(t, m, value)
    got = op(t.to(DEV), m.to(DEV), value).cpu()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


_AS_EAGER = [  # an int graph input keeps the meaning of the Python int it stands for
    (torch.int8, "vec", lambda t, v: t / v, 1000),  # true division: 1000, not int8's -24
    (torch.int8, "vec", lambda t, v: torch.xlogy(t, v), 300),
    (torch.int8, "vec", lambda t, v: torch.copysign(t, v), 255),
    (torch.int8, "0d", lambda t, v: t < v, 1000),  # a 0-d int8 compares with int8's -24
    (torch.int8, "0d", lambda t, v: t % v, 255),
    (torch.int8, "0d", lambda t, v: v // t, 300),
    (torch.uint8, "0d", lambda t, v: t.clamp(max=v), -1),  # -1 is uint8's 255
    (torch.int16, "vec", lambda t, v: torch.isin(t, v), 2**16 + 3),  # not int16's 3
    (torch.int64, "vec", lambda t, v: torch.addcmul(t, t, t, value=v), 2.5),  # value is 2
    (torch.bool, "vec", lambda t, v: torch.add(t, t, alpha=v), -1),  # alpha is True
    (torch.uint8, "vec", lambda t, v: t >> v, 2),  # a logical shift
    (torch.uint8, "vec", lambda t, v: F.hardtanh(t, -v, v), 0.75),  # limits truncated first
    (torch.bfloat16, "vec", lambda t, v: torch.div(v, t, rounding_mode="floor"), 1000),
    (torch.float32, "vec", lambda t, v: torch.div(v, t / 10, rounding_mode="trunc"), 1000),
    (torch.float32, "vec", lambda t, v: torch.div(v, t / 10, rounding_mode="floor"), -7),
]


@pytest.mark.parametrize(("dtype", "shape", "op", "v"), _AS_EAGER)
def test_numbers_mean_what_they_mean_in_eager(dtype, shape, op, v):
    t = torch.tensor([3, -2, 1, 5, 7, 100, 254]).to(dtype)
    t = t[3] if shape == "0d" else t
    want = op(t, v)
    got = op(t.to(DEV), v).cpu()
    assert got.dtype == want.dtype
    if want.dtype == torch.float32:  # XLA divides by a number as a product by its reciprocal
        torch.testing.assert_close(got, want, rtol=2e-7, atol=0)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("op", [torch.remainder, torch.floor_divide, torch.fmod])
def test_a_divisor_that_is_zero_in_the_dividends_dtype_raises_as_eager(op):
    t = torch.tensor([3, 5], dtype=torch.int8)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(t, 2**20)  # 2**20 is 0 as an int8
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(t.to(DEV), 2**20).cpu()
