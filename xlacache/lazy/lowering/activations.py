"""Activations and their backward ops."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .registry import reg_opmath, upcast

aten = torch.ops.aten
reg = reg_opmath  # bfloat16/float16 math in float32, as eager

reg(aten.relu.default)(jax.nn.relu)
reg(aten.silu.default)(jax.nn.silu)
reg(aten.mish.default)(lambda x: x * jnp.tanh(jax.nn.softplus(x)))
reg(aten.hardswish.default)(jax.nn.hard_swish)
reg(aten.hardsigmoid.default)(jax.nn.hard_sigmoid)


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
reg(aten.hardshrink_backward.default, aten.softshrink_backward.default)(
    lambda g, x, lambd: jnp.where((x >= -lambd) & (x <= lambd), 0, g)
)
