"""Values at the edges of what eager defines, lazily and compiled: integer cumulative sums
and products accumulate in int64, a variance whose correction leaves no degrees of freedom
divides by zero, a reflection pad reaching past its input raises eager's error, a k-th value
counts NaN as the largest."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl

DEV = xl.device()


def _run(fn, compiled):
    if not compiled:
        return fn
    torch._dynamo.reset()
    return torch.compile(fn, backend="xlacache")


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool, torch.float32])
def test_cumulative_ops_accumulate_in_eagers_dtype(op, dtype, compiled):
    x = torch.tensor([2**30, 2**30, 3], dtype=torch.int64).to(dtype)
    if op == "cumprod" and dtype is torch.int32:
        x = torch.tensor([2**20, 2**20, 3], dtype=dtype)
    want = getattr(x, op)(0)
    got = _run(lambda t: getattr(t, op)(0), compiled)(x.to(DEV)).cpu()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("correction", [0, 1, 2, 3])
def test_a_variance_without_degrees_of_freedom_is_eagers(correction, compiled):
    x = torch.tensor([[1.0, 1.0], [1.0, 3.0]])

    def stats(t):
        return (
            t.var(1, correction=correction),
            t.std(correction=correction),
            *torch.var_mean(t, 0, correction=correction),
        )

    for got, want in zip(_run(stats, compiled)(x.to(DEV)), stats(x), strict=True):
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize(
    ("shape", "pad"),
    [
        ((1, 1, 5), (0, 5)),
        ((1, 1, 5), (5, 0)),
        ((1, 3, 3), (1, 1, 3, 0)),
        ((1, 2, 2, 2), (0, 0, 0, 0, 2, 0)),
    ],
)
def test_a_reflection_past_the_input_raises_eagers_error(shape, pad):
    x = torch.arange(float(torch.Size(shape).numel())).view(shape)
    with pytest.raises(RuntimeError, match="Padding size should be less") as eager:
        F.pad(x, pad, mode="reflect")
    argument = str(eager.value).split(":")[0]
    with pytest.raises(RuntimeError, match=f"{argument}: Padding size should be less"):
        F.pad(x.to(DEV), pad, mode="reflect").cpu()
    sizes = [s for s in reversed(shape) for _ in (0, 1)][: len(pad)]  # each pad's dimension
    inside = tuple(min(p, s - 1) for p, s in zip(pad, sizes, strict=True))
    torch.testing.assert_close(
        F.pad(x.to(DEV), inside, mode="reflect").cpu(), F.pad(x, inside, mode="reflect")
    )


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_kthvalue_counts_nan_as_the_largest(compiled):
    """Eager's selection puts NaN past every number: the k-th smallest is NaN only for k past
    the numbers (a median of a slice with NaN is NaN; a k-th value is not)."""
    x = torch.tensor([[3.0, float("nan"), -0.5, 2.0, float("-inf"), 1.0, float("inf"), -1.0]])
    x = torch.cat([x, x.flip(1), torch.full_like(x, float("nan"))])
    for k in range(1, x.shape[1] + 1):
        want = torch.kthvalue(x, k, 1)
        got = _run(lambda t, k=k: torch.kthvalue(t, k, 1), compiled)(x.to(DEV))
        torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
        finite = ~want.values.isnan()  # which NaN of a slice: eager's selection order
        assert torch.equal(got.indices.cpu()[finite], want.indices[finite])


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_topk_counts_nan_as_the_largest_whatever_its_sign_bit(dtype, compiled):
    """torch converts NaN to bfloat16 as 0xFFFF, a NaN with its sign bit set, which an order of
    the bits puts below every number."""
    x = torch.tensor([[1.0, float("nan"), 3.0, 2.0], [5.0, 4.0, float("nan"), float("nan")]])
    x = x.to(dtype)
    want = x.topk(2, 1)
    got = _run(lambda t: t.topk(2, 1), compiled)(x.to(DEV))
    torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
    assert torch.equal(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_nan_to_num_gives_the_largest_value_of_the_inputs_dtype(dtype, compiled):
    """An infinity becomes the largest finite value of the input's own dtype (a bfloat16 or
    float16 one, not float32's, which would round back to infinity)."""
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 1.0], dtype=dtype)
    for kwargs in ({}, {"posinf": 1e39}, {"nan": 2.5, "posinf": 7.0, "neginf": -1e5}):
        want = torch.nan_to_num(x, **kwargs)
        got = _run(lambda t, kw=kwargs: torch.nan_to_num(t, **kw), compiled)(x.to(DEV)).cpu()
        assert torch.equal(got, want), (kwargs, got, want)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("op", ["sum", "cumsum", "nansum"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_reduction_to_a_16_bit_float_accumulates_in_float32(op, dtype, compiled):
    # 64ths up to 4: float32 adds 300 of them exactly, a 16-bit accumulator would round
    x = torch.randint(-256, 256, (4, 300), generator=torch.Generator().manual_seed(0)) / 64

    def reduce(t):
        return getattr(torch, op)(t, 1, dtype=dtype)

    got = _run(reduce, compiled)(x.to(DEV)).cpu()
    assert torch.equal(got, reduce(x))


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_a_product_of_integers_given_a_float_dtype_multiplies_floats(compiled):
    x = torch.full((2, 10), 2**10, dtype=torch.int32)  # 2**100: exact in float64, not in int64

    def products(t):
        return torch.prod(t, 1, dtype=torch.float64), torch.cumprod(t, 1, dtype=torch.float32)

    for got, want in zip(_run(products, compiled)(x.to(DEV)), products(x), strict=True):
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_bfloat16_batch_norm_in_eval_mode_computes_its_scale_in_float32(compiled):
    # var + eps rounded to bfloat16 before the square root moves some of these outputs
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2, 64, generator=g).to(torch.bfloat16)
    stats = [torch.randn(2, generator=g), torch.rand(2, generator=g) + 0.1]
    stats = [s.to(torch.bfloat16) for s in stats]

    def norm(t, mean, var):
        return F.batch_norm(t, mean, var, training=False, eps=0.3)

    got = _run(norm, compiled)(x.to(DEV), *(s.to(DEV) for s in stats)).cpu()
    assert torch.equal(got, norm(x, *stats))


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_16_bit_division_with_a_rounding_mode_rounds_as_eager(mode, dtype, compiled):
    # by a tensor: eager rounds after each operation (the quotient first); by a number: float32
    g = torch.Generator().manual_seed(0)
    a, b = ((torch.randn(20000, generator=g) * 4).to(dtype) for _ in range(2))

    def divide(x, y):
        return torch.div(x, y, rounding_mode=mode), torch.div(x, 0.1, rounding_mode=mode)

    for got, want in zip(_run(divide, compiled)(a.to(DEV), b.to(DEV)), divide(a, b), strict=True):
        assert torch.equal(got.cpu(), want)


def test_integer_shifts_broadcast_and_an_integer_range_truncates_its_bounds():
    x, y = torch.tensor([1, 2, -8]), torch.tensor([[0], [1], [3]])
    for shift in (torch.bitwise_left_shift, torch.bitwise_right_shift):
        assert torch.equal(shift(x.to(DEV), y.to(DEV)).cpu(), shift(x, y))
    for bounds in [(-0.9, 2.1, 2.0), (0.0, -8.000001, -4.0), (1.1, 5.1, 2.0)]:
        want = torch.arange(*bounds, dtype=torch.int64)
        assert torch.equal(torch.arange(*bounds, dtype=torch.int64, device=DEV).cpu(), want)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_soft_margin_loss_rounds_each_step_and_its_gradient_does_not_cancel(dtype, compiled):
    """Eager rounds each step of the loss to the input's dtype (a float16 margin of -30
    overflows exp: inf); its gradient ``y * z / (1 + z)`` keeps 1e-6 and 2e-11 where torch's
    decomposition, ``sigmoid(y * x) - 1``, gave 9.6e-7 and -0.0."""
    x = torch.tensor([-8.4765625, -1.765625, -4.32421875, -2.400390625, -7.94921875])
    y = torch.tensor([3.611328125, -8.0703125, -0.57373046875, 3.12890625, -3.033203125])
    x, y = x.to(dtype), y.to(dtype)
    want_x = x.clone().requires_grad_()
    want = F.soft_margin_loss(want_x, y)
    want.backward()
    got_x = x.to(DEV).requires_grad_()
    got = _run(F.soft_margin_loss, compiled)(got_x, y.to(DEV))
    got.backward()
    assert torch.isinf(want) == (dtype == torch.float16)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-6, atol=0)
    torch.testing.assert_close(got_x.grad.cpu(), want_x.grad, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("op", ["sinh", "cosh", "exp2"])
def test_sinh_cosh_and_exp2_stay_accurate_for_large_arguments(op, compiled):
    """XLA's own expansions are 12-60 ulp off there (``exp(x + log(1/2))``, ``exp(x * ln 2)``)
    where eager's are within an ulp or two; ``sinh(89)`` is finite in float32. (Below 2**-120
    float32 results are subnormal, which XLA flushes to zero.)"""
    x = torch.cat([torch.linspace(-89.3, 89.3, 301), torch.linspace(-120.0, 127.0, 301)])
    if op != "exp2":
        x = x[:301]
    want = getattr(torch, op)(x.double())
    got = _run(getattr(torch, op), compiled)(x.to(DEV)).cpu()
    assert torch.isfinite(got).all()
    ulp = torch.finfo(torch.float32).eps * want.abs()
    assert ((got.double() - want).abs() <= 3 * ulp).all()


@pytest.mark.parametrize("op", ["sinh", "cosh", "exp2"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_sinh_cosh_and_exp2_of_complex_values_are_complex_functions(op, dtype):
    x = torch.tensor([0.5 - 2j, -3 + 1j, 40 + 40j, 2 + 0j], dtype=dtype)
    want = getattr(torch, op)(x)
    got = getattr(torch, op)(x.to(DEV)).cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize(
    "op",
    [
        lambda t: torch.softmax(t / 2.83, -1),
        lambda t: torch.log_softmax(t / 2.83, -1),
        lambda t: torch.logsumexp(t / 2.83, -1),
        lambda t: torch.softmax(t, -1),
        lambda t: torch.log_softmax(t, -1),
        lambda t: torch.logsumexp(t, -1),
    ],
    ids=["softmax", "log_softmax", "logsumexp", "softmax-raw", "log_softmax-raw", "lse-raw"],
)
def test_a_scaled_fully_masked_row_is_uniform_as_in_eager(op, compiled):
    """A left-padded sequence's row of scores is all float32's min; scaled, XLA:CPU fused the
    product into softmax's ``x - max(x)``, leaving its rounding error (-3e30): 0/0."""
    inf = float("inf")
    x = torch.full((7, 4), torch.finfo(torch.float32).min)
    x[1] = torch.tensor([0.5, -1.0, 2.0, 0.0])
    x[2:] = torch.tensor(
        [[-inf] * 4, [inf, 1, 2, 3], [inf, inf, 0, 0], [-inf, 1, 2, 3], [1e38, -1e38, 0, 0]]
    )
    got = _run(op, compiled)(x.to(DEV)).cpu()
    torch.testing.assert_close(got, op(x), equal_nan=True)
