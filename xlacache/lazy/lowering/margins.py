"""Margin losses as eager computes them: ``multi_margin_loss`` and ``multilabel_margin_loss``
and their backward ops (torch has no meta kernel for either backward; its decomposition of
``multilabel_margin_loss_forward`` counts the target positions after a -1 as class 0, and both
of its forwards give a vector's unreduced loss the shape ``[1]`` where eager's is ``[]``), and
``soft_margin_loss`` with its backward (eager rounds each step; torch's decompositions compute
in float32, and their gradient cancels).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from .checks import checked, in_range
from .registry import meta_kernel, reg, upcast

aten = torch.ops.aten


def _loss_shape(x: Any, reduction: int) -> tuple:
    """Eager's shape of the loss: torch's meta kernels give ``[1]``, not ``[]``, for a
    vector's loss without reduction."""
    return tuple(x.shape[:1]) if reduction == 0 and x.dim() == 2 else ()


def _reduced(per_sample: Any, x: Any, reduction: int) -> Any:
    """The samples' losses reduced as eager reduces them (a vector's unreduced loss is 0-d)."""
    if reduction == 0:
        return per_sample if x.ndim == 2 else per_sample[0]
    return jnp.mean(per_sample) if reduction == 1 else jnp.sum(per_sample)


def _sample_grads(g: Any, n: int, reduction: int) -> Any:
    """The gradient each of the ``n`` samples' losses receives, as a column."""
    gf = upcast(g)
    return gf.reshape(n)[:, None] if reduction == 0 else gf / (n if reduction == 1 else 1)


@meta_kernel(  # torch has none
    aten.multilabel_margin_loss_backward.default, aten.multi_margin_loss_backward.default
)
def _margin_loss_bwd_meta(g: Any, x: Any, *rest: Any) -> Any:
    return torch.empty_like(x)


def _multilabel_margin(x: Any, t: Any) -> tuple[Any, Any, Any, Any]:
    """Per sample (2-d): which target positions count (those before the first -1), the
    classes that are targets, and each (target position, class) hinge ``1 - x[t] + x[i]``
    over the classes that are not targets, clamped at 0 (eager's CPU kernel)."""
    counts = jnp.cumprod(t != -1, axis=-1).astype(bool)  # positions before the first -1
    tt = jnp.where(counts, t, 0)
    classes = lax.broadcasted_iota(t.dtype, (*t.shape, x.shape[-1]), 2)
    hit = (classes == tt[..., None]) & counts[..., None]  # [sample, position, class]
    is_target = jnp.any(hit, axis=1)
    xf = upcast(x)
    picked = jnp.take_along_axis(xf, tt, axis=-1)
    z = 1 - picked[..., None] + xf[:, None, :]
    keep = counts[..., None] & ~is_target[:, None, :] & (z > 0)
    return z, keep, hit, is_target


@meta_kernel(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss_meta(x: Any, t: Any, reduction: int) -> Any:
    return x.new_empty(_loss_shape(x, reduction)), x.new_empty(t.shape)


@reg(aten.multilabel_margin_loss_forward.default)
def _multilabel_margin_loss(x: Any, t: Any, reduction: int) -> tuple[Any, Any]:
    """Eager's loss; torch's decomposition counts the positions after a -1 as class 0 (torch
    2.13), so it is not used."""
    x2, t2 = jnp.atleast_2d(x), jnp.atleast_2d(t)
    in_range(t2 + 1, x2.shape[-1] + 1)  # eager: "argument #2 'target' is out of range"
    z, keep, _, is_target = _multilabel_margin(x2, t2)
    per_sample = jnp.sum(jnp.where(keep, z, 0), axis=(1, 2)) / x2.shape[-1]
    loss = _reduced(per_sample, x, reduction)
    return loss.astype(x.dtype), is_target.reshape(t.shape).astype(x.dtype)


checked(aten.multilabel_margin_loss_forward.default)


@reg(aten.multilabel_margin_loss_backward.default)
def _multilabel_margin_loss_bwd(g: Any, x: Any, t: Any, reduction: int, is_target: Any) -> Any:
    x2, t2 = jnp.atleast_2d(x), jnp.atleast_2d(t)
    _, keep, hit, _ = _multilabel_margin(x2, t2)
    n, dim = x2.shape
    coef = _sample_grads(g, n, reduction)
    plus = jnp.sum(keep, axis=1)  # each class's hinges as the non-target
    minus = jnp.sum(jnp.sum(keep, axis=2, keepdims=True) * hit, axis=1)  # as the target
    grad = (plus - minus).astype(coef.dtype) / dim * coef
    return grad.reshape(x.shape).astype(x.dtype)


def _multi_margin_hinges(x: Any, t: Any, p: Any, margin: Any, w: Any) -> tuple[Any, Any, Any]:
    """Per sample (2-d): the hinges ``margin - x[t] + x[i]`` of the classes, whether each is
    the target, and each sample's weight (its target class's)."""
    xf = upcast(x)
    z = margin - jnp.take_along_axis(xf, t[:, None], axis=1) + xf
    is_target = lax.broadcasted_iota(t.dtype, x.shape, 1) == t[:, None]
    weight = jnp.ones((x.shape[0], 1), xf.dtype) if w is None else upcast(w)[t][:, None]
    return z, is_target, weight


@meta_kernel(aten.multi_margin_loss.default)
def _multi_margin_loss_meta(x: Any, t: Any, p: Any = 1, margin: Any = 1, w: Any = None,
                            reduction: int = 1) -> Any:  # fmt: skip
    return x.new_empty(_loss_shape(x, reduction))


@reg(aten.multi_margin_loss.default)
def _multi_margin_loss(
    x: Any, t: Any, p: Any = 1, margin: Any = 1, w: Any = None, reduction: int = 1
) -> Any:
    x2, t2 = jnp.atleast_2d(x), jnp.atleast_1d(t)
    in_range(t2, x2.shape[1])  # eager: "target out of range"
    z, is_target, weight = _multi_margin_hinges(x2, t2, p, margin, w)
    hinge = jnp.where(is_target, 0, jnp.maximum(z, 0))
    per_sample = jnp.sum((hinge if p == 1 else hinge * hinge) * weight, axis=1) / x2.shape[1]
    return _reduced(per_sample, x, reduction).astype(x.dtype)


checked(aten.multi_margin_loss.default)


@reg(aten.multi_margin_loss_backward.default)
def _multi_margin_loss_bwd(
    g: Any, x: Any, t: Any, p: Any, margin: Any, w: Any = None, reduction: int = 1
) -> Any:
    """Eager's gradient: each class's hinge ``margin - x[t] + x[i]`` (``p`` 1 or 2), weighted by
    its sample's target class, for the class and against the target."""
    x2, t2 = jnp.atleast_2d(x), jnp.atleast_1d(t)
    n, dim = x2.shape
    z, is_target, weight = _multi_margin_hinges(x2, t2, p, margin, w)
    h = jnp.where((z > 0) & ~is_target, 1 if p == 1 else 2 * z, 0).astype(z.dtype) * weight
    h = h * _sample_grads(g, n, reduction) / dim
    grad = h - jnp.where(is_target, jnp.sum(h, axis=1, keepdims=True), 0)
    return grad.reshape(x.shape).astype(x.dtype)


def _rounded(dt: Any) -> Any:
    """Eager's in-place step on a tensor of dtype ``dt``: computed in its opmath, rounded."""
    return lambda v: v.astype(dt)


@reg(aten.soft_margin_loss.default)
def _soft_margin_loss(x: Any, y: Any, reduction: int = 1) -> Any:
    # eager's kernel, ``neg_out(out, x).mul_(y).exp_().log1p_()``, rounds each step to x's
    # dtype: a float16 loss whose exp overflows is inf there, as here
    r, f = _rounded(x.dtype), upcast
    margin = r(f(-x) * f(y))
    loss = r(jnp.log1p(f(r(jnp.exp(f(margin))))))
    if reduction == 0:
        return loss
    total = jnp.sum(f(loss))
    return total / loss.size if reduction == 1 else total


@reg(aten.soft_margin_loss_backward.default)
def _soft_margin_loss_backward(g: Any, x: Any, y: Any, reduction: int = 1) -> Any:
    # eager's ``-norm * y * z / (1 + z) * g`` with ``z = exp(-y * x)``, step by step; torch's
    # decomposition, ``y * g * (sigmoid(y * x) - 1)``, is 8% off at a margin of 14 and gives
    # -0.0 past 17
    r, f = _rounded(x.dtype), upcast
    norm = 1.0 / x.size if reduction == 1 else 1.0
    z = r(jnp.exp(f(r(f(-y) * f(x)))))
    grad = r(f(y) * f(z))
    grad = r(f(grad) * jnp.asarray(-norm, f(grad).dtype))
    grad = r(f(grad) / f(r(f(z) + 1)))
    return f(grad) * f(g)
