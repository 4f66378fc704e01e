"""Matrix products: mm/bmm/matmul/dot/mv and addmm/baddbmm/addmv."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from .dtypes import cast
from .registry import reg, scaled

aten = torch.ops.aten

reg(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default)(
    jnp.matmul
)


@reg(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def _addmm(bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    out = jnp.matmul(a, b)
    if jnp.issubdtype(out.dtype, jnp.integer):  # eager casts the factors to the integer type
        alpha, beta = (cast(jnp.asarray(v), out.dtype) for v in (alpha, beta))
        return out * alpha + bias * beta
    if not (isinstance(alpha, int) and alpha == 1):
        out = out * alpha
    if isinstance(beta, int) and beta == 0:
        return out
    return out + scaled(bias, beta)
