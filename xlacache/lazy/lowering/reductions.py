"""Reductions: sums, means, extrema, arg-extrema, variance, norms, cumulative ops, sort/topk."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from .dtypes import cast
from .registry import (
    argument_check,
    jdt,
    norm_dim,
    norm_dims,
    reg_opmath,
    scalar_as_vector,
    upcast,
)

aten = torch.ops.aten
reg = reg_opmath  # bfloat16/float16 math in float32, as eager


def as_dtype(x: Any, dtype: Any) -> Any:
    """``x`` as eager reduces it given ``dtype=``: converted to ``dtype`` first, 16-bit floats
    then accumulating in float32 (the executor rounds the result once)."""
    return x if dtype is None else upcast(cast(x, jdt(dtype)))


@reg(aten.sum.default, aten.sum.dim_IntList)
def _sum(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    return jnp.sum(as_dtype(x, dtype), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@reg(aten.mean.default, aten.mean.dim)
def _mean(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    return jnp.mean(upcast(as_dtype(x, dtype)), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


@reg(aten.prod.default, aten.prod.dim_int)
def _prod(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    return jnp.prod(as_dtype(x, dtype), axis=norm_dims(dim, x.ndim), keepdims=keepdim)


reg(aten.amax.default)(
    lambda x, dim=(), keepdim=False: jnp.max(x, norm_dims(dim, x.ndim), None, keepdim)
)
reg(aten.amin.default)(
    lambda x, dim=(), keepdim=False: jnp.min(x, norm_dims(dim, x.ndim), None, keepdim)
)
reg(aten.max.default)(jnp.max)
reg(aten.min.default)(jnp.min)
reg(aten.max.dim)(
    lambda x, d, k=False: (jnp.max(x, norm_dim(d, x.ndim), keepdims=k), _argx(jnp.argmax, x, d, k))
)
reg(aten.min.dim)(
    lambda x, d, k=False: (jnp.min(x, norm_dim(d, x.ndim), keepdims=k), _argx(jnp.argmin, x, d, k))
)


def _argx(fn: Callable[..., Any], x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    if dim is None:
        r = fn(x.reshape(-1))
        return r.reshape((1,) * x.ndim) if keepdim else r
    return fn(x, axis=norm_dim(dim, x.ndim), keepdims=keepdim)


reg(aten.argmax.default)(lambda x, dim=None, keepdim=False: _argx(jnp.argmax, x, dim, keepdim))
reg(aten.argmin.default)(lambda x, dim=None, keepdim=False: _argx(jnp.argmin, x, dim, keepdim))
reg(aten.any.default, aten.any.dim, aten.any.dims)(
    lambda x, dim=None, keepdim=False: jnp.any(x, norm_dims(dim, x.ndim), keepdims=keepdim)
)
reg(aten.all.default, aten.all.dim, aten.all.dims)(
    lambda x, dim=None, keepdim=False: jnp.all(x, norm_dims(dim, x.ndim), keepdims=keepdim)
)
reg(aten._is_any_true.default)(jnp.any)  # anomaly mode's NaN check, torch.isin
reg(aten._is_all_true.default)(jnp.all)


def _floating_only(name: str) -> Any:
    def check(x: Any, *args: Any, **kwargs: Any) -> None:
        if not (x.dtype.is_floating_point or x.dtype.is_complex):
            raise RuntimeError(f"{name} only support floating point and complex dtypes")

    return check


# eager's checks, which the meta kernels lack (the lowering would compute in float)
argument_check(aten.var.correction, aten.std.correction)(_floating_only("std and var"))
argument_check(aten.var_mean.correction)(_floating_only("var_mean"))
argument_check(aten.std_mean.correction)(_floating_only("std_mean"))


@reg(aten.var.correction)
def _var(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    """``jnp.var``'s computation, divided by ``max(0, n - correction)`` as eager's (inf, or NaN
    where every value is the mean, when no degree of freedom is left); the correction may be a
    graph input."""
    ddof = 1 if correction is None else correction
    axes = norm_dims(dim, x.ndim)
    n = math.prod(x.shape[a] for a in (range(x.ndim) if axes is None else axes))
    x = upcast(x)
    centered = x - jnp.mean(x, axes, keepdims=True)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        squares = jnp.real(centered * jnp.conj(centered))
    else:
        squares = jnp.square(centered)
    total = jnp.sum(squares, axes, keepdims=keepdim)
    return total / jnp.maximum(jnp.asarray(n - ddof), 0).astype(total.dtype)


reg(aten.std.correction)(lambda *a, **k: jnp.sqrt(_var(*a, **k)))
reg(aten.var_mean.correction)(
    lambda x, dim=None, *, correction=None, keepdim=False: (
        _var(x, dim, correction=correction, keepdim=keepdim),
        jnp.mean(upcast(x), norm_dims(dim, x.ndim), keepdims=keepdim),
    )
)


def shifted_by_max(x: Any, axes: Any, finite_shift: bool = False) -> tuple[Any, Any]:
    """``(x - m, m)`` for ``m``, the max of ``x`` over ``axes`` (kept), where ``x - m`` is
    exactly 0 at a finite max: XLA:CPU may fuse the multiply that made ``x`` into the
    subtraction (one FMA), leaving the product's rounding error. For a row masked with
    float32's min and scaled (``softmax(scores / 2.83)``, a left-padded sequence) that error
    is about -3e30, whose ``exp`` is 0: the softmax was 0/0. With ``finite_shift`` a max that
    is not finite shifts by 0 (logsumexp's -inf and inf), else by itself (softmax's NaN)."""
    m = jnp.max(x, axes, keepdims=True)
    finite = jnp.isfinite(m)
    shift = jnp.where(finite, m, 0) if finite_shift else m
    return jnp.where((x == m) & finite, 0, x - shift), m


def _logsumexp(x: Any, dim: Any, keepdim: bool = False) -> Any:
    axes = norm_dims(dim, x.ndim)
    d, m = shifted_by_max(upcast(x), axes, finite_shift=True)
    out = jnp.log(jnp.sum(jnp.exp(d), axes, keepdims=True)) + jnp.where(jnp.isfinite(m), m, 0)
    return out if keepdim else jnp.squeeze(out, axes)


reg(aten.logsumexp.default)(_logsumexp)


def _accumulated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``cumsum``/``cumprod``: integers and bools accumulate in int64, as eager's do; with
    ``dtype=``, as ``as_dtype`` says."""

    def lowered(x: Any, dim: int, dtype: Any = None) -> Any:
        integral = jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_
        out = jnp.int64 if dtype is None and integral else None
        return fn(as_dtype(x, dtype), norm_dim(dim, x.ndim), out)

    return lowered


reg(aten.cumsum.default)(_accumulated(jnp.cumsum))
reg(aten.cumprod.default)(_accumulated(jnp.cumprod))


@reg(aten.linalg_vector_norm.default)
def _vnorm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:  # noqa: A002
    ax = norm_dims(dim, x.ndim)
    a = jnp.abs(upcast(x))
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, ax, keepdims=keepdim))
    if ord == 1:
        return jnp.sum(a, ax, keepdims=keepdim)
    if ord == math.inf:
        return jnp.max(a, ax, keepdims=keepdim)
    if ord == -math.inf:
        return jnp.min(a, ax, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, ax, keepdims=keepdim).astype(a.dtype)
    return jnp.sum(a**ord, ax, keepdims=keepdim) ** (1.0 / ord)


@reg(aten.sort.default, aten.sort.stable)
def _sort(x: Any, *args: Any, stable: Any = None, dim: int = -1, descending: bool = False) -> Any:
    if args and isinstance(args[0], int):  # sort.default(x, dim, descending)
        dim = args[0]
        descending = args[1] if len(args) > 1 else descending
    ax = norm_dim(dim, x.ndim)
    idx = jnp.argsort(x, axis=ax, stable=True, descending=descending)  # NaN sorts as largest
    return jnp.take_along_axis(x, idx, ax), idx


@reg(aten.topk.default)
def _topk(x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    ax = norm_dim(dim, x.ndim)
    xm = jnp.moveaxis(x, ax, -1)
    if largest and jnp.issubdtype(x.dtype, jnp.floating):
        # NaN counts as the largest, as in eager, whatever its sign bit (top_k orders the bits:
        # torch's bfloat16 NaN, 0xFFFF, would be the smallest)
        _, i = lax.top_k(jnp.where(jnp.isnan(xm), jnp.nan, xm), k)
        v = jnp.take_along_axis(xm, i, -1)
    else:  # smallest first, or a dtype whose negation would not reverse the order
        i = jnp.argsort(xm, axis=-1, stable=True, descending=largest)[..., :k]
        v = jnp.take_along_axis(xm, i, -1)
    return jnp.moveaxis(v, -1, ax), jnp.moveaxis(i, -1, ax)


def _nth(x: Any, dim: Any, keepdim: bool, pick: Any, ignore_nan: bool) -> tuple[Any, Any]:
    """Value and index of the ``pick(valid count)``-th smallest element along ``dim`` (NaN sorts
    last; a slice with a NaN gives NaN unless ``ignore_nan``)."""
    ax = norm_dim(dim, x.ndim)
    order = jnp.argsort(x, axis=ax, stable=True)
    n = x.shape[ax]
    nans = jnp.sum(jnp.isnan(x), axis=ax, keepdims=True)  # 0 for integers
    valid = n - nans
    k = pick(valid) if ignore_nan else jnp.where(nans > 0, n - nans, pick(valid * 0 + n))
    k = jnp.clip(k, 0, max(n - 1, 0))
    idx = jnp.take_along_axis(order, k.astype(order.dtype), ax)
    val = jnp.take_along_axis(x, idx, ax)
    if not keepdim:
        idx, val = jnp.squeeze(idx, ax), jnp.squeeze(val, ax)
    return val, idx


def _lower_median(count: Any) -> Any:
    return (count - 1) // 2


@reg(aten.median.default)
def _median_all(x: Any) -> Any:
    return _nth(x.reshape(-1), 0, False, _lower_median, False)[0]


@reg(aten.nanmedian.default)
def _nanmedian_all(x: Any) -> Any:
    return _nth(x.reshape(-1), 0, False, _lower_median, True)[0]


reg(aten.median.dim)(lambda x, dim, keepdim=False: _nth(x, dim, keepdim, _lower_median, False))
reg(aten.nanmedian.dim)(lambda x, dim, keepdim=False: _nth(x, dim, keepdim, _lower_median, True))
# eager's selection counts NaN as the largest: the k-th smallest is NaN only past the others
reg(aten.kthvalue.default)(
    lambda x, k, dim=-1, keepdim=False: _nth(x, dim, keepdim, lambda c: c * 0 + (k - 1), True)
)


def _cumulative_extreme(x: Any, dim: int, better: Any) -> tuple[Any, Any]:
    """Running max/min and the index where it was last reached; a NaN wins from where it is."""
    ax = norm_dim(dim, x.ndim)
    idx = lax.broadcasted_iota(jnp.int64, x.shape, ax)
    floats = jnp.issubdtype(x.dtype, jnp.inexact)

    def combine(left: tuple, right: tuple) -> tuple:
        lv, li = left
        rv, ri = right
        take = better(rv, lv) | (rv == lv)
        if floats:
            take = jnp.isnan(rv) | (~jnp.isnan(lv) & take)
        return jnp.where(take, rv, lv), jnp.where(take, ri, li)

    return lax.associative_scan(combine, (x, idx), axis=ax)


reg(aten.cummax.default)(lambda x, dim: _cumulative_extreme(x, dim, jnp.greater))
reg(aten.cummin.default)(lambda x, dim: _cumulative_extreme(x, dim, jnp.less))
reg(aten.logcumsumexp.default)(
    lambda x, dim: lax.associative_scan(jnp.logaddexp, x, axis=norm_dim(dim, x.ndim))
)


scalar_as_vector(
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.prod.dim_int,
    aten.amax.default,
    aten.amin.default,
    aten.max.dim,
    aten.min.dim,
    aten.argmax.default,
    aten.argmin.default,
    aten.any.dim,
    aten.any.dims,
    aten.all.dim,
    aten.all.dims,
    aten.var.correction,
    aten.std.correction,
    aten.var_mean.correction,
    aten.logsumexp.default,
    aten.cumsum.default,
    aten.cumprod.default,
    aten.linalg_vector_norm.default,
    aten.sort.default,
    aten.sort.stable,
    aten.topk.default,
    aten.median.dim,
    aten.nanmedian.dim,
    aten.kthvalue.default,
    aten.cummax.default,
    aten.cummin.default,
    aten.logcumsumexp.default,
)
