"""Dtype exactness: every dtype crosses between CPU and device unchanged, int64/float64 keep
their width, conversions round and wrap as eager PyTorch does, and bfloat16 trains."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl

DEV = xl.device()
DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


def _sample(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(2, 3, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(2, 3, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([[info.min, -1, 0], [1, 7, info.max]]).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_bit_exact(dtype):
    x = _sample(dtype)
    d = x.to(DEV)
    assert d.dtype == dtype
    back = d.cpu()
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.uint8), x.view(torch.uint8))  # the same bits
    assert (d.clone()[1, 2].item() == x[1, 2].item()) or dtype.is_complex


def test_bfloat16_item_and_math():
    x = torch.tensor([1.5, -2.25, 3.0e4], dtype=torch.bfloat16)
    d = x.to(DEV)
    assert (d * 2).sum().item() == (x * 2).sum().item()
    assert d[2].item() == 29952.0  # 3.0e4 rounded to bfloat16, as eager
    assert torch.equal((d / 3).cpu(), x / 3)


def test_int64_is_exact():
    assert (torch.tensor([2**40]).to(DEV) + 1).item() == 2**40 + 1
    big = torch.tensor([2**62, -(2**62), 2**53 + 1])
    d = big.to(DEV)
    assert torch.equal((d + 1).cpu(), big + 1)
    assert torch.equal((d * 2).cpu(), big * 2)  # wraps like int64, not int32
    assert torch.equal((d // 3).cpu(), big // 3)
    assert torch.equal(
        torch.div(d, 7, rounding_mode="trunc").cpu(), big.div(7, rounding_mode="trunc")
    )
    assert d.sum().item() == big.sum().item()
    assert torch.arange(2**40, 2**40 + 3, device=DEV).cpu().tolist() == [
        2**40 + i for i in range(3)
    ]


def test_float64_is_exact():
    x = torch.tensor([0.1, 1 / 3, 1e300, 5e-324], dtype=torch.float64)
    d = x.to(DEV)
    for got, want in [
        (d * 0.1, x * 0.1),  # the Python float stays a float64 constant
        (d + torch.tensor(1e-17, dtype=torch.float64), x + 1e-17),
        (d.sum(), x.sum()),
        (torch.exp(-d), torch.exp(-x)),
    ]:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-15, atol=0)
    assert (d * 0.1).cpu()[0].item() == 0.1 * 0.1


def test_float_to_int_conversions_match_eager():
    x = torch.tensor([-1.0, -0.5, 0.7, 255.9, 256.0, 300.7, -300.2, -129.0, 1e10, -3e9])
    x = torch.cat([x, torch.tensor([float("inf"), float("-inf"), float("nan")])])
    d = x.to(DEV)
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool):
        assert torch.equal(d.to(dtype).cpu(), x.to(dtype)), dtype
    wide = torch.tensor([2**40 + 7, -(2**40) - 1, 2**31, 300])
    for dtype in (torch.int32, torch.int16, torch.uint8, torch.float32, torch.bfloat16):
        assert torch.equal(wide.to(DEV).to(dtype).cpu(), wide.to(dtype)), dtype


@pytest.mark.parametrize(
    "dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float64])
def test_float8_conversions_and_products_match_eager(dtype, src):
    """Past its range a float becomes what this torch's kernel makes it (``float8_e4m3fn``
    saturates to +-448 in torch 2.13, where XLA's ``convert`` gives NaN); a float8 product
    accumulates in float32 and is rounded once, as eager's."""
    x = torch.tensor([0.1, -1.7, 300.0, 1e-3, 448.0, 464.0, 465.0, -500.0, 6e4, 1e6])
    x = torch.cat([x, torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])]).to(src)
    got, want = x.to(DEV).to(dtype).cpu(), x.to(dtype)
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got.float().signbit(), want.float().signbit())
    a = torch.tensor([[300.0, -200.0], [1.5, 2.0]]).to(dtype)
    b = torch.tensor([[2.0, 1.0], [-3.0, 0.5]]).to(dtype)
    try:
        want = a @ b
    except RuntimeError:  # eager has no product for this type on the CPU
        return
    got = (a.to(DEV) @ b.to(DEV)).cpu()
    torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0, equal_nan=True)


def test_transfers_copy():
    """The device value is a copy: changing the CPU tensor afterwards changes nothing."""
    for n in (4, 100_000):
        x = torch.ones(n)
        d = x.to(DEV)
        x.mul_(3)
        assert d[0].item() == 1.0
        back = d.cpu()
        back.add_(1)
        assert d[0].item() == 1.0


def test_plain_jax_is_untouched():
    """x64 is scoped to the runtime: plain JAX code in the process keeps JAX's defaults."""
    (torch.tensor([2**40]).to(DEV) + 1).item()
    assert not jax.config.jax_enable_x64
    assert jnp.arange(3).dtype == jnp.int32
    assert jnp.asarray(1.5).dtype == jnp.float32


@pytest.mark.filterwarnings("ignore:ComplexHalf")
def test_unsupported_dtype_raises():
    with pytest.raises(TypeError, match="not supported on the device"):
        torch.zeros(2, dtype=torch.complex32).to(DEV)


@pytest.mark.slow
def test_bfloat16_training_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = model.to(torch.bfloat16)
    batches = [(torch.randn(8, 16).bfloat16(), torch.randint(0, 4, (8,)))] * 4  # one batch: fits

    def train(m, dev):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for x, y in batches:
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            if dev.type == "xla":
                xl.sync()
            losses.append(loss.item())
        return losses, m

    ref, ref_m = train(copy.deepcopy(model), torch.device("cpu"))
    got, got_m = train(copy.deepcopy(model).to(DEV), DEV)
    assert all(isinstance(v, float) for v in got)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=2e-2, atol=2e-2)
    assert got[-1] < got[0]
    for p, q in zip(ref_m.parameters(), got_m.parameters(), strict=True):
        assert q.dtype == torch.bfloat16
        torch.testing.assert_close(q.cpu(), p, rtol=5e-2, atol=5e-2)
    state = {k: v.cpu() for k, v in got_m.state_dict().items()}
    assert all(v.dtype == torch.bfloat16 for v in state.values())


def test_result_types_follow_torch():
    """Binary ops compute in torch's result type, whatever JAX would promote to."""
    x = torch.tensor([0.1, 1.5, -2.0, 3.25])
    i = torch.tensor([1, -2, 3, 2**40])
    d, di = x.to(DEV), i.to(DEV)
    tenth = torch.tensor(0.1, dtype=torch.float64)  # compared in float32, as eager
    cases = [
        (2**d, 2**x),  # a Python int base with a float exponent
        (di * 0.5, i * 0.5),  # int64 tensor with a Python float: float32
        (d == tenth, x == tenth),
        (di / 3, i / 3),
        (torch.pow(di, 2), torch.pow(i, 2)),
        (torch.pow(di, 2.5), torch.pow(i, 2.5)),
    ]
    for got, want in cases:
        got = got.cpu()
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    y = x.abs().to(DEV)
    y.pow_(2.5)  # the in-place op's functional form is pow.Tensor_Scalar
    torch.testing.assert_close(y.cpu(), x.abs().pow(2.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_sign_of_nan_and_negative_zero_is_eagers(dtype):
    """Eager's sign is ``(0 < x) - (x < 0)``: 0.0 for NaN, +0.0 for -0.0 (JAX's is NaN, -0.0)."""
    x = torch.tensor([float("nan"), -0.0, 0.0, -3.0, 2.0, float("inf"), float("-inf")], dtype=dtype)
    for op in (torch.sign, torch.sgn):
        got, want = op(x.to(DEV)).cpu(), op(x)
        assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit()), (op, got)


@pytest.mark.parametrize("mode", ["bfloat16", "autocast"])
def test_bfloat16_convolution_gradients_match_eager(mode):
    """A bfloat16 convolution's backward (its forward accumulates in float32) runs on the device."""

    def grads(dev):
        torch.manual_seed(0)
        conv = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(4, 2, 2, stride=2),
        )
        conv = (conv.bfloat16() if mode == "bfloat16" else conv).to(dev)
        x = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(1))
        x = (x.bfloat16() if mode == "bfloat16" else x).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=mode == "autocast"):
            y = conv(x)
        y.float().square().mean().backward()
        return [y.detach(), *(p.grad for p in conv.parameters())]

    for got, want in zip(grads(DEV), grads(torch.device("cpu")), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu().float(), want.float(), rtol=2e-2, atol=2e-2)
