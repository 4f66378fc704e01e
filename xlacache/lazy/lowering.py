"""The aten -> JAX lowering table.

Each entry takes the op's arguments as the aten schema orders them, with tensors replaced by jax
values, and returns a jax value (or a tuple for multi-output ops). The executor casts results to
the dtype torch's meta kernel predicted, so lowerings may be loose about dtype promotion.
Everything not here is decomposed with PyTorch's decompositions first (``tensor.dispatch``).
Backward ops of composite forwards are lowered as ``jax.vjp`` of the forward lowering: one node
in the graph instead of the dozens a decomposition would record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

aten = torch.ops.aten
LOWERINGS: dict[Any, Callable[..., Any]] = {}
# ops whose float Scalar arguments stay compile-time constants (not graph inputs)
STATIC_SCALAR_OPS = {
    aten.pow.Tensor_Scalar,
    aten.pow.Scalar,
    aten.linalg_vector_norm.default,
    aten.nan_to_num.default,
}

_DTYPES = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float32,  # x64 is off: float64 is stored as float32
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.int64: jnp.int32,  # likewise int64 as int32
    torch.int32: jnp.int32,
    torch.int16: jnp.int16,
    torch.int8: jnp.int8,
    torch.uint8: jnp.uint8,
    torch.bool: jnp.bool_,
    torch.uint32: jnp.uint32,
    torch.complex64: jnp.complex64,
}


def jax_dtype(dtype: torch.dtype) -> Any:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise TypeError(f"xlacache.lazy: dtype {dtype} is not supported on the device") from None


def reg(*ops: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return deco


def _ax(dim: int, ndim: int) -> int:
    return dim % ndim if ndim else 0


def _axes(dim: Any, ndim: int) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted(_ax(d, ndim) for d in dim))


def _jdt(dtype: Any) -> Any:
    return None if dtype is None else jax_dtype(dtype)


def _f(x: Any) -> Any:
    """Upcast low-precision floats for reductions/normalizations."""
    return x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x


# --------------------------------------------------------------------------- elementwise


def _alpha(b: Any, alpha: Any) -> Any:
    return b if isinstance(alpha, int) and alpha == 1 else b * alpha


reg(aten.add.Tensor, aten.add.Scalar)(lambda a, b, alpha=1: a + _alpha(b, alpha))
reg(aten.sub.Tensor, aten.sub.Scalar)(lambda a, b, alpha=1: a - _alpha(b, alpha))
reg(aten.rsub.Tensor, aten.rsub.Scalar)(lambda a, b, alpha=1: b - _alpha(a, alpha))
reg(aten.mul.Tensor, aten.mul.Scalar)(lambda a, b: a * b)
reg(aten.div.Tensor, aten.div.Scalar)(lambda a, b: jnp.true_divide(a, b))


@reg(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    if rounding_mode == "floor":
        return jnp.floor_divide(a, b)
    q = jnp.true_divide(a, b)
    ints = jnp.issubdtype(jnp.result_type(a), jnp.integer)
    return jnp.trunc(q).astype(jnp.result_type(a)) if ints else jnp.trunc(q)


reg(aten.remainder.Tensor, aten.remainder.Scalar)(lambda a, b: jnp.remainder(a, b))
reg(aten.fmod.Tensor, aten.fmod.Scalar)(lambda a, b: jnp.fmod(a, b))
reg(aten.floor_divide.default, aten.floor_divide.Scalar)(lambda a, b: jnp.floor_divide(a, b))
reg(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)(lambda a, b: jnp.power(a, b))
reg(aten.maximum.default)(jnp.maximum)
reg(aten.minimum.default)(jnp.minimum)
reg(aten.atan2.default)(jnp.arctan2)
for _n, _f2 in [
    ("eq", jnp.equal),
    ("ne", jnp.not_equal),
    ("lt", jnp.less),
    ("le", jnp.less_equal),
    ("gt", jnp.greater),
    ("ge", jnp.greater_equal),
]:
    _p = getattr(aten, _n)
    reg(_p.Tensor, _p.Scalar)(_f2)
for _n, _f2 in [
    ("logical_and", jnp.logical_and),
    ("logical_or", jnp.logical_or),
    ("logical_xor", jnp.logical_xor),
]:
    reg(getattr(aten, _n).default)(_f2)
for _n, _f2 in [
    ("bitwise_and", jnp.bitwise_and),
    ("bitwise_or", jnp.bitwise_or),
    ("bitwise_xor", jnp.bitwise_xor),
]:
    reg(getattr(aten, _n).Tensor, getattr(aten, _n).Scalar)(_f2)
reg(aten.bitwise_not.default)(jnp.invert)
reg(aten.where.self)(lambda c, a, b: jnp.where(c, a, b))
reg(aten.where.ScalarSelf)(lambda c, a, b: jnp.where(c, a, b))
reg(aten.where.ScalarOther)(lambda c, a, b: jnp.where(c, a, b))


@reg(aten.clamp.default, aten.clamp.Tensor)
def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    if min is not None:
        x = jnp.maximum(x, min)
    if max is not None:
        x = jnp.minimum(x, max)
    return x


reg(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda x, m: jnp.maximum(x, m))
reg(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda x, m: jnp.minimum(x, m))

_UNARY = {
    "neg": jnp.negative,
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "log": jnp.log,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "sgn": jnp.sign,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
    "erf": jax.scipy.special.erf,
    "erfinv": jax.scipy.special.erfinv,
    "reciprocal": jnp.reciprocal,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "round": jnp.round,
    "trunc": jnp.trunc,
    "frac": lambda x: x - jnp.trunc(x),
    "logical_not": jnp.logical_not,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
    "silu": jax.nn.silu,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "hardswish": jax.nn.hard_swish,
    "hardsigmoid": jax.nn.hard_sigmoid,
    "clone": lambda x, memory_format=None: x,
    "alias": lambda x: x,
    "lift_fresh_copy": lambda x: x,
    "positive": lambda x: x,
}
for _n, _f2 in _UNARY.items():
    reg(getattr(aten, _n).default)(_f2)
reg(aten.round.decimals)(lambda x, decimals=0: jnp.round(x, decimals))


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
reg(aten.lerp.Scalar, aten.lerp.Tensor)(lambda a, b, w: a + w * (b - a))
reg(aten.addcmul.default)(lambda s, a, b, value=1: s + value * a * b)
reg(aten.addcdiv.default)(lambda s, a, b, value=1: s + value * a / b)
reg(aten.nan_to_num.default)(
    lambda x, nan=None, posinf=None, neginf=None: jnp.nan_to_num(
        x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf
    )
)
reg(aten.threshold_backward.default)(lambda g, x, t: jnp.where(x <= t, 0, g))
reg(aten.sigmoid_backward.default)(lambda g, y: g * y * (1 - y))
reg(aten.tanh_backward.default)(lambda g, y: g * (1 - y * y))
reg(aten.threshold.default)(lambda x, t, v: jnp.where(x <= t, v, x))


@reg(aten.gelu_backward.default)
def _gelu_bwd(g: Any, x: Any, approximate: str = "none") -> Any:
    # torch's formulas (GeluBackward), not jax.vjp: no re-trace of the forward per node
    xf = _f(x)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        x2 = xf * xf
        th = jnp.tanh(beta * (xf + kappa * x2 * xf))
        d = 0.5 * (1 + th) + 0.5 * xf * (1 - th * th) * beta * (1 + 3 * kappa * x2)
    else:
        cdf = 0.5 * (1 + lax.erf(xf * (1 / math.sqrt(2.0))))
        pdf = jnp.exp(-0.5 * xf * xf) * (1 / math.sqrt(2.0 * math.pi))
        d = cdf + xf * pdf
    return (_f(g) * d).astype(x.dtype)


@reg(aten.silu_backward.default)
def _silu_bwd(g: Any, x: Any) -> Any:
    s = jax.nn.sigmoid(_f(x))
    return (_f(g) * s * (1 + _f(x) * (1 - s))).astype(x.dtype)
reg(aten.hardtanh_backward.default)(lambda g, x, lo, hi: jnp.where((x <= lo) | (x >= hi), 0, g))
reg(aten.leaky_relu_backward.default)(lambda g, x, s, self_is_result: jnp.where(x > 0, g, g * s))

# --------------------------------------------------------------------------- factories


def _size(size: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in size)


reg(aten.zeros.default)(lambda size, dtype=None, **kw: jnp.zeros(_size(size), _jdt(dtype)))
reg(aten.ones.default)(lambda size, dtype=None, **kw: jnp.ones(_size(size), _jdt(dtype)))
reg(aten.full.default)(lambda size, v, dtype=None, **kw: jnp.full(_size(size), v, _jdt(dtype)))
reg(aten.scalar_tensor.default)(lambda s, dtype=None, **kw: jnp.asarray(s, _jdt(dtype)))
reg(aten.zeros_like.default, aten.empty_like.default)(
    lambda x, dtype=None, **kw: jnp.zeros(x.shape, _jdt(dtype) or x.dtype)
)
reg(aten.ones_like.default)(lambda x, dtype=None, **kw: jnp.ones(x.shape, _jdt(dtype) or x.dtype))
reg(aten.full_like.default)(
    lambda x, v, dtype=None, **kw: jnp.full(x.shape, v, _jdt(dtype) or x.dtype)
)
reg(aten.new_zeros.default, aten.new_empty.default)(
    lambda x, size, dtype=None, **kw: jnp.zeros(_size(size), _jdt(dtype) or x.dtype)
)
reg(aten.new_empty_strided.default)(
    lambda x, size, stride, dtype=None, **kw: jnp.zeros(_size(size), _jdt(dtype) or x.dtype)
)
reg(aten.new_ones.default)(
    lambda x, size, dtype=None, **kw: jnp.ones(_size(size), _jdt(dtype) or x.dtype)
)
reg(aten.new_full.default)(
    lambda x, size, v, dtype=None, **kw: jnp.full(_size(size), v, _jdt(dtype) or x.dtype)
)
reg(aten.fill.Scalar, aten.fill.Tensor)(
    lambda x, v: jnp.broadcast_to(jnp.asarray(v, x.dtype), x.shape)
)
reg(aten.zero.default)(lambda x: jnp.zeros_like(x))
reg(aten._to_copy.default)(
    lambda x, dtype=None, **kw: x if dtype is None else x.astype(_jdt(dtype))
)


@reg(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(*args: Any, dtype: Any = None, **kw: Any) -> Any:
    return jnp.asarray(np.arange(*args), dtype=_jdt(dtype))


reg(aten.linspace.default)(
    lambda a, b, n, dtype=None, **kw: jnp.asarray(np.linspace(a, b, n), _jdt(dtype))
)
reg(aten.eye.default)(lambda n, dtype=None, **kw: jnp.eye(n, dtype=_jdt(dtype)))
reg(aten.eye.m)(lambda n, m, dtype=None, **kw: jnp.eye(n, m, dtype=_jdt(dtype)))

# --------------------------------------------------------------------------- reductions


@reg(aten.sum.default, aten.sum.dim_IntList)
def _sum(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int32)
    return jnp.sum(x, axis=_axes(dim, x.ndim), keepdims=keepdim, dtype=_jdt(dtype))


@reg(aten.mean.default, aten.mean.dim)
def _mean(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    r = jnp.mean(_f(x), axis=_axes(dim, x.ndim), keepdims=keepdim)
    return r if dtype is None else r.astype(_jdt(dtype))


@reg(aten.prod.default, aten.prod.dim_int)
def _prod(x: Any, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    return jnp.prod(x, axis=_axes(dim, x.ndim), keepdims=keepdim)


reg(aten.amax.default)(
    lambda x, dim=(), keepdim=False: jnp.max(x, _axes(dim, x.ndim), None, keepdim)
)
reg(aten.amin.default)(
    lambda x, dim=(), keepdim=False: jnp.min(x, _axes(dim, x.ndim), None, keepdim)
)
reg(aten.max.default)(jnp.max)
reg(aten.min.default)(jnp.min)
reg(aten.max.dim)(
    lambda x, d, k=False: (jnp.max(x, _ax(d, x.ndim), keepdims=k), _argx(jnp.argmax, x, d, k))
)
reg(aten.min.dim)(
    lambda x, d, k=False: (jnp.min(x, _ax(d, x.ndim), keepdims=k), _argx(jnp.argmin, x, d, k))
)


def _argx(fn: Callable[..., Any], x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    if dim is None:
        r = fn(x.reshape(-1))
        return r.reshape((1,) * x.ndim) if keepdim else r
    return fn(x, axis=_ax(dim, x.ndim), keepdims=keepdim)


reg(aten.argmax.default)(lambda x, dim=None, keepdim=False: _argx(jnp.argmax, x, dim, keepdim))
reg(aten.argmin.default)(lambda x, dim=None, keepdim=False: _argx(jnp.argmin, x, dim, keepdim))
reg(aten.any.default, aten.any.dim, aten.any.dims)(
    lambda x, dim=None, keepdim=False: jnp.any(x, _axes(dim, x.ndim), keepdims=keepdim)
)
reg(aten.all.default, aten.all.dim, aten.all.dims)(
    lambda x, dim=None, keepdim=False: jnp.all(x, _axes(dim, x.ndim), keepdims=keepdim)
)


@reg(aten.var.correction, aten.std.correction)
def _var(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    ddof = 1 if correction is None else correction
    return jnp.var(_f(x), axis=_axes(dim, x.ndim), ddof=ddof, keepdims=keepdim)


LOWERINGS[aten.std.correction] = lambda *a, **k: jnp.sqrt(_var(*a, **k))
reg(aten.var_mean.correction)(
    lambda x, dim=None, *, correction=None, keepdim=False: (
        _var(x, dim, correction=correction, keepdim=keepdim),
        jnp.mean(_f(x), _axes(dim, x.ndim), keepdims=keepdim),
    )
)
reg(aten.logsumexp.default)(
    lambda x, dim, keepdim=False: jax.nn.logsumexp(_f(x), _axes(dim, x.ndim), keepdims=keepdim)
)
reg(aten.cumsum.default)(lambda x, dim, dtype=None: jnp.cumsum(x, _ax(dim, x.ndim), _jdt(dtype)))
reg(aten.cumprod.default)(lambda x, dim, dtype=None: jnp.cumprod(x, _ax(dim, x.ndim), _jdt(dtype)))


@reg(aten.linalg_vector_norm.default)
def _vnorm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:  # noqa: A002
    ax = _axes(dim, x.ndim)
    a = jnp.abs(_f(x))
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, ax, keepdims=keepdim))
    if ord == 1:
        return jnp.sum(a, ax, keepdims=keepdim)
    if ord == math.inf:
        return jnp.max(a, ax, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, ax, keepdims=keepdim).astype(a.dtype)
    return jnp.sum(a**ord, ax, keepdims=keepdim) ** (1.0 / ord)


@reg(aten.sort.default, aten.sort.stable)
def _sort(x: Any, *args: Any, stable: Any = None, dim: int = -1, descending: bool = False) -> Any:
    if args and isinstance(args[0], int):  # sort.default(x, dim, descending)
        dim = args[0]
        descending = args[1] if len(args) > 1 else descending
    ax = _ax(dim, x.ndim)
    idx = jnp.argsort(-x if descending else x, axis=ax, stable=True)
    return jnp.take_along_axis(x, idx, ax), idx


@reg(aten.topk.default)
def _topk(x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    ax = _ax(dim, x.ndim)
    xm = jnp.moveaxis(x, ax, -1)
    v, i = lax.top_k(xm if largest else -xm, k)
    v = v if largest else -v
    return jnp.moveaxis(v, -1, ax), jnp.moveaxis(i, -1, ax)


# --------------------------------------------------------------------------- shapes and views


reg(aten.view.default, aten._unsafe_view.default, aten.reshape.default)(
    lambda x, size: jnp.reshape(x, _size(size))
)


@reg(aten.expand.default)
def _expand(x: Any, size: Any, implicit: bool = False) -> Any:
    size = list(size)
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return jnp.broadcast_to(x, tuple(shape))


reg(aten.permute.default)(lambda x, dims: jnp.transpose(x, [_ax(d, x.ndim) for d in dims]))
reg(aten.t.default)(lambda x: x.T)
reg(aten.transpose.int)(lambda x, a, b: jnp.swapaxes(x, _ax(a, x.ndim), _ax(b, x.ndim)))
reg(aten.unsqueeze.default)(lambda x, d: jnp.expand_dims(x, d % (x.ndim + 1)))
reg(aten.squeeze.default)(lambda x: jnp.squeeze(x))
reg(aten.squeeze.dim, aten.squeeze.dims)(
    lambda x, d: jnp.squeeze(
        x, tuple(a for a in (_axes(d, x.ndim) or ()) if x.ndim and x.shape[a] == 1)
    )
)


@reg(aten.select.int)
def _select(x: Any, dim: int, index: int) -> Any:
    ax = _ax(dim, x.ndim)
    return lax.index_in_dim(x, index % x.shape[ax], ax, keepdims=False)


def _slice_tuple(ndim: int, dim: int, start: Any, end: Any, step: int) -> tuple:
    return (slice(None),) * _ax(dim, ndim) + (slice(start, end, step),)


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
    ax = _ax(dim, x.ndim)
    return x.at[(slice(None),) * ax + (index % x.shape[ax],)].set(src.astype(x.dtype))


reg(aten.diagonal.default)(
    lambda x, offset=0, d1=0, d2=1: jnp.diagonal(x, offset, _ax(d1, x.ndim), _ax(d2, x.ndim))
)


def _strided_index(size: Any, stride: Any, offset: Any) -> np.ndarray:
    idx = np.full(tuple(size), offset or 0, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride, strict=False)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    return idx


reg(aten.as_strided.default)(
    lambda x, size, stride, offset=None: x.reshape(-1)[_strided_index(size, stride, offset)]
)
reg(aten.as_strided_scatter.default)(
    lambda x, src, size, stride, offset=None: (
        x.reshape(-1)
        .at[_strided_index(size, stride, offset)]
        .set(src.astype(x.dtype))
        .reshape(x.shape)
    )
)


@reg(aten.diagonal_scatter.default)
def _diagonal_scatter(x: Any, src: Any, offset: int = 0, d1: int = 0, d2: int = 1) -> Any:
    idx = np.arange(int(np.prod(x.shape))).reshape(x.shape)
    flat = np.diagonal(idx, offset, _ax(d1, x.ndim), _ax(d2, x.ndim))
    return x.reshape(-1).at[flat].set(src.astype(x.dtype)).reshape(x.shape)


@reg(aten.cat.default)
def _cat(tensors: Any, dim: int = 0) -> Any:
    ts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    return jnp.concatenate(ts, axis=_ax(dim, ts[0].ndim))


reg(aten.stack.default)(lambda ts, dim=0: jnp.stack(ts, axis=dim % (ts[0].ndim + 1)))
reg(aten.flip.default)(lambda x, dims: jnp.flip(x, _axes(dims, x.ndim)))
reg(aten.roll.default)(lambda x, shifts, dims=(): jnp.roll(x, shifts, _axes(dims, x.ndim)))


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


# --------------------------------------------------------------------------- indexing

reg(aten.index_select.default)(lambda x, dim, idx: jnp.take(x, idx, axis=_ax(dim, x.ndim)))
reg(aten.masked_fill.Scalar, aten.masked_fill.Tensor)(
    lambda x, m, v: jnp.where(m, jnp.asarray(v).astype(x.dtype), x)
)


@reg(aten.gather.default)
def _gather(x: Any, dim: int, index: Any, sparse_grad: bool = False) -> Any:
    ax = _ax(dim, x.ndim)
    x = x[tuple(slice(None) if d == ax else slice(0, n) for d, n in enumerate(index.shape))]
    return jnp.take_along_axis(x, index, axis=ax)


def _scatter_idx(index: Any, dim: int) -> tuple:
    grids = jnp.meshgrid(*[jnp.arange(n) for n in index.shape], indexing="ij")
    return tuple(index if d == dim else g for d, g in enumerate(grids))


@reg(aten.scatter.src, aten.scatter.value)
def _scatter(x: Any, dim: int, index: Any, src: Any, reduce: Any = None) -> Any:
    ax = _ax(dim, x.ndim)
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
    ax = _ax(dim, x.ndim)
    return x.at[_scatter_idx(index, ax)].add(src[tuple(slice(0, n) for n in index.shape)])


@reg(aten.scatter_reduce.two)
def _scatter_reduce(
    x: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True
) -> Any:
    ax = _ax(dim, x.ndim)
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


# --------------------------------------------------------------------------- linear algebra

reg(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default)(
    jnp.matmul
)


@reg(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def _addmm(bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Any:
    out = jnp.matmul(a, b)
    if not (isinstance(alpha, int) and alpha == 1):
        out = out * alpha
    if isinstance(beta, int) and beta == 0:
        return out
    return out + _alpha(bias, beta)


# --------------------------------------------------------------------------- nn


def _softmax_fn(x: Any, dim: int, half_to_float: bool = False) -> Any:
    return jax.nn.softmax(_f(x), axis=_ax(dim, x.ndim))


reg(aten._softmax.default)(_softmax_fn)
reg(aten._log_softmax.default)(
    lambda x, dim, half_to_float=False: jax.nn.log_softmax(_f(x), axis=_ax(dim, x.ndim))
)
reg(aten._softmax_backward_data.default)(
    lambda g, y, dim, dt: y * (g - jnp.sum(g * y, axis=_ax(dim, y.ndim), keepdims=True))
)
reg(aten._log_softmax_backward_data.default)(
    lambda g, y, dim, dt: g - jnp.exp(y) * jnp.sum(g, axis=_ax(dim, y.ndim), keepdims=True)
)


def _layer_norm(x: Any, shape: Any, w: Any, b: Any, eps: Any) -> Any:
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    xf = _f(x)
    mean = jnp.mean(xf, axes, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = (xf - mean) * rstd
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out.astype(x.dtype), mean, rstd


reg(aten.native_layer_norm.default)(_layer_norm)


@reg(aten.native_layer_norm_backward.default)
def _layer_norm_bwd(
    g: Any, x: Any, shape: Any, mean: Any, rstd: Any, w: Any, b: Any, mask: Any
) -> Any:
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    batch = tuple(range(x.ndim - len(shape)))
    gf = _f(g)
    xhat = (_f(x) - mean) * rstd
    gxhat = gf * w if w is not None else gf
    gx = rstd * (
        gxhat
        - jnp.mean(gxhat, axes, keepdims=True)
        - xhat * jnp.mean(gxhat * xhat, axes, keepdims=True)
    )
    gw = jnp.sum(gf * xhat, batch) if mask[1] and w is not None else None
    gb = jnp.sum(gf, batch) if mask[2] and b is not None else None
    return (gx.astype(x.dtype) if mask[0] else None, gw, gb)


def _bn_train(x: Any, w: Any, b: Any, eps: float) -> tuple[Any, Any, Any]:
    axes = (0,) + tuple(range(2, x.ndim))
    xf = _f(x)
    mean = jnp.mean(xf, axes)
    var = jnp.mean(jnp.square(xf - _bc(mean, x)), axes)
    rstd = lax.rsqrt(var + eps)
    out = (xf - _bc(mean, x)) * _bc(rstd, x)
    if w is not None:
        out = out * _bc(w, x)
    if b is not None:
        out = out + _bc(b, x)
    return out.astype(x.dtype), mean, rstd


def _bn_eval(x: Any, w: Any, b: Any, rm: Any, rv: Any, eps: float) -> Any:
    out = (_f(x) - _bc(rm, x)) * _bc(lax.rsqrt(rv + eps), x)
    if w is not None:
        out = out * _bc(w, x)
    if b is not None:
        out = out + _bc(b, x)
    return out.astype(x.dtype)


def _bc(v: Any, x: Any) -> Any:
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


@reg(aten._batch_norm_with_update_functional.default)
def _bn_update_functional(
    x: Any, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float
) -> Any:
    out, mean, rstd = _bn_train(x, w, b, eps)
    n = x.size // x.shape[1]
    var_unbiased = (1.0 / jnp.square(rstd) - eps) * (n / max(n - 1, 1))
    new_rm = (1 - momentum) * rm + momentum * mean
    new_rv = (1 - momentum) * rv + momentum * var_unbiased
    return out, mean, rstd, jnp.zeros((0,), jnp.uint8), new_rm, new_rv


@reg(aten._batch_norm_no_update.default)
def _bn_no_update(x: Any, w: Any, b: Any, rm: Any, rv: Any, momentum: float, eps: float) -> Any:
    if rm is None:
        out, mean, rstd = _bn_train(x, w, b, eps)
        return out, mean, rstd, jnp.zeros((0,), jnp.uint8)
    return (
        _bn_eval(x, w, b, rm, rv, eps),
        jnp.zeros((0,)),
        jnp.zeros((0,)),
        jnp.zeros((0,), jnp.uint8),
    )


@reg(aten.batch_norm_backward.default)
def _bn_backward(
    g: Any,
    x: Any,
    w: Any,
    rm: Any,
    rv: Any,
    sm: Any,
    sv: Any,
    update: bool,
    eps: float,
    mask: Any,
    reserve: Any,
) -> Any:
    if update or rm is None:
        fwd = lambda x, w: _bn_train(x, w, None, eps)[0]  # noqa: E731
    else:
        fwd = lambda x, w: _bn_eval(x, w, None, rm, rv, eps)  # noqa: E731
    wv = w if w is not None else jnp.ones((x.shape[1],), jnp.float32)
    _, f = jax.vjp(fwd, x, wv)
    gx, gw = f(g)
    gb = jnp.sum(_f(g), (0,) + tuple(range(2, x.ndim)))
    return tuple(r if m else None for r, m in zip((gx, gw, gb), mask, strict=False))


@reg(aten.native_batch_norm.default, aten._native_batch_norm_legit_no_training.default)
def _native_bn(x: Any, w: Any, b: Any, rm: Any, rv: Any, *rest: Any) -> Any:
    if len(rest) == 3:  # native_batch_norm(training, momentum, eps): running stats not updated here
        training, _, eps = rest
    else:
        training, eps = False, rest[-1]
    if training or rm is None:
        return _bn_train(x, w, b, eps)
    c = x.shape[1]
    return _bn_eval(x, w, b, rm, rv, eps), jnp.zeros((c,)), jnp.zeros((c,))


def _conv_dn(nd: int) -> tuple[str, str, str]:
    sp = "DHW"[3 - nd :]
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _conv(
    x: Any,
    w: Any,
    b: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Any:
    nd = w.ndim - 2
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x[None]
    dn = _conv_dn(nd)
    if not transposed:
        out = lax.conv_general_dilated(
            x,
            w.astype(x.dtype),
            tuple(stride),
            [(p, p) for p in padding],
            rhs_dilation=tuple(dilation),
            dimension_numbers=dn,
            feature_group_count=groups,
        )
    else:
        cin, cout_g = w.shape[0], w.shape[1]
        k = w.shape[2:]
        wt = w.reshape((groups, cin // groups, cout_g) + k)
        wt = jnp.swapaxes(wt, 1, 2).reshape((groups * cout_g, cin // groups) + k)
        wt = jnp.flip(wt, tuple(range(2, 2 + nd)))
        pads = [
            (
                dilation[i] * (k[i] - 1) - padding[i],
                dilation[i] * (k[i] - 1) - padding[i] + output_padding[i],
            )
            for i in range(nd)
        ]
        out = lax.conv_general_dilated(
            x,
            wt.astype(x.dtype),
            (1,) * nd,
            pads,
            lhs_dilation=tuple(stride),
            rhs_dilation=tuple(dilation),
            dimension_numbers=dn,
            feature_group_count=groups,
        )
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


reg(aten.convolution.default)(_conv)


@reg(aten.convolution_backward.default)
def _conv_bwd(
    g: Any,
    x: Any,
    w: Any,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    mask: Any,
) -> Any:
    def fwd(x: Any, w: Any) -> Any:
        return _conv(x, w, None, stride, padding, dilation, transposed, output_padding, groups)

    _, f = jax.vjp(fwd, x, w)
    gx, gw = f(g.astype(x.dtype))
    gb = jnp.sum(g, axis=(0,) + tuple(range(2, g.ndim))) if mask[2] else None
    return (gx if mask[0] else None, gw if mask[1] else None, gb)


def _pool_pads(L: int, k: int, s: int, p: int, d: int, ceil: bool) -> tuple[int, int, int]:
    eff = d * (k - 1) + 1
    num = L + 2 * p - eff
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= L + p:
        out -= 1
    hi = max((out - 1) * s + eff - L - p, 0)
    return out, p, hi


def _maxpool(x: Any, k: Any, s: Any, p: Any, d: Any, ceil: bool) -> Any:
    nd = len(k)
    s = s or k
    lead = x.ndim - nd
    pads = [(0, 0)] * lead + [
        _pool_pads(x.shape[lead + i], k[i], s[i], p[i], d[i], ceil)[1:] for i in range(nd)
    ]
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else int(jnp.iinfo(x.dtype).min)
    return lax.reduce_window(
        x,
        init,
        lax.max,
        (1,) * lead + tuple(k),
        (1,) * lead + tuple(s),
        pads,
        window_dilation=(1,) * lead + tuple(d),
    )


def _norm_pool_args(k: Any, s: Any, p: Any, d: Any, nd: int) -> tuple:
    def n(v: Any, default: Any) -> tuple:
        if v is None or len(v) == 0:
            v = default
        v = tuple(v)
        return v * nd if len(v) == 1 else v

    k = n(k, (1,))
    return k, n(s, k), n(p, (0,)), n(d, (1,))


def _maxpool_idx(
    nd: int, x: Any, k: Any, s: Any = (), p: Any = (0,), d: Any = (1,), ceil: bool = False
) -> Any:
    k, s, p, d = _norm_pool_args(k, s, p, d, nd)
    out = _maxpool(x, k, s, p, d, ceil)
    # indices (flat over the spatial dims, as torch): argmax over a windowed (value, index) pair
    lead = x.ndim - nd
    sp = x.shape[lead:]
    flat = jnp.broadcast_to(jnp.arange(int(np.prod(sp)), dtype=jnp.int32).reshape(sp), x.shape)
    pads = [(0, 0)] * lead + [
        _pool_pads(sp[i], k[i], s[i], p[i], d[i], ceil)[1:] for i in range(nd)
    ]

    def red(a: Any, b: Any) -> Any:
        take = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
        return jnp.where(take, b[0], a[0]), jnp.where(take, b[1], a[1])

    init = (jnp.asarray(-jnp.inf, x.dtype), jnp.asarray(0, jnp.int32))
    _, idx = lax.reduce_window(
        (x, flat),
        init,
        red,
        (1,) * lead + k,
        (1,) * lead + s,
        pads,
        window_dilation=(1,) * lead + d,
    )
    return out, idx


def _maxpool_bwd(
    nd: int, g: Any, x: Any, k: Any, s: Any, p: Any, d: Any, ceil: bool, idx: Any
) -> Any:
    k, s, p, d = _norm_pool_args(k, s, p, d, nd)
    _, f = jax.vjp(lambda x: _maxpool(x, k, s, p, d, ceil), x)
    return f(g.astype(x.dtype))[0]


for _nd, _fw, _bw in [
    (2, aten.max_pool2d_with_indices.default, aten.max_pool2d_with_indices_backward.default),
    (3, aten.max_pool3d_with_indices.default, aten.max_pool3d_with_indices_backward.default),
]:
    LOWERINGS[_fw] = partial(_maxpool_idx, _nd)
    LOWERINGS[_bw] = partial(_maxpool_bwd, _nd)


def _avgpool(x: Any, k: Any, s: Any, p: Any, ceil: bool, cip: bool, div: Any) -> Any:
    nd = 2 if x.ndim in (3, 4) and len(k) <= 2 else 3
    k, s, p, _ = _norm_pool_args(k, s, p, (1,), nd)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    pp = [_pool_pads(sp[i], k[i], s[i], p[i], 1, ceil) for i in range(nd)]
    pads = [(0, 0)] * lead + [(lo, hi) for _, lo, hi in pp]
    win, strides = (1,) * lead + k, (1,) * lead + s
    tot = lax.reduce_window(_f(x), 0.0, lax.add, win, strides, pads)
    if div:
        return (tot / div).astype(x.dtype)
    # divisor: window cells inside the input (or inside input+padding if count_include_pad)
    ones = jnp.ones(sp, jnp.float32)
    if cip:
        ones = jnp.pad(ones, [(pi, pi) for pi in p], constant_values=1.0)
        cpads = [(0, hi - lo) for _, lo, hi in pp]
    else:
        cpads = [(lo, hi) for _, lo, hi in pp]
    cnt = lax.reduce_window(ones, 0.0, lax.add, k, s, cpads)
    return (tot / cnt).astype(x.dtype)


reg(aten.avg_pool2d.default, aten.avg_pool3d.default)(
    lambda x, k, s=(), p=(0,), ceil=False, cip=True, div=None: _avgpool(x, k, s, p, ceil, cip, div)
)


@reg(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avgpool_bwd(g: Any, x: Any, k: Any, s: Any, p: Any, ceil: bool, cip: bool, div: Any) -> Any:
    _, f = jax.vjp(lambda x: _avgpool(x, k, s, p, ceil, cip, div), x)
    return f(g.astype(x.dtype))[0]


def _adaptive_matrix(L: int, o: int) -> np.ndarray:
    m = np.zeros((o, L), np.float32)
    for i in range(o):
        a, b = (i * L) // o, -(-((i + 1) * L) // o)
        m[i, a:b] = 1.0 / (b - a)
    return m


def _adaptive_avg(x: Any, out: Any) -> Any:
    nd = len(out)
    y = _f(x)
    for i in range(nd):
        ax = x.ndim - nd + i
        m = jnp.asarray(_adaptive_matrix(x.shape[ax], out[i]))
        y = jnp.moveaxis(jnp.tensordot(y, m, axes=[[ax], [1]]), -1, ax)
    return y.astype(x.dtype)


reg(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)(_adaptive_avg)


@reg(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_bwd(g: Any, x: Any) -> Any:
    nd = 2 if g.ndim == x.ndim and x.ndim in (3, 4) else 3
    out = g.shape[x.ndim - nd :]
    _, f = jax.vjp(lambda x: _adaptive_avg(x, out), x)
    return f(g.astype(x.dtype))[0]


def _nll(x: Any, t: Any, w: Any, reduction: int, ignore: int) -> tuple[Any, Any]:
    cdim = 0 if x.ndim == 1 else 1
    tt = jnp.where(t == ignore, 0, t)
    picked = -jnp.take_along_axis(x, jnp.expand_dims(tt, cdim), axis=cdim).squeeze(cdim)
    wt = jnp.ones(tt.shape, x.dtype) if w is None else w[tt].astype(x.dtype)
    wt = jnp.where(t == ignore, 0, wt)
    loss = picked * wt
    total = jnp.sum(wt)
    if reduction == 0:
        return loss, jnp.zeros((), x.dtype)
    if reduction == 1:
        return jnp.sum(loss) / total, total
    return jnp.sum(loss), total


reg(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)(_nll)


@reg(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def _nll_bwd(g: Any, x: Any, t: Any, w: Any, reduction: int, ignore: int, total: Any) -> Any:
    # d loss / d x: -weight[t] * g at the target class (divided by total_weight for 'mean')
    cdim = 0 if x.ndim == 1 else 1
    keep = t != ignore
    tt = jnp.where(keep, t, 0)
    wt = jnp.ones(tt.shape, x.dtype) if w is None else w[tt].astype(x.dtype)
    coef = -jnp.where(keep, wt, 0) * g.astype(x.dtype)
    if reduction == 1:
        coef = coef / total.astype(x.dtype)
    classes = lax.broadcasted_iota(tt.dtype, x.shape, cdim)
    hit = classes == jnp.expand_dims(tt, cdim)
    return jnp.where(hit, jnp.expand_dims(coef, cdim), jnp.zeros((), x.dtype))


reg(aten.mse_loss.default)(
    lambda a, b, reduction=1: [lambda d: d, jnp.mean, jnp.sum][reduction](jnp.square(a - b))
)


# --------------------------------------------------------------------------- random


def lower_random(
    key: Any, *inputs: Any, kind: str, index: int, shape: Any, dtype: Any, params: Any
) -> Any:
    """Random ops: ``key`` is the epoch's ``(seed, epoch)``, ``index`` the op's number in it."""
    k = jax.random.fold_in(key.astype(jnp.uint32), index)
    shape = tuple(shape)
    jdt = jax_dtype(dtype)
    fdt = jdt if jnp.issubdtype(jdt, jnp.floating) else jnp.float32
    ps = [inputs[p.i - 1] if hasattr(p, "i") else p for p in params]
    if kind == "normal_":
        mean, std = (ps + [0.0, 1.0])[:2] if len(ps) < 2 else ps[:2]
        out = mean + std * jax.random.normal(k, shape, fdt)
    elif kind == "uniform_":
        lo, hi = (ps + [0.0, 1.0])[:2] if len(ps) < 2 else ps[:2]
        out = jax.random.uniform(k, shape, fdt, lo, hi)
    elif kind in ("bernoulli_", "bernoulli_tensor"):
        p = ps[0] if ps else 0.5
        out = jax.random.uniform(k, shape, jnp.float32) < p
    elif kind == "exponential_":
        lam = ps[0] if ps else 1.0
        out = jax.random.exponential(k, shape, fdt) / lam
    elif kind == "log_normal_":
        mean, std = (ps + [1.0, 2.0])[:2] if len(ps) < 2 else ps[:2]
        out = jnp.exp(mean + std * jax.random.normal(k, shape, fdt))
    else:  # random_
        lo, hi = (0, 2**24) if not ps else ((0, ps[0]) if len(ps) == 1 else (ps[0], ps[1]))
        out = jax.random.randint(k, shape, lo, hi if hi is not None else 2**24)
    return out.astype(jdt)
