"""Matrix products: mm/bmm/matmul/dot/mv and addmm/baddbmm/addmv/addbmm."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from .dtypes import cast, promote
from .precision import dot_precision
from .registry import reg, scaled

aten = torch.ops.aten


def matmul(a: Any, b: Any, fp32_precision: str | None = None) -> Any:
    """``a @ b``; bfloat16/float16 products accumulate in float32, as eager's (and the MXU's);
    float32 ones with the precision PyTorch's setting gave (``precision.py``)."""
    a, b = promote(a, b)
    if a.dtype in (jnp.bfloat16, jnp.float16):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32)
    return jnp.matmul(a, b, precision=dot_precision(fp32_precision, a.dtype))


reg(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default)(
    matmul
)


@reg(aten.addbmm.default)
def _addbmm(
    bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1, fp32_precision: str | None = None
) -> Any:
    return _addmm(bias, a, b, beta, alpha, batch_sum=True, fp32_precision=fp32_precision)


@reg(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def _addmm(
    bias: Any,
    a: Any,
    b: Any,
    beta: Any = 1,
    alpha: Any = 1,
    batch_sum: bool = False,
    fp32_precision: str | None = None,
) -> Any:
    out = matmul(a, b, fp32_precision)
    if batch_sum:
        out = jnp.sum(out, axis=0)
    if bias.dtype in (jnp.bfloat16, jnp.float16):
        bias = bias.astype(jnp.float32)
    if jnp.issubdtype(out.dtype, jnp.integer):  # eager casts the factors to the integer type
        alpha, beta = (cast(jnp.asarray(v), out.dtype) for v in (alpha, beta))
        return out * alpha + bias * beta
    if not (isinstance(alpha, int) and alpha == 1):
        out = out * alpha
    if isinstance(beta, int) and beta == 0:
        return out
    return out + scaled(bias, beta)
