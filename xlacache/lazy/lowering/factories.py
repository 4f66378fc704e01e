"""Factories: ``zeros``/``ones``/``full``/``arange``/``eye``..., ``*_like``, ``new_*``, ``fill``,
dtype conversion.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from .dtypes import cast
from .registry import as_shape, jdt, reg

aten = torch.ops.aten

reg(aten.zeros.default)(lambda size, dtype=None, **kw: jnp.zeros(as_shape(size), jdt(dtype)))
reg(aten.ones.default)(lambda size, dtype=None, **kw: jnp.ones(as_shape(size), jdt(dtype)))
reg(aten.full.default)(lambda size, v, dtype=None, **kw: jnp.full(as_shape(size), v, jdt(dtype)))
reg(aten.scalar_tensor.default)(lambda s, dtype=None, **kw: jnp.asarray(s, jdt(dtype)))
reg(aten.zeros_like.default, aten.empty_like.default)(
    lambda x, dtype=None, **kw: jnp.zeros(x.shape, jdt(dtype) or x.dtype)
)
reg(aten.ones_like.default)(lambda x, dtype=None, **kw: jnp.ones(x.shape, jdt(dtype) or x.dtype))
reg(aten.full_like.default)(
    lambda x, v, dtype=None, **kw: jnp.full(x.shape, v, jdt(dtype) or x.dtype)
)
reg(aten.new_zeros.default, aten.new_empty.default)(
    lambda x, size, dtype=None, **kw: jnp.zeros(as_shape(size), jdt(dtype) or x.dtype)
)
reg(aten.new_empty_strided.default)(
    lambda x, size, stride, dtype=None, **kw: jnp.zeros(as_shape(size), jdt(dtype) or x.dtype)
)
reg(aten.new_ones.default)(
    lambda x, size, dtype=None, **kw: jnp.ones(as_shape(size), jdt(dtype) or x.dtype)
)
reg(aten.new_full.default)(
    lambda x, size, v, dtype=None, **kw: jnp.full(as_shape(size), v, jdt(dtype) or x.dtype)
)
reg(aten.fill.Scalar, aten.fill.Tensor)(
    lambda x, v: jnp.broadcast_to(jnp.asarray(v, x.dtype), x.shape)
)
reg(aten.zero.default)(lambda x: jnp.zeros_like(x))
reg(aten._to_copy.default)(lambda x, dtype=None, **kw: x if dtype is None else cast(x, jdt(dtype)))


@reg(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(*args: Any, dtype: Any = None, **kw: Any) -> Any:
    return jnp.asarray(np.arange(*args), dtype=jdt(dtype))


reg(aten.linspace.default)(
    lambda a, b, n, dtype=None, **kw: jnp.asarray(np.linspace(a, b, n), jdt(dtype))
)
reg(aten.eye.default)(lambda n, dtype=None, **kw: jnp.eye(n, dtype=jdt(dtype)))
reg(aten.eye.m)(lambda n, m, dtype=None, **kw: jnp.eye(n, m, dtype=jdt(dtype)))
