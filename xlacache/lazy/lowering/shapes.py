"""Shapes and views: reshape, expand, permute, select/slice/diagonal/as_strided and their
``*_scatter`` inverses, cat/stack, flip/roll/repeat, tril/triu, padding.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .dtypes import jax_dtype
from .registry import as_shape, norm_dim, norm_dims, reg

aten = torch.ops.aten

reg(aten.view.default, aten._unsafe_view.default, aten.reshape.default)(
    lambda x, size: jnp.reshape(x, as_shape(size))
)


@reg(aten.expand.default)
def _expand(x: Any, size: Any, implicit: bool = False) -> Any:
    size = list(size)
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return jnp.broadcast_to(x, tuple(shape))


reg(aten.permute.default)(lambda x, dims: jnp.transpose(x, [norm_dim(d, x.ndim) for d in dims]))
reg(aten.t.default)(lambda x: x.T)
reg(aten.transpose.int)(  # a 0-d tensor's dims 0 and -1 are itself
    lambda x, a, b: jnp.swapaxes(x, norm_dim(a, x.ndim), norm_dim(b, x.ndim)) if x.ndim else x
)
reg(aten.unsqueeze.default)(lambda x, d: jnp.expand_dims(x, d % (x.ndim + 1)))
reg(aten.squeeze.default)(lambda x: jnp.squeeze(x))
reg(aten.squeeze.dim, aten.squeeze.dims)(
    lambda x, d: jnp.squeeze(
        x, tuple(a for a in (norm_dims(d, x.ndim) or ()) if x.ndim and x.shape[a] == 1)
    )
)


@reg(aten.select.int)
def _select(x: Any, dim: int, index: int) -> Any:
    ax = norm_dim(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[ax], ax, keepdims=False)


def _slice_tuple(ndim: int, dim: int, start: Any, end: Any, step: int) -> tuple:
    return (slice(None),) * norm_dim(dim, ndim) + (slice(start, end, step),)


@reg(aten.slice.Tensor)
def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    return x[_slice_tuple(x.ndim, dim, start, end, step)]


@reg(aten.slice_scatter.default)
def _slice_scatter(
    x: Any, src: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Any:
    return x.at[_slice_tuple(x.ndim, dim, start, end, step)].set(src.astype(x.dtype))


@reg(aten.select_scatter.default)
def _select_scatter(x: Any, src: Any, dim: int, index: int) -> Any:
    ax = norm_dim(dim, x.ndim)
    return x.at[(slice(None),) * ax + (index % x.shape[ax],)].set(src.astype(x.dtype))


reg(aten.diagonal.default)(
    lambda x, offset=0, d1=0, d2=1: jnp.diagonal(
        x, offset, norm_dim(d1, x.ndim), norm_dim(d2, x.ndim)
    )
)


def strided_index(size: Any, stride: Any, offset: Any) -> np.ndarray:
    """The storage position of each element of a ``size``/``stride``/``offset`` view."""
    idx = np.full(tuple(int(n) for n in size), int(offset or 0), dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[d] = int(n)
        idx = idx + (np.arange(int(n), dtype=np.int64) * int(s)).reshape(shape)
    return idx


reg(aten.as_strided.default)(
    lambda x, size, stride, offset=None: x.reshape(-1)[strided_index(size, stride, offset)]
)
reg(aten.as_strided_scatter.default)(
    lambda x, src, size, stride, offset=None: (
        x.reshape(-1)
        .at[strided_index(size, stride, offset)]
        .set(src.astype(x.dtype))
        .reshape(x.shape)
    )
)


@reg(aten.diagonal_scatter.default)
def _diagonal_scatter(x: Any, src: Any, offset: int = 0, d1: int = 0, d2: int = 1) -> Any:
    idx = np.arange(int(np.prod(x.shape))).reshape(x.shape)
    flat = np.diagonal(idx, offset, norm_dim(d1, x.ndim), norm_dim(d2, x.ndim))
    return x.reshape(-1).at[flat].set(src.astype(x.dtype)).reshape(x.shape)


@reg(aten.cat.default)
def _cat(tensors: Any, dim: int = 0) -> Any:
    ts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    return jnp.concatenate(ts, axis=norm_dim(dim, ts[0].ndim))


reg(aten.stack.default)(lambda ts, dim=0: jnp.stack(ts, axis=dim % (ts[0].ndim + 1)))
# no dims: nothing flipped (``norm_dims`` reads none as all, as reductions do)
reg(aten.flip.default)(lambda x, dims: jnp.flip(x, norm_dims(dims, x.ndim)) if dims else x)
reg(aten.roll.default)(  # dims in their order: they pair with the shifts
    lambda x, shifts, dims=(): jnp.roll(x, shifts, tuple(norm_dim(d, x.ndim) for d in dims) or None)
)


@reg(aten.repeat.default)
def _repeat(x: Any, repeats: Any) -> Any:
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, tuple(repeats))


reg(aten.tril.default)(lambda x, k=0: jnp.tril(x, k))
reg(aten.triu.default)(lambda x, k=0: jnp.triu(x, k))


@reg(aten.constant_pad_nd.default)
def _pad(x: Any, pad: Any, value: Any = 0) -> Any:
    cfg = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        cfg[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), cfg)


@reg(aten.unfold.default)
def _unfold(x: Any, dim: int, size: int, step: int) -> Any:
    """Windows of ``size`` every ``step`` along ``dim``, as a new last dimension."""
    if x.ndim == 0:
        return x.reshape(1)
    ax = norm_dim(dim, x.ndim)
    n = (x.shape[ax] - size) // step + 1
    idx = np.arange(n)[:, None] * step + np.arange(size)[None, :]
    return jnp.moveaxis(jnp.take(x, jnp.asarray(idx), axis=ax), ax + 1, -1)


@reg(aten.view.dtype)
def _view_dtype(x: Any, dtype: Any) -> Any:
    """The same bits as another dtype (the last dimension scales with the item sizes)."""
    target = np.dtype(jax_dtype(dtype))
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    to = jnp.uint8 if target == np.bool_ else target
    small, big = np.dtype(x.dtype).itemsize, np.dtype(to).itemsize
    if big > small:
        x = x.reshape(x.shape[:-1] + (x.shape[-1] // (big // small), big // small))
    out = lax.bitcast_convert_type(x, to)
    if big < small:
        out = out.reshape(out.shape[:-2] + (-1,))
    return out != 0 if target == np.bool_ else out
