"""Results written into a tensor of another dtype, as eager writes them: an in-place or
``out=`` op refuses a result it cannot cast safely (``int.div_(2)`` raises, never truncates),
a reduction given ``out=`` computes in the out tensor's dtype, an ``out=`` op runs the overload
of its own argument types; conversions and ops whose meaning is the dtype's own; and eager's
dtype checks that torch's meta kernels lack (bool subtraction, the variance of integers)."""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl

DEV = xl.device()
INTS = torch.tensor([3, 4, 5, 6], dtype=torch.int32)
FLOATS = torch.tensor([0.5, 0.7, 1.6, -0.6])


def _empty(like, dtype=torch.float32, n=4):
    return torch.empty(n, dtype=dtype, device=like.device)


def _both(fn):
    """(eager's result or error message, the device's)."""
    out = []
    for dev in ("cpu", DEV):
        try:
            r = fn(INTS.to(dev), FLOATS.to(dev))
            out.append(tuple(t.cpu() for t in r) if isinstance(r, (tuple, list)) else r.cpu())
        except RuntimeError as e:
            out.append(str(e).splitlines()[0])
    return out


REFUSED = {
    "div_": lambda i, f: i.clone().div_(2),
    "mul_ by a 0-dim float": lambda i, f: i.clone().mul_(torch.tensor(1.5)),
    "add_ a float": lambda i, f: i.clone().add_(2.5),
    "sigmoid_": lambda i, f: i.clone().sigmoid_(),
    "bool add_": lambda i, f: (i > 3).add_(3),
    "bool square_": lambda i, f: (i > 3).square_(),
    "clamp_ to a float": lambda i, f: i.clone().clamp_(min=2.5),
    "_foreach_add_": lambda i, f: torch._foreach_add_([i.clone()], 2.5),
    "add out=int": lambda i, f: torch.add(f, f, out=_empty(f, torch.long, 4)),
    "sqrt out=int": lambda i, f: torch.sqrt(f, out=_empty(f, torch.long, 4)),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_result_that_cannot_be_cast_into_its_tensor_raises_eagers_error(case):
    want, got = _both(REFUSED[case])
    assert isinstance(want, str) and "can't be cast to the desired output type" in want
    assert got == want.replace("type int", "type Int")  # clamp_'s own message spells it so


CAST = {
    "lt_ on floats": lambda i, f: f.clone().lt_(0.6),
    "logical_and_ on ints": lambda i, f: i.clone().logical_and_(i),
    "int8 add_ int64 (wraps)": lambda i, f: (i * 40).to(torch.int8).add_((i * 40).long()),
    "float16 add_ float32": lambda i, f: f.half().add_(f),
    "cumsum_ of int32": lambda i, f: i.clone().cumsum_(0),
    "masked_fill_ of ints with a float": lambda i, f: i.clone().masked_fill_(i > 3, 2.5),
    "floor_divide out=float": lambda i, f: torch.floor_divide(i, 2, out=_empty(i)),
    "lt out=float (a Scalar overload)": lambda i, f: torch.lt(f, 0.6, out=_empty(f)),
    "lt out=bool": lambda i, f: torch.lt(f, 0.6, out=_empty(f, torch.bool, 4)),
    "arange out=int32": lambda i, f: torch.arange(0, 5, 2, out=_empty(f, torch.int32, 3)),
}


@pytest.mark.parametrize("case", list(CAST))
def test_a_result_that_casts_is_written_as_eager_writes_it(case):
    want, got = _both(CAST[case])
    assert isinstance(want, torch.Tensor), want
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


def _out(dtype, *shape):
    return lambda dev: torch.empty(shape, dtype=dtype, device=dev)


REDUCED = {
    "sum out=int64": (lambda x, o: torch.sum(x, 0, out=o), _out(torch.int64, 2)),
    "sum out=int8": (lambda x, o: torch.sum(x * 90, 0, out=o), _out(torch.int8, 2)),
    "sum out=float16": (lambda x, o: torch.sum(x, 0, out=o), _out(torch.float16, 2)),
    "mean out=float64": (lambda x, o: torch.mean(x, 0, out=o), _out(torch.float64, 2)),
    "cumsum out=int64": (lambda x, o: torch.cumsum(x, 0, out=o), _out(torch.int64, 2, 2)),
    "cumprod out=int64": (lambda x, o: torch.cumprod(x * 3, 0, out=o), _out(torch.int64, 2, 2)),
    "prod out=int64": (lambda x, o: torch.prod(x * 3, 0, out=o), _out(torch.int64, 2)),
}


@pytest.mark.parametrize("case", list(REDUCED))
def test_a_reduction_given_out_computes_in_the_out_tensors_dtype(case):
    """``torch.sum(x, 0, out=int64_t)`` sums the values converted to int64 (0 + 1 = 1 for
    0.5 + 1.6), not the floats converted afterwards (2)."""
    fn, out = REDUCED[case]
    x = torch.tensor([[0.5, 0.7], [1.6, -0.6]])
    want = fn(x, out("cpu"))
    got = fn(x.to(DEV), out(DEV)).cpu()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_bfloat16_converts_to_integers_as_eager(dtype):
    """Through int32, wrapping, as float32 does: 300 -> int8 44, -1 -> uint8 255."""
    x = torch.tensor([300.0, -1.0, -3.7, 255.9, -200.5, 1e10], dtype=torch.bfloat16)
    want = x.to(dtype)
    assert torch.equal(x.to(DEV).to(dtype).cpu(), want)
    into = torch.zeros(6, dtype=dtype)
    assert torch.equal(into.to(DEV).copy_(x.to(DEV)).cpu(), want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nextafter_steps_in_the_values_own_dtype(dtype):
    a = torch.tensor([3.0, -2.0, 0.0, 1.0, 65504.0], dtype=dtype)
    b = torch.tensor([2.0, 3.0, -1.0, 0.0, float("inf")], dtype=dtype)
    assert torch.equal(torch.nextafter(a.to(DEV), b.to(DEV)).cpu(), torch.nextafter(a, b))


SUBTRACTIONS = {
    "int - bool tensor": lambda i: i - (i > 3),
    "int - True": lambda i: i - True,
    "True - int": lambda i: True - i,
    "sub_(True)": lambda i: i.clone().sub_(True),
    "bool alpha": lambda i: torch.add(i, i, alpha=True),
}


@pytest.mark.parametrize("case", list(SUBTRACTIONS))
def test_bool_subtraction_and_a_bool_alpha_raise_as_in_eager(case):
    fn = SUBTRACTIONS[case]
    with pytest.raises(RuntimeError) as want:
        fn(INTS)
    with pytest.raises(RuntimeError, match="^" + str(want.value).split(".")[0]):
        fn(INTS.to(DEV))


def test_ldexp_of_integers_by_a_0_dim_float16_is_float16():
    """Eager's kernel is ``mul(self, pow(2.0, other))``; torch's decomposition made it
    float32."""
    e = torch.tensor(3.0, dtype=torch.float16)
    want = torch.ldexp(INTS.to(torch.int8), e)
    got = torch.ldexp(INTS.to(torch.int8).to(DEV), e.to(DEV)).cpu()
    assert got.dtype == want.dtype == torch.float16
    assert torch.equal(got, want)


RANGES = {
    "arange int32, float step": lambda dt, dev: torch.arange(-500, 1500, 3.3, dtype=dt, device=dev),
    "arange int32, step under 1": lambda dt, dev: torch.arange(0.5, 7.3, 0.7, dtype=dt, device=dev),
    "linspace from a negative": lambda dt, dev: torch.linspace(-3, 7, 11, dtype=dt, device=dev),
    "linspace of fractions": lambda dt, dev: torch.linspace(0.1, 2.9, 7, dtype=dt, device=dev),
    "logspace from a negative": lambda dt, dev: torch.logspace(-2, 2, 9, dtype=dt, device=dev),
}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32])
@pytest.mark.parametrize("case", list(RANGES))
def test_integer_ranges_are_eagers(case, dtype):
    """Eager converts a range's bounds to the integer dtype first (-3 is 253 in uint8, 0.1 is
    0) and counts a narrow integer range by the given bounds (607 values of int32 from -500
    by 3.3, each 3 apart)."""
    want = RANGES[case](dtype, "cpu")
    got = RANGES[case](dtype, DEV).cpu()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


def test_a_range_bound_past_the_dtype_raises_eagers_error():
    for fn in (torch.linspace, torch.logspace):
        with pytest.raises(RuntimeError, match="cannot be converted to type int8_t"):
            fn(-1000, 1000, 5, dtype=torch.int8)
        with pytest.raises(RuntimeError, match="cannot be converted to type int8_t"):
            fn(-1000, 1000, 5, dtype=torch.int8, device=DEV)


STATISTICS = {
    "var": lambda t: t.var(),
    "std": lambda t: t.std(0),
    "var_mean": lambda t: torch.var_mean(t),
    "std_mean": lambda t: torch.std_mean(t, 0),
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize("case", list(STATISTICS))
def test_variance_of_integers_raises_as_in_eager(case, dtype):
    x = torch.arange(4).to(dtype)
    with pytest.raises(RuntimeError, match="only support floating point") as want:
        STATISTICS[case](x)
    with pytest.raises(RuntimeError, match=str(want.value)):
        STATISTICS[case](x.to(DEV))


@pytest.fixture
def restores_the_default_dtype():
    yield
    torch.set_default_dtype(torch.float32)


@pytest.mark.usefixtures("restores_the_default_dtype")
def test_a_changed_default_dtype_gives_factories_and_integer_math_its_dtype():
    """The default dtype is part of what shape inference remembers: ops recorded before the
    change (float32) must not lend their dtype to the same ops after it."""
    torch.set_default_dtype(torch.float32)
    i = torch.arange(3).to(DEV)
    assert torch.zeros(2, device=DEV).dtype == (i / 2).dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    for fn in (
        lambda dev: torch.zeros(2, device=dev),
        lambda dev: torch.arange(3, device=dev) / 2,
        lambda dev: torch.linspace(0.1, 2.9, 7, device=dev),
        lambda dev: torch.logspace(0.1, 2.3, 5, device=dev),
    ):
        want = fn("cpu")
        got = fn(DEV).cpu()
        assert got.dtype == want.dtype == torch.float64
        assert torch.equal(got, want)
