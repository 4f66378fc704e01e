"""Convolution and pooling (max, average, adaptive average; 1-3 spatial dims) and their backward
ops, the backward ones as ``jax.vjp`` of the forward lowering.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .checks import checked, in_range
from .precision import conv_precision
from .registry import lowest, reg, upcast

HIGHEST = lax.Precision.HIGHEST

aten = torch.ops.aten


def _conv_dn(nd: int) -> tuple[str, str, str]:
    sp = "DHW"[3 - nd :]
    return ("NC" + sp, "OI" + sp, "NC" + sp)


def _acc(x: Any) -> Any:
    """bfloat16/float16 convolutions accumulate in float32, as eager's."""
    return jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else None


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
    fp32_precision: str | None = None,
) -> Any:
    nd = w.ndim - 2
    # one value for every spatial dimension, as aten's convolution expands it ('valid': [0])
    stride, padding, dilation, output_padding = (
        tuple(v) * nd if len(v) == 1 else tuple(v)
        for v in (stride, padding, dilation, output_padding)
    )
    precision = conv_precision(fp32_precision)
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
            precision=precision,
            preferred_element_type=_acc(x),
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
            precision=precision,
            preferred_element_type=_acc(x),
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
    fp32_precision: str | None = None,
) -> Any:
    def fwd(x: Any, w: Any) -> Any:
        return _conv(
            x, w, None, stride, padding, dilation, transposed, output_padding, groups,
            fp32_precision,
        )  # fmt: skip

    out, f = jax.vjp(fwd, x, w)
    gx, gw = f(g.astype(out.dtype))  # float32 for bfloat16/float16 inputs (_acc)
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
    init = jnp.asarray(lowest(x.dtype), x.dtype)
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

    init = (jnp.asarray(lowest(x.dtype), x.dtype), jnp.asarray(0, jnp.int32))
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
    """Each output's gradient goes to the input element the forward picked (its index), as
    eager does: exact on ties and with any dilation."""
    lead = x.shape[: x.ndim - nd]
    batch = math.prod(lead)
    gl = upcast(g).reshape(batch, -1)
    il = idx.reshape(batch, -1)
    out = jnp.zeros((batch, math.prod(x.shape[len(lead) :])), gl.dtype)
    out = out.at[jnp.arange(batch)[:, None], il].add(gl)
    return out.reshape(x.shape).astype(x.dtype)


for _nd, _fw, _bw in [
    (2, aten.max_pool2d_with_indices.default, aten.max_pool2d_with_indices_backward.default),
    (3, aten.max_pool3d_with_indices.default, aten.max_pool3d_with_indices_backward.default),
]:
    reg(_fw)(partial(_maxpool_idx, _nd))
    reg(_bw)(partial(_maxpool_bwd, _nd))


def _avgpool(x: Any, k: Any, s: Any, p: Any, ceil: bool, cip: bool, div: Any) -> Any:
    nd = 2 if x.ndim in (3, 4) and len(k) <= 2 else 3
    k, s, p, _ = _norm_pool_args(k, s, p, (1,), nd)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    pp = [_pool_pads(sp[i], k[i], s[i], p[i], 1, ceil) for i in range(nd)]
    pads = [(0, 0)] * lead + [(lo, hi) for _, lo, hi in pp]
    win, strides = (1,) * lead + k, (1,) * lead + s
    tot = lax.reduce_window(upcast(x), 0.0, lax.add, win, strides, pads)
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
    y = upcast(x)
    for i in range(nd):
        ax = x.ndim - nd + i
        m = jnp.asarray(_adaptive_matrix(x.shape[ax], out[i]))
        # an exact mean (eager sums), never a reduced-precision product
        y = jnp.moveaxis(jnp.tensordot(y, m, axes=[[ax], [1]], precision=HIGHEST), -1, ax)
    return y.astype(x.dtype)


reg(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)(_adaptive_avg)


def _adaptive_avg_bwd(nd: int, g: Any, x: Any) -> Any:
    out = g.shape[x.ndim - nd :]
    _, f = jax.vjp(lambda x: _adaptive_avg(x, out), x)
    return f(g.astype(x.dtype))[0]


def _window_mask(L: int, o: int) -> np.ndarray:
    """(o, L): which input positions each adaptive-pooling window covers."""
    m = np.zeros((o, L), bool)
    for i in range(o):
        m[i, (i * L) // o : -(-((i + 1) * L) // o)] = True
    return m


def _adaptive_max(x: Any, out: Any) -> tuple[Any, Any]:
    """Adaptive max pooling, one spatial axis at a time (a max over a box is separable); the
    index is the first maximum in row-major order, as eager's."""
    nd = len(out)
    lead = x.ndim - nd
    sp = x.shape[lead:]
    low = lowest(x.dtype)
    val = x
    flat = jnp.broadcast_to(jnp.arange(int(np.prod(sp)), dtype=jnp.int64).reshape(sp), x.shape)
    for i in reversed(range(nd)):  # innermost axis first
        ax = lead + i
        m = jnp.asarray(_window_mask(sp[i], out[i]))  # (o, L)
        v = jnp.moveaxis(val, ax, -1)[..., None, :]  # (..., 1, L)
        f = jnp.moveaxis(flat, ax, -1)[..., None, :]
        masked = jnp.where(m, v, low)
        pick = jnp.argmax(masked, axis=-1)
        val = jnp.moveaxis(jnp.take_along_axis(masked, pick[..., None], -1)[..., 0], -1, ax)
        fb = jnp.broadcast_to(f, masked.shape)
        flat = jnp.moveaxis(jnp.take_along_axis(fb, pick[..., None], -1)[..., 0], -1, ax)
    return val, flat


reg(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)(_adaptive_max)


reg(aten.adaptive_max_pool2d_backward.default)(
    lambda g, x, idx: _maxpool_bwd(2, g, x, (), (), (), (), False, idx)
)
reg(aten.adaptive_max_pool3d_backward.default)(
    lambda g, x, idx: _maxpool_bwd(3, g, x, (), (), (), (), False, idx)
)


reg(aten._adaptive_avg_pool2d_backward.default)(partial(_adaptive_avg_bwd, 2))
reg(aten._adaptive_avg_pool3d_backward.default)(partial(_adaptive_avg_bwd, 3))


def _max_unpool(x: Any, indices: Any, output_size: Any, *_: Any) -> Any:
    """``max_unpool2d``/``3d``: each value to its index in its plane of ``output_size``; an
    index outside the plane fails the check (eager: "Found an invalid max index")."""
    plane = math.prod(output_size)
    in_range(indices, plane)
    lead = x.shape[: x.ndim - len(output_size)]
    rows = math.prod(lead)
    flat_x, flat_i = x.reshape(rows, -1), indices.reshape(rows, -1)
    out = jnp.zeros((rows, plane), x.dtype).at[jnp.arange(rows)[:, None], flat_i].set(flat_x)
    return out.reshape(*lead, *output_size)


reg(aten.max_unpool2d.default, aten.max_unpool3d.default)(_max_unpool)
checked(aten.max_unpool2d.default, aten.max_unpool3d.default)
