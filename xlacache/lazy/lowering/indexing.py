"""Indexing: index/index_put, gather/scatter (incl. reductions), index_select, masked_fill,
embedding.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from .checks import checked, in_range
from .registry import LOWERINGS, highest, lowered_if, lowest, norm_dim, reg, scalar_as_vector

aten = torch.ops.aten


@reg(aten.index_select.default)
def _index_select(x: Any, dim: int, idx: Any) -> Any:
    ax = norm_dim(dim, x.ndim)
    in_range(idx, x.shape[ax])
    return jnp.take(x, idx, axis=ax)


reg(aten.masked_fill.Scalar, aten.masked_fill.Tensor)(
    lambda x, m, v: jnp.where(m, jnp.asarray(v).astype(x.dtype), x)
)


def _as_vectors(fn: Any) -> Any:
    """``fn`` over 0-d operands as over vectors of one element (a 0-d tensor's dim 0 is
    itself, as in eager), its result back to 0-d."""

    def lowering(x: Any, dim: int, index: Any, *rest: Any, **kw: Any) -> Any:
        if x.ndim:
            return fn(x, dim, index, *rest, **kw)
        rest = tuple(r.reshape(1) if getattr(r, "ndim", None) == 0 else r for r in rest)
        return fn(x.reshape(1), 0, index.reshape(1), *rest, **kw).reshape(())

    return lowering


@reg(aten.gather.default)
@_as_vectors
def _gather(x: Any, dim: int, index: Any, sparse_grad: bool = False) -> Any:
    if index.size == 0:  # eager takes an empty index of any rank
        return jnp.zeros(index.shape, x.dtype)
    ax = norm_dim(dim, x.ndim)
    in_range(index, x.shape[ax])
    x = x[tuple(slice(None) if d == ax else slice(0, n) for d, n in enumerate(index.shape))]
    return jnp.take_along_axis(x, index, axis=ax)


def _scatter_idx(index: Any, dim: int) -> tuple:
    grids = jnp.meshgrid(*[jnp.arange(n) for n in index.shape], indexing="ij")
    return tuple(index if d == dim else g for d, g in enumerate(grids))


@reg(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce)
@_as_vectors
def _scatter(x: Any, dim: int, index: Any, src: Any, reduce: Any = None) -> Any:
    if index.size == 0:  # eager takes an empty index of any rank: nothing written
        return x
    ax = norm_dim(dim, x.ndim)
    if hasattr(src, "ndim") and src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    else:
        src = jnp.broadcast_to(jnp.asarray(src).astype(x.dtype), index.shape)
    if reduce is not None:
        return _scatter_reduce(x, ax, index, src, {"add": "sum", "multiply": "prod"}[reduce])
    in_range(index, x.shape[ax])
    return x.at[_scatter_idx(index, ax)].set(src.astype(x.dtype))


@reg(aten.scatter_add.default)
def _scatter_add(x: Any, dim: int, index: Any, src: Any) -> Any:
    return _scatter_reduce(x, dim, index, src, "sum")


@reg(aten.scatter_reduce.two)
@_as_vectors
def _scatter_reduce(
    x: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True
) -> Any:
    if index.size == 0:  # eager takes an empty index of any rank: nothing written
        return x
    ax = norm_dim(dim, x.ndim)
    in_range(index, x.shape[ax])
    idx = _scatter_idx(index, ax)
    src = src[tuple(slice(0, n) for n in index.shape)]
    dtype = x.dtype
    if dtype == jnp.bool_:  # eager: sum is "or", prod is "and" (computed here as integers)
        x, src = x.astype(jnp.int32), src.astype(jnp.int32)
    src = src.astype(x.dtype)
    if reduce == "sum":
        out = (x if include_self else x.at[idx].set(0)).at[idx].add(src)
    elif reduce == "amax":
        out = (x if include_self else x.at[idx].set(lowest(x.dtype))).at[idx].max(src)
    elif reduce == "amin":
        out = (x if include_self else x.at[idx].set(highest(x.dtype))).at[idx].min(src)
    elif reduce == "prod":
        out = (x if include_self else x.at[idx].set(1)).at[idx].multiply(src)
    elif reduce == "mean":
        base = x if include_self else x.at[idx].set(0)
        cnt = jnp.zeros_like(x).at[idx].add(1) + (1 if include_self else 0)
        total = base.at[idx].add(src)
        cnt = jnp.maximum(cnt, 1)
        ints = jnp.issubdtype(x.dtype, jnp.integer)
        out = jnp.floor_divide(total, cnt) if ints else total / cnt
    else:
        raise NotImplementedError(f"scatter_reduce {reduce}")
    return out != 0 if dtype == jnp.bool_ else out


def _index_tuple(indices: Any) -> tuple:
    return tuple(slice(None) if i is None else i for i in indices)


def _indices_in_range(x: Any, indices: Any) -> None:
    """``x[indices]``'s integer indices within their dimensions (negative ones count back)."""
    d = 0
    for i in indices:
        if i is not None and i.dtype != jnp.bool_:
            in_range(i, x.shape[d], negative=True)
        d += i.ndim if i is not None and i.dtype == jnp.bool_ else 1


@reg(aten.index.Tensor)
def _index(x: Any, indices: Any) -> Any:
    _indices_in_range(x, indices)
    return x[_index_tuple(indices)]


reg(aten._unsafe_index.Tensor)(lambda x, indices: x[_index_tuple(indices)])


@reg(aten.index_put.default)
def _checked_index_put(x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    _indices_in_range(x, indices)
    return _index_put(x, indices, values, accumulate)


@reg(aten._unsafe_index_put.default)
def _index_put(x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    ids = list(indices)
    if len(ids) == 1 and ids[0] is not None and ids[0].dtype == jnp.bool_:
        m = ids[0].reshape(ids[0].shape + (1,) * (x.ndim - ids[0].ndim))
        v = values.reshape(()) if values.size == 1 else values
        return jnp.where(m, x + v if accumulate else v, x).astype(x.dtype)
    idx = _index_tuple(ids)
    if accumulate and x.dtype == jnp.bool_:  # eager: "or"
        return x.astype(jnp.int32).at[idx].add(values.astype(jnp.int32)) != 0
    values = values.astype(x.dtype)
    return x.at[idx].add(values) if accumulate else x.at[idx].set(values)


@reg(aten.embedding.default)
def _embedding(
    w: Any, idx: Any, padding_idx: int = -1, scale: bool = False, sparse: bool = False
) -> Any:
    in_range(idx, w.shape[0])
    return jnp.take(w, idx, axis=0)


@reg(aten.embedding_renorm.default)
def _embedding_renorm(w: Any, idx: Any, max_norm: float, norm_type: float) -> Any:
    """Eager's ``embedding_renorm_`` (``F.embedding(max_norm=...)``): each row ``idx`` names
    whose norm (in ``w``'s dtype) exceeds ``max_norm`` is scaled by ``max_norm / (norm +
    1e-7)``, computed in double, rounded to ``w``'s dtype and multiplied in its math type,
    as eager's scalar is (bfloat16: the scale is a bfloat16 too)."""
    in_range(idx, w.shape[0])
    flat = idx.reshape(-1)
    rows = w[flat]
    norm = LOWERINGS[aten.linalg_vector_norm.default](rows, norm_type, [-1])
    norm = norm.astype(w.dtype).astype(jnp.float64)
    math = jnp.float64 if w.dtype == jnp.float64 else jnp.float32
    scale = (max_norm / (norm + 1e-7)).astype(w.dtype).astype(math)
    scaled = (rows.astype(math) * scale[:, None]).astype(w.dtype)
    return w.at[flat].set(jnp.where((norm > max_norm)[:, None], scaled, rows))


@reg(aten.embedding_dense_backward.default)
def _embedding_bwd(g: Any, idx: Any, num_weights: int, padding_idx: int, scale: bool) -> Any:
    d = g.shape[-1]
    flat = idx.reshape(-1)
    gg = g.reshape(-1, d)
    if padding_idx >= 0:
        gg = jnp.where((flat == padding_idx)[:, None], 0, gg)
    if scale:
        cnt = jnp.zeros((num_weights,), gg.dtype).at[flat].add(1)
        gg = gg / cnt[flat][:, None]
    return jnp.zeros((num_weights, d), gg.dtype).at[flat].add(gg)


@reg(aten.index_reduce.default)
def _index_reduce(
    x: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True
) -> Any:
    if index.size == 0:  # eager takes an empty index of any rank: nothing written
        return x
    ax = norm_dim(dim, x.ndim)
    shape = [1] * src.ndim
    shape[ax] = -1
    full = jnp.broadcast_to(index.reshape(shape), src.shape)
    return _scatter_reduce(x, ax, full, src, reduce, include_self)


def _flat_index(x: Any, index: Any) -> Any:
    in_range(index, x.size, negative=True)
    return jnp.where(index < 0, index + x.size, index)  # eager wraps negative indices


reg(aten.take.default)(lambda x, index: x.reshape(-1)[_flat_index(x, index)])


@reg(aten.put.default)
def _put(x: Any, index: Any, src: Any, accumulate: bool = False) -> Any:
    flat, i, v = x.reshape(-1), _flat_index(x, index).reshape(-1), src.reshape(-1)
    if accumulate and x.dtype == jnp.bool_:
        out = flat.astype(jnp.int32).at[i].add(v.astype(jnp.int32)) != 0
    else:
        out = flat.at[i].add(v.astype(x.dtype)) if accumulate else flat.at[i].set(v.astype(x.dtype))
    return out.reshape(x.shape)


@reg(aten.masked_scatter.default)
def _masked_scatter(x: Any, mask: Any, src: Any) -> Any:
    """The masked positions take ``src``'s elements in order (``x`` and ``mask`` broadcast to
    each other, as in eager)."""
    shape = jnp.broadcast_shapes(x.shape, mask.shape)
    x, m = jnp.broadcast_to(x, shape), jnp.broadcast_to(mask, shape)
    if src.size == 0:  # then no position is masked (eager checks that src is long enough)
        return x
    pos = jnp.cumsum(m.reshape(-1).astype(jnp.int64)) - 1
    vals = src.reshape(-1)[jnp.clip(pos, 0, max(src.size - 1, 0))].reshape(x.shape)
    return jnp.where(m, vals.astype(x.dtype), x)


@reg(aten.nonzero_static.default)
def _nonzero_static(x: Any, *, size: int, fill_value: int = -1) -> Any:
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    return jnp.stack(jnp.nonzero(x, size=size, fill_value=fill_value), axis=-1)


def _count_before(seq: Any, x: Any, right: bool) -> Any:
    """How many of the sorted ``seq`` (last axis) go before each ``x`` (NaN sorts last)."""
    floats = jnp.issubdtype(jnp.result_type(seq, x), jnp.inexact)
    if right:
        before = seq[..., None, :] <= x[..., :, None]
        if floats:
            before = before | jnp.isnan(x)[..., :, None]
    else:
        before = seq[..., None, :] < x[..., :, None]
        if floats:
            before = before | (jnp.isnan(x)[..., :, None] & ~jnp.isnan(seq)[..., None, :])
    return jnp.sum(before, axis=-1)


@reg(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(
    seq: Any,
    x: Any,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: Any = None,
    sorter: Any = None,
) -> Any:
    right = right or side == "right"
    if sorter is not None:
        in_range(sorter, seq.shape[-1])
        seq = jnp.take_along_axis(seq, sorter, -1)
    x = jnp.asarray(x)
    scalar = x.ndim == 0
    if seq.ndim == 1:
        out = _count_before(seq, x.reshape(1, -1), right).reshape(x.shape)
    else:
        out = _count_before(seq, x if not scalar else x.reshape(1), right)
    return out


@reg(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(x: Any, boundaries: Any, *, out_int32: bool = False, right: bool = False) -> Any:
    x = jnp.asarray(x)
    return _count_before(boundaries, x.reshape(1, -1), right).reshape(x.shape)


@reg(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def _isin(x: Any, test: Any, *, assume_unique: bool = False, invert: bool = False) -> Any:
    x, test = jnp.asarray(x), jnp.asarray(test).reshape(-1)
    found = jnp.any(x[..., None] == test, axis=-1)
    return ~found if invert else found


@lowered_if(aten.histc.default)
def _histc_of_integers(x: Any, *args: Any, **kwargs: Any) -> bool:
    """``histc`` of integers is a graph op; of floating values, eager's CPU kernel (whose bins
    a graph would not reproduce bit for bit)."""
    dtype = x.dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


@reg(aten.histc.default)
def _histc(x: Any, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:  # noqa: A002
    """``histc`` of integers, as CUDA computes it (eager's CPU kernel takes no integers, and
    transformers' MoE layers count routed tokens with it on every device but the CPU): bounds
    truncated to integers, the data's own when equal, ``(x - min) * bins // (max - min)``
    with ``max`` in the last bin. Floating values run on the CPU (``_histc_of_integers``): eager's
    bin edges come from a float ``linspace`` that a graph would have to reproduce bit for bit."""
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise NotImplementedError("xlacache.lazy: histc of floating values runs on the CPU")
    if x.size == 0:
        return jnp.zeros(bins, x.dtype)
    v = x.reshape(-1).astype(jnp.int64)
    lo, hi = jnp.asarray(min).astype(jnp.int64), jnp.asarray(max).astype(jnp.int64)
    same = lo == hi
    lo, hi = jnp.where(same, v.min(), lo), jnp.where(same, v.max(), hi)
    same = lo == hi
    lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
    keep = (v >= lo) & (v <= hi)
    b = jnp.minimum((v - lo) * bins // (hi - lo), bins - 1)
    return jnp.zeros(bins, x.dtype).at[jnp.where(keep, b, 0)].add(keep.astype(x.dtype))


scalar_as_vector(
    aten.index_select.default,
    aten.gather.default,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
    aten.index_reduce.default,
)


checked(
    aten.searchsorted.Tensor,
    aten.searchsorted.Scalar,
    aten.index_select.default,
    aten.gather.default,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter.reduce,
    aten.scatter.value_reduce,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
    aten.index_reduce.default,
    aten.index.Tensor,
    aten.index_put.default,
    aten.embedding.default,
    aten.embedding_renorm.default,
    aten.take.default,
    aten.put.default,
)
