"""Neural-network ops: softmax, layer norm, batch norm, losses (and their backward ops)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from .checks import INPUT_PROBABILITY, TARGET_PROBABILITY, checked, in_range, probability
from .reductions import shifted_by_max
from .registry import meta_kernel, norm_dim, real_sign, reg, reg_opmath, scalar_as_vector, upcast

aten = torch.ops.aten


def _softmax_fn(x: Any, dim: int, half_to_float: bool = False) -> Any:
    axis = norm_dim(dim, x.ndim)
    e = jnp.exp(shifted_by_max(upcast(x), axis)[0])
    return e / jnp.sum(e, axis, keepdims=True)


def _log_softmax(x: Any, dim: int, half_to_float: bool = False) -> Any:
    axis = norm_dim(dim, x.ndim)
    d = shifted_by_max(upcast(x), axis)[0]
    return d - jnp.log(jnp.sum(jnp.exp(d), axis, keepdims=True))


reg(aten._softmax.default)(_softmax_fn)
reg(aten._log_softmax.default)(_log_softmax)
reg_opmath(aten._softmax_backward_data.default)(
    lambda g, y, dim, dt: y * (g - jnp.sum(g * y, axis=norm_dim(dim, y.ndim), keepdims=True))
)
reg_opmath(aten._log_softmax_backward_data.default)(
    lambda g, y, dim, dt: g - jnp.exp(y) * jnp.sum(g, axis=norm_dim(dim, y.ndim), keepdims=True)
)


def _layer_norm(x: Any, shape: Any, w: Any, b: Any, eps: Any) -> Any:
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    xf = upcast(x)
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
    gf = upcast(g)
    xhat = (upcast(x) - mean) * rstd
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
    xf = upcast(x)
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
    out = (upcast(x) - _bc(rm, x)) * _bc(lax.rsqrt(upcast(rv) + eps), x)  # in float32, as eager
    if w is not None:
        out = out * _bc(w, x)
    if b is not None:
        out = out + _bc(b, x)
    return out.astype(x.dtype)


def _bc(v: Any, x: Any) -> Any:
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def _with_affine(op: Any, x: Any, w: Any, b: Any, *rest: Any) -> Any:
    """torch's meta kernel of ``op`` on these inputs, a missing weight or bias stood in for:
    it refuses them (it picks a backend with them), which eager's kernel takes
    (``nn.BatchNorm1d(affine=False)``); the shapes do not depend on them."""
    affine = torch.empty((x.shape[1],), dtype=x.dtype, device="meta")
    return op(x, affine if w is None else w, affine if b is None else b, *rest)


@meta_kernel(aten._batch_norm_with_update_functional.default)
def _bn_update_meta(x: Any, w: Any, b: Any, *rest: Any) -> Any:
    return _with_affine(aten._batch_norm_with_update_functional.default, x, w, b, *rest)


@meta_kernel(aten._batch_norm_no_update.default)
def _bn_no_update_meta(x: Any, w: Any, b: Any, rm: Any, *rest: Any) -> Any:
    """With running statistics, eager CPU's shapes (torch's meta kernel says CUDA's): the
    saved statistics are empty."""
    out, mean, rstd, reserve = _with_affine(aten._batch_norm_no_update.default, x, w, b, rm, *rest)
    if rm is None:
        return out, mean, rstd, reserve
    empty = torch.empty((0,), dtype=rm.dtype, device="meta")
    return out, empty, empty.clone(), reserve


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
        jnp.zeros((0,), rm.dtype),
        jnp.zeros((0,), rm.dtype),
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
    gb = jnp.sum(upcast(g), (0,) + tuple(range(2, x.ndim)))
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


def _nll(x: Any, t: Any, w: Any, reduction: int, ignore: int) -> tuple[Any, Any]:
    cdim = 0 if x.ndim == 1 else 1
    tt = jnp.where(t == ignore, 0, t)
    in_range(tt, x.shape[cdim])  # eager: "Target 6 is out of bounds."
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
checked(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)


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


@reg(aten.binary_cross_entropy.default)
def _binary_cross_entropy(x: Any, t: Any, w: Any = None, reduction: int = 1) -> Any:
    """Torch's decomposition (in float32 for bfloat16/float16), and eager's checks of the
    input and target: probabilities in [0, 1]."""
    probability(INPUT_PROBABILITY, x)
    probability(TARGET_PROBABILITY, t)
    x, t = upcast(x), upcast(t)
    floor = jnp.asarray(-100, x.dtype)
    loss = (t - 1) * jnp.maximum(jnp.log1p(-x), floor) - t * jnp.maximum(jnp.log(x), floor)
    if w is not None:
        loss = loss * upcast(w)
    return [lambda d: d, jnp.mean, jnp.sum][reduction](loss)


checked(aten.binary_cross_entropy.default)


reg(aten.mse_loss.default)(
    lambda a, b, reduction=1: [lambda d: d, jnp.mean, jnp.sum][reduction](jnp.square(a - b))
)


def _group_norm(x: Any, w: Any, b: Any, n: int, c: int, hw: int, group: int, eps: float) -> Any:
    xf = upcast(x).reshape(n, group, c // group * hw)  # sizes given: an empty batch too
    mean = jnp.mean(xf, axis=-1)
    var = jnp.mean(jnp.square(xf - mean[..., None]), axis=-1)
    rstd = lax.rsqrt(var + eps)
    out = ((xf - mean[..., None]) * rstd[..., None]).reshape(n, c, hw)
    if w is not None:
        out = out * upcast(w)[None, :, None]
    if b is not None:
        out = out + upcast(b)[None, :, None]
    return out.reshape(x.shape), mean, rstd


reg(aten.native_group_norm.default)(_group_norm)


@reg(aten.native_group_norm_backward.default)
def _group_norm_bwd(
    g: Any, x: Any, mean: Any, rstd: Any, w: Any, n: int, c: int, hw: int, group: int, mask: Any
) -> Any:
    gf = upcast(g).reshape(n, c, hw)
    mean, rstd = upcast(mean)[..., None], upcast(rstd)[..., None]
    per_group = c // group * hw
    xhat = ((upcast(x).reshape(n, group, per_group) - mean) * rstd).reshape(n, c, hw)
    wv = jnp.ones((c,), jnp.float32) if w is None else upcast(w)
    gxhat = (gf * wv[None, :, None]).reshape(n, group, per_group)
    xg = xhat.reshape(n, group, per_group)
    gx = rstd * (
        gxhat - jnp.mean(gxhat, -1, keepdims=True) - xg * jnp.mean(gxhat * xg, -1, keepdims=True)
    )
    gw = jnp.sum(gf * xhat, axis=(0, 2))
    gb = jnp.sum(gf, axis=(0, 2))
    return tuple(
        r if m else None for r, m in zip((gx.reshape(x.shape), gw, gb), mask, strict=False)
    )


def _pairwise(x1: Any, x2: Any, p: float) -> Any:
    d = jnp.abs(x1[..., :, None, :] - x2[..., None, :, :])
    if p == 0:
        return jnp.sum(d != 0, axis=-1).astype(x1.dtype)
    if p == math.inf:
        return jnp.max(d, axis=-1, initial=0)
    if p == 1:
        return jnp.sum(d, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(d * d, axis=-1))
    return jnp.sum(d**p, axis=-1) ** (1.0 / p)


@reg(aten._cdist_forward.default)
def _cdist(x1: Any, x2: Any, p: float, compute_mode: Any = None) -> Any:
    r1, r2 = x1.shape[-2], x2.shape[-2]
    mm = p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (r1 > 25 or r2 > 25)))
    if not mm:
        return _pairwise(x1, x2, p)
    # eager's matrix-product form of the euclidean distance
    n1 = jnp.sum(x1 * x1, axis=-1, keepdims=True)
    n2 = jnp.sum(x2 * x2, axis=-1, keepdims=True)
    a = jnp.concatenate([-2 * x1, n1, jnp.ones_like(n1)], axis=-1)
    b = jnp.concatenate([x2, jnp.ones_like(n2), n2], axis=-1)
    d2 = jnp.matmul(a, jnp.swapaxes(b, -1, -2), precision=lax.Precision.HIGHEST)
    return jnp.sqrt(jnp.maximum(d2, 1e-30))


@reg(aten._cdist_backward.default)
def _pairwise_grad(g: Any, x1: Any, x2: Any, p: float, dist: Any) -> Any:
    """The gradient of ``dist = _pairwise(x1, x2, p)`` for ``x1``, term by term as eager's
    kernels (``_cdist_backward``): 0 where a distance is 0 (where its derivative has none)."""
    if p == 0:
        return jnp.zeros_like(x1)
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    d = dist[..., None]
    gd = g[..., None]
    sign = real_sign(diff)
    zero = d == 0
    safe = jnp.where(zero, 1, d)
    if p == 1:
        t = sign * gd
    elif p == math.inf:
        t = sign * (jnp.abs(diff) == d) * gd
    elif p == 2:
        t = jnp.where(zero, 0, diff * gd / safe)
    elif p < 2:
        zero = zero | ((diff == 0) & (p < 1))
        mag = jnp.abs(jnp.where(diff == 0, 1, diff)) ** (p - 1)
        t = jnp.where(zero, 0, sign * mag * gd / safe ** (p - 1))
    else:
        t = jnp.where(zero, 0, diff * jnp.abs(diff) ** (p - 2) * gd / safe ** (p - 1))
    return jnp.sum(t, axis=-2)


@reg(aten._pdist_forward.default)
def _pdist(x: Any, p: float = 2) -> Any:
    i, j = np.triu_indices(x.shape[0], 1)
    return _pairwise(x, x, p)[i, j]


@reg(aten._trilinear.default)
def _trilinear(
    i1: Any, i2: Any, i3: Any, e1: Any, e2: Any, e3: Any, sumdim: Any, unroll_dim: int = 1
) -> Any:
    def grow(t: Any, dims: Any) -> Any:
        for d in sorted(dims):
            t = jnp.expand_dims(t, d)
        return t

    out = grow(i1, e1) * grow(i2, e2) * grow(i3, e3)
    return jnp.sum(out, axis=tuple(sumdim)) if len(sumdim) else out


scalar_as_vector(
    aten._softmax.default,
    aten._log_softmax.default,
    aten._softmax_backward_data.default,
    aten._log_softmax_backward_data.default,
)


@reg(aten._pdist_backward.default)
def _pdist_bwd(g: Any, x: Any, p: float, dist: Any) -> Any:
    """Each pair's term as ``_cdist_backward``'s, over the full symmetric matrices (a zero
    diagonal: no term)."""
    n = x.shape[0]
    i, j = np.triu_indices(n, 1)
    full_g = jnp.zeros((n, n), g.dtype).at[i, j].set(g).at[j, i].set(g)
    full_d = jnp.zeros((n, n), dist.dtype).at[i, j].set(dist).at[j, i].set(dist)
    return _pairwise_grad(full_g, x, x, p, full_d)


def _weight_norm_bwd(gw: Any, v: Any, g: Any, norms: Any, dim: int) -> Any:
    """The gradients of ``v`` and ``g`` of ``w = g * v / norms`` (``norms``: ``v``'s norm over
    every axis but ``dim``, shaped as ``g``), as eager's kernel computes them."""
    axes = tuple(a for a in range(v.ndim) if a != norm_dim(dim, v.ndim))
    vf = upcast(v)
    sums = jnp.sum(upcast(gw) * vf, axis=axes, keepdims=True)
    n = upcast(norms).reshape(sums.shape)
    gf = upcast(g).reshape(sums.shape)
    grad_v = (gf / n) * (upcast(gw) - vf * (sums / (n * n)))
    return grad_v.astype(v.dtype), (sums / n).reshape(g.shape).astype(g.dtype)


_WEIGHT_NORM_BWD = aten._weight_norm_interface_backward.default
if torch._C._dispatch_has_kernel_for_dispatch_key(_WEIGHT_NORM_BWD.name(), "Meta"):
    reg(_WEIGHT_NORM_BWD)(_weight_norm_bwd)  # torch >= 2.10; before, no shape inference: CPU
