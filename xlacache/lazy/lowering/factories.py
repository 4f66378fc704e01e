"""Factories: ``zeros``/``ones``/``full``/``arange``/``eye``..., ``*_like``, ``new_*``, ``fill``,
dtype conversion.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from .dtypes import cast
from .registry import as_shape, jdt, meta_kernel, reg

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


def _narrow_integers(dtype: Any) -> bool:
    return (
        dtype is not None
        and dtype not in (torch.int64, torch.bool)
        and not (dtype.is_floating_point or dtype.is_complex)
    )


def _count(start: Any, end: Any, step: Any) -> int:
    """Eager's length of a range of an integer type narrower than int64: by the given bounds
    (torch's meta kernel truncates the step first: 0.7 would be 0, "step must be nonzero")."""
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    return max(math.ceil((float(end) - float(start)) / float(step)), 0)


@meta_kernel(aten.arange.start_step)
def _arange_meta(start: Any, end: Any, step: Any = 1, *, dtype: Any = None, **kw: Any) -> Any:
    if not _narrow_integers(dtype):
        return aten.arange.start_step(start, end, step, dtype=dtype, **kw)
    return torch.empty(_count(start, end, step), dtype=dtype, device="meta")


@reg(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(*args: Any, dtype: Any = None, **kw: Any) -> Any:
    if dtype is None or dtype.is_floating_point or dtype.is_complex:
        return jnp.asarray(np.arange(*args), dtype=jdt(dtype))
    # eager's integer kernel: ``start + step * i`` on the bounds truncated to int64, counted by
    # the truncated bounds for int64 and by the given ones for the narrower types
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if _narrow_integers(dtype):
        n = _count(start, end, step)
    else:
        n = len(np.arange(int(start), int(end), int(step)))
    values = int(start) + int(step) * np.arange(n, dtype=np.int64)
    return jnp.asarray(values.astype(jdt(dtype)))


def _as_dtype(v: Any, dt: Any) -> Any:
    """A Python number as eager's ``Scalar::to<scalar_t>`` converts it: a float to an integer
    truncated, then wrapped (-3 is 253 in ``uint8``; eager's range check came first)."""
    if jnp.issubdtype(dt, jnp.inexact):
        return np.asarray(v, dt)
    if dt == jnp.bool_:
        return np.asarray(v != 0)
    return np.asarray(np.int64(math.trunc(v))).astype(dt)


@reg(aten.linspace.default)
def _linspace(start: Any, end: Any, steps: int, dtype: Any = None, **kw: Any) -> Any:
    """Eager's kernel: the bounds converted to ``dtype`` first; the first half steps up from
    ``start``, the second half down from ``end``, in ``dtype``'s arithmetic (float64 for
    integers, then truncated): ``linspace(0.1, 2.9, 7, dtype=int)`` is 0 0 0 1 1 1 2."""
    dt = jdt(dtype or torch.get_default_dtype())
    if jnp.issubdtype(dt, jnp.complexfloating) or steps < 2:
        return jnp.asarray(np.linspace(start, end, steps), dt)
    lo, hi = _as_dtype(start, dt), _as_dtype(end, dt)
    integral = not jnp.issubdtype(dt, jnp.inexact)
    step_t = np.float64 if integral else dt
    step = (np.asarray(hi, step_t) - np.asarray(lo, step_t)) / np.asarray(steps - 1, step_t)
    i = np.arange(steps)
    idx = i.astype(step_t)  # eager multiplies by the index converted to the step's type
    up = np.asarray(lo, step_t) + step * idx
    down = np.asarray(hi, step_t) - step * (steps - 1 - i).astype(step_t)
    values = np.where(i < steps // 2, up, down)
    return cast(jnp.asarray(values), dt) if integral else jnp.asarray(values.astype(dt))


reg(aten.eye.default)(lambda n, dtype=None, **kw: jnp.eye(n, dtype=jdt(dtype)))
reg(aten.eye.m)(lambda n, m, dtype=None, **kw: jnp.eye(n, m, dtype=jdt(dtype)))


@reg(aten.logspace.default)
def _logspace(
    start: Any, end: Any, steps: int, base: float = 10.0, dtype: Any = None, **kw: Any
) -> Any:
    """Eager's kernel: the bounds converted to ``dtype`` first; the first half of the exponents
    steps up from ``start``, the second half down from ``end`` (in float64, by an index of
    ``dtype``); ``base ** exponent`` converted to ``dtype``."""
    dt = jdt(dtype or torch.get_default_dtype())
    if jnp.issubdtype(dt, jnp.complexfloating):
        return jnp.asarray(np.logspace(start, end, steps, base=base), dt)
    lo, hi = _as_dtype(start, dt), _as_dtype(end, dt)
    integral = not jnp.issubdtype(dt, jnp.inexact)
    span = float(np.int64(hi) - np.int64(lo)) if integral else float(hi - lo)
    step = span / (steps - 1) if steps > 1 else 0.0
    i = np.arange(steps)
    index = i.astype(dt).astype(np.float64)
    exps = np.where(i < steps // 2, float(lo) + step * index, float(hi) - step * (steps - i - 1))
    if steps == 1:
        exps = np.full(1, float(lo))
    return cast(jnp.asarray(np.power(float(base), exps)), dt)


def _tri_indices(upper: bool) -> Any:
    def fn(row: int, col: int, offset: int = 0, dtype: Any = None, **kw: Any) -> Any:
        idx = np.triu_indices(row, offset, col) if upper else np.tril_indices(row, offset, col)
        return jnp.asarray(np.stack(idx).astype(np.int64).reshape(2, -1))

    return fn


reg(aten.triu_indices.default)(_tri_indices(True))
reg(aten.tril_indices.default)(_tri_indices(False))
