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

reg(aten.zeros.default, aten._efficientzerotensor.default)(
    lambda size, dtype=None, **kw: jnp.zeros(as_shape(size), jdt(dtype))
)
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
reg(torch.ops.prims.convert_element_type.default)(lambda x, dtype: cast(x, jdt(dtype)))


@reg(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(*args: Any, dtype: Any = None, **kw: Any) -> Any:
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        args = tuple(int(a) for a in args)  # eager truncates an integer range's bounds first
    return jnp.asarray(np.arange(*args), dtype=jdt(dtype))


reg(aten.linspace.default)(
    lambda a, b, n, dtype=None, **kw: jnp.asarray(np.linspace(a, b, n), jdt(dtype))
)
reg(aten.eye.default)(lambda n, dtype=None, **kw: jnp.eye(n, dtype=jdt(dtype)))
reg(aten.eye.m)(lambda n, m, dtype=None, **kw: jnp.eye(n, m, dtype=jdt(dtype)))


@reg(aten.logspace.default)
def _logspace(
    start: Any, end: Any, steps: int, base: float = 10.0, dtype: Any = None, **kw: Any
) -> Any:
    """Eager's kernel: the first half steps up from ``start``, the second half down from
    ``end`` (in float64, then rounded to ``dtype``); one step is ``base ** start``."""
    i = np.arange(steps, dtype=np.float64)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    exps = np.where(i < steps // 2, start + step * i, end - step * (steps - i - 1))
    if steps == 1:
        exps = np.full(1, start, np.float64)
    return jnp.asarray(np.power(base, exps) if steps else exps)


def _tri_indices(upper: bool) -> Any:
    def fn(row: int, col: int, offset: int = 0, dtype: Any = None, **kw: Any) -> Any:
        idx = np.triu_indices(row, offset, col) if upper else np.tril_indices(row, offset, col)
        return jnp.asarray(np.stack(idx).astype(np.int64).reshape(2, -1))

    return fn


reg(aten.triu_indices.default)(_tri_indices(True))
reg(aten.tril_indices.default)(_tri_indices(False))
