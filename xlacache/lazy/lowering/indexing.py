"""Indexing: index/index_put, gather/scatter (incl. reductions), index_select, masked_fill,
embedding.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from .registry import norm_dim, reg, scalar_as_vector

aten = torch.ops.aten

reg(aten.index_select.default)(lambda x, dim, idx: jnp.take(x, idx, axis=norm_dim(dim, x.ndim)))
reg(aten.masked_fill.Scalar, aten.masked_fill.Tensor)(
    lambda x, m, v: jnp.where(m, jnp.asarray(v).astype(x.dtype), x)
)


@reg(aten.gather.default)
def _gather(x: Any, dim: int, index: Any, sparse_grad: bool = False) -> Any:
    ax = norm_dim(dim, x.ndim)
    x = x[tuple(slice(None) if d == ax else slice(0, n) for d, n in enumerate(index.shape))]
    return jnp.take_along_axis(x, index, axis=ax)


def _scatter_idx(index: Any, dim: int) -> tuple:
    grids = jnp.meshgrid(*[jnp.arange(n) for n in index.shape], indexing="ij")
    return tuple(index if d == dim else g for d, g in enumerate(grids))


@reg(aten.scatter.src, aten.scatter.value)
def _scatter(x: Any, dim: int, index: Any, src: Any, reduce: Any = None) -> Any:
    ax = norm_dim(dim, x.ndim)
    idx = _scatter_idx(index, ax)
    if hasattr(src, "ndim") and src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "add":
        return x.at[idx].add(src)
    if reduce == "multiply":
        return x.at[idx].multiply(src)
    return x.at[idx].set(src)


@reg(aten.scatter_add.default)
def _scatter_add(x: Any, dim: int, index: Any, src: Any) -> Any:
    ax = norm_dim(dim, x.ndim)
    return x.at[_scatter_idx(index, ax)].add(src[tuple(slice(0, n) for n in index.shape)])


@reg(aten.scatter_reduce.two)
def _scatter_reduce(
    x: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True
) -> Any:
    ax = norm_dim(dim, x.ndim)
    idx = _scatter_idx(index, ax)
    src = src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "sum":
        base = x if include_self else x.at[idx].set(0)
        return base.at[idx].add(src)
    if reduce in ("amax", "amin"):
        fill = -jnp.inf if reduce == "amax" else jnp.inf
        base = x if include_self else x.at[idx].set(fill)
        return base.at[idx].max(src) if reduce == "amax" else base.at[idx].min(src)
    if reduce == "prod":
        base = x if include_self else x.at[idx].set(1)
        return base.at[idx].multiply(src)
    if reduce == "mean":
        base = x if include_self else x.at[idx].set(0)
        cnt = jnp.ones_like(x).at[idx].add(1) if include_self else jnp.zeros_like(x).at[idx].add(1)
        return base.at[idx].add(src) / jnp.maximum(cnt, 1)
    raise NotImplementedError(f"scatter_reduce {reduce}")


def _index_tuple(indices: Any) -> tuple:
    return tuple(slice(None) if i is None else i for i in indices)


reg(aten.index.Tensor, aten._unsafe_index.Tensor)(lambda x, indices: x[_index_tuple(indices)])


@reg(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    ids = list(indices)
    if len(ids) == 1 and ids[0] is not None and ids[0].dtype == jnp.bool_:
        m = ids[0].reshape(ids[0].shape + (1,) * (x.ndim - ids[0].ndim))
        v = values.reshape(()) if values.size == 1 else values
        return jnp.where(m, x + v if accumulate else v, x).astype(x.dtype)
    idx = _index_tuple(ids)
    values = values.astype(x.dtype)
    return x.at[idx].add(values) if accumulate else x.at[idx].set(values)


@reg(aten.embedding.default)
def _embedding(
    w: Any, idx: Any, padding_idx: int = -1, scale: bool = False, sparse: bool = False
) -> Any:
    return jnp.take(w, idx, axis=0)


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


scalar_as_vector(
    aten.index_select.default,
    aten.gather.default,
    aten.scatter.src,
    aten.scatter.value,
    aten.scatter_add.default,
    aten.scatter_reduce.two,
)
