"""Elementwise ops: arithmetic, comparisons, logical/bitwise, unary math, activations and
their backward ops.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .registry import reg, scaled, upcast

aten = torch.ops.aten

reg(aten.add.Tensor, aten.add.Scalar)(lambda a, b, alpha=1: a + scaled(b, alpha))
reg(aten.sub.Tensor, aten.sub.Scalar)(lambda a, b, alpha=1: a - scaled(b, alpha))
reg(aten.rsub.Tensor, aten.rsub.Scalar)(lambda a, b, alpha=1: b - scaled(a, alpha))
reg(aten.mul.Tensor, aten.mul.Scalar)(lambda a, b: a * b)
reg(aten.div.Tensor, aten.div.Scalar)(lambda a, b: jnp.true_divide(a, b))


@reg(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    if rounding_mode == "floor":
        return jnp.floor_divide(a, b)
    q = jnp.true_divide(a, b)
    ints = jnp.issubdtype(jnp.result_type(a), jnp.integer)
    return jnp.trunc(q).astype(jnp.result_type(a)) if ints else jnp.trunc(q)


reg(aten.remainder.Tensor, aten.remainder.Scalar)(lambda a, b: jnp.remainder(a, b))
reg(aten.fmod.Tensor, aten.fmod.Scalar)(lambda a, b: jnp.fmod(a, b))
reg(aten.floor_divide.default, aten.floor_divide.Scalar)(lambda a, b: jnp.floor_divide(a, b))
reg(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)(lambda a, b: jnp.power(a, b))
reg(aten.maximum.default)(jnp.maximum)
reg(aten.minimum.default)(jnp.minimum)
reg(aten.atan2.default)(jnp.arctan2)
for _n, _f2 in [
    ("eq", jnp.equal),
    ("ne", jnp.not_equal),
    ("lt", jnp.less),
    ("le", jnp.less_equal),
    ("gt", jnp.greater),
    ("ge", jnp.greater_equal),
]:
    _p = getattr(aten, _n)
    reg(_p.Tensor, _p.Scalar)(_f2)
for _n, _f2 in [
    ("logical_and", jnp.logical_and),
    ("logical_or", jnp.logical_or),
    ("logical_xor", jnp.logical_xor),
]:
    reg(getattr(aten, _n).default)(_f2)
for _n, _f2 in [
    ("bitwise_and", jnp.bitwise_and),
    ("bitwise_or", jnp.bitwise_or),
    ("bitwise_xor", jnp.bitwise_xor),
]:
    reg(getattr(aten, _n).Tensor, getattr(aten, _n).Scalar)(_f2)
reg(aten.bitwise_not.default)(jnp.invert)
reg(aten.where.self)(lambda c, a, b: jnp.where(c, a, b))
reg(aten.where.ScalarSelf)(lambda c, a, b: jnp.where(c, a, b))
reg(aten.where.ScalarOther)(lambda c, a, b: jnp.where(c, a, b))


@reg(aten.clamp.default, aten.clamp.Tensor)
def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    if min is not None:
        x = jnp.maximum(x, min)
    if max is not None:
        x = jnp.minimum(x, max)
    return x


reg(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda x, m: jnp.maximum(x, m))
reg(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda x, m: jnp.minimum(x, m))

_UNARY = {
    "neg": jnp.negative,
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "log": jnp.log,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "sgn": jnp.sign,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
    "erf": jax.scipy.special.erf,
    "erfinv": jax.scipy.special.erfinv,
    "reciprocal": jnp.reciprocal,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "round": jnp.round,
    "trunc": jnp.trunc,
    "frac": lambda x: x - jnp.trunc(x),
    "logical_not": jnp.logical_not,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
    "silu": jax.nn.silu,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "hardswish": jax.nn.hard_swish,
    "hardsigmoid": jax.nn.hard_sigmoid,
    "clone": lambda x, memory_format=None: x,
    "alias": lambda x: x,
    "lift_fresh_copy": lambda x: x,
    "positive": lambda x: x,
}
for _n, _f2 in _UNARY.items():
    reg(getattr(aten, _n).default)(_f2)
reg(aten.round.decimals)(lambda x, decimals=0: jnp.round(x, decimals))


@reg(aten.gelu.default)
def _gelu(x: Any, approximate: str = "none") -> Any:
    return jax.nn.gelu(x, approximate=approximate == "tanh")


reg(aten.hardtanh.default)(lambda x, lo=-1.0, hi=1.0: jnp.clip(x, lo, hi))
reg(aten.leaky_relu.default)(lambda x, s=0.01: jnp.where(x > 0, x, x * s))
reg(aten.elu.default)(
    lambda x, alpha=1.0, scale=1.0, input_scale=1.0: (
        scale * jnp.where(x > 0, x, alpha * jnp.expm1(x * input_scale))
    )
)
reg(aten.softplus.default)(
    lambda x, beta=1.0, threshold=20.0: jnp.where(
        x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta
    )
)
reg(aten.lerp.Scalar, aten.lerp.Tensor)(lambda a, b, w: a + w * (b - a))
reg(aten.addcmul.default)(lambda s, a, b, value=1: s + value * a * b)
reg(aten.addcdiv.default)(lambda s, a, b, value=1: s + value * a / b)
reg(aten.nan_to_num.default)(
    lambda x, nan=None, posinf=None, neginf=None: jnp.nan_to_num(
        x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf
    )
)
reg(aten.threshold_backward.default)(lambda g, x, t: jnp.where(x <= t, 0, g))
reg(aten.sigmoid_backward.default)(lambda g, y: g * y * (1 - y))
reg(aten.tanh_backward.default)(lambda g, y: g * (1 - y * y))
reg(aten.threshold.default)(lambda x, t, v: jnp.where(x <= t, v, x))


@reg(aten.gelu_backward.default)
def _gelu_bwd(g: Any, x: Any, approximate: str = "none") -> Any:
    # torch's formulas (GeluBackward), not jax.vjp: no re-trace of the forward per node
    xf = upcast(x)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        x2 = xf * xf
        th = jnp.tanh(beta * (xf + kappa * x2 * xf))
        d = 0.5 * (1 + th) + 0.5 * xf * (1 - th * th) * beta * (1 + 3 * kappa * x2)
    else:
        cdf = 0.5 * (1 + lax.erf(xf * (1 / math.sqrt(2.0))))
        pdf = jnp.exp(-0.5 * xf * xf) * (1 / math.sqrt(2.0 * math.pi))
        d = cdf + xf * pdf
    return (upcast(g) * d).astype(x.dtype)


@reg(aten.silu_backward.default)
def _silu_bwd(g: Any, x: Any) -> Any:
    s = jax.nn.sigmoid(upcast(x))
    return (upcast(g) * s * (1 + upcast(x) * (1 - s))).astype(x.dtype)


reg(aten.hardtanh_backward.default)(lambda g, x, lo, hi: jnp.where((x <= lo) | (x >= hi), 0, g))
reg(aten.leaky_relu_backward.default)(lambda g, x, s, self_is_result: jnp.where(x > 0, g, g * s))
