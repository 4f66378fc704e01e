"""Antialiased interpolation (``F.interpolate(..., antialias=True)``): ``_upsample_bilinear2d_aa``,
``_upsample_bicubic2d_aa`` and their backward ops, for floating values (uint8 images run
eager's fixed-point CPU kernel: ``LOWERED_IF``).

Eager's separable kernel (ATen's ``UpSampleKernel.cpp``, ``_compute_weights_aa``): along an
axis, output ``i`` reads the inputs in a window around ``center = scale * (i + 0.5)``,
``support`` wide (the filter's, widened by the downscaling factor), weighted by the filter
(triangle; cubic with a = -0.5) at the scaled distances and normalized to sum 1, in the input's
float type (float32 for bfloat16/float16, which eager's CPU kernel refuses). The width is
resampled first, then the height; an axis whose size does not change is left as it is. The
weights are eager's bit for bit (its compiled cubic filter's fused multiply-adds included).
Each window is summed in eager's order and only within the window (an infinite value outside
it stays out); eager fuses those multiply-adds too, which a portable program does not, so a
downsampled value can differ from eager's in its last bit or two. The backward ops are
``jax.vjp`` of the forward.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .registry import lowered_if, reg
from .resample import pixel_scale

aten = torch.ops.aten
LINEAR, CUBIC = 2, 4  # the filters' sizes


def _fma(a: Any, b: Any, c: Any, t: type) -> Any:
    """``a * b + c`` rounded once to ``t``, as the fused multiply-add eager's compiled kernel
    makes of it (x86 builds contract these; float64 holds a float32 product exactly)."""
    if t is np.float64:
        return a * b + c  # no wider type to fuse in: a float64 weight may differ in its last bit
    wide = np.float64
    return (np.asarray(a, wide) * np.asarray(b, wide) + np.asarray(c, wide)).astype(t)


def _filter(kind: int, x: Any, t: type) -> Any:
    """Eager's ``aa_filter`` in float type ``t``."""
    x = np.abs(x.astype(t))
    if kind == LINEAR:
        return np.where(x < 1, (1.0 - x.astype(np.float64)).astype(t), t(0))
    a = t(-0.5)
    near = _fma(_fma(a + t(2), x, -(a + t(3)), t) * x, x, t(1), t)
    far = _fma(_fma(_fma(a, x, t(-5) * a, t), x, t(8) * a, t), x, t(-4) * a, t)
    return np.where(x < 1, near, np.where(x < 2, far, t(0))).astype(t)


def _weights(kind: int, n_in: int, n_out: int, align_corners: bool, scale: Any, t: type) -> tuple:
    """Per output: the window's first input (n_out,), its size (n_out,) and its weights
    (n_out, widest window), as eager computes them in float type ``t``."""
    s = pixel_scale(n_in, n_out, align_corners, scale, t)
    support = t(kind * 0.5) * s if s >= 1.0 else t(kind * 0.5)
    width = int(math.ceil(support)) * 2 + 1
    invscale = t(1.0 / float(s)) if s >= 1.0 else t(1.0)
    i = np.arange(n_out)
    center = (np.float64(s) * (i + 0.5)).astype(t)
    first = np.maximum(((center - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    last = np.minimum(((center + support).astype(np.float64) + 0.5).astype(np.int64), n_in)
    size = last - first
    j = np.arange(width)
    at = (first[:, None] + j[None, :]).astype(t) - center[:, None]  # int64 -> t, then t math
    w = _filter(kind, ((at.astype(np.float64) + 0.5) * np.float64(invscale)), t)
    w = np.where(j[None, :] < size[:, None], w, t(0))
    total = np.zeros(n_out, t)
    for k in range(width):  # eager's running sum
        total = (total + w[:, k]).astype(t)
    w = np.where(total[:, None] != 0, w / np.where(total == 0, t(1), total)[:, None], w)
    return first, size, w.astype(t)


def _resample_axis(x: Any, axis: int, weights: tuple) -> Any:
    """``x`` resampled along ``axis`` by the windows ``weights`` (``_weights``)."""
    first, size, w = weights
    n_in = x.shape[axis]
    shape = [1] * x.ndim
    shape[axis] = len(first)
    out = None
    for k in range(w.shape[1]):
        idx = np.minimum(first + k, n_in - 1)
        term = jnp.take(x, jnp.asarray(idx), axis=axis) * jnp.asarray(w[:, k]).reshape(shape)
        if out is None:
            out = term
        else:
            inside = jnp.asarray(k < size).reshape(shape)
            out = jnp.where(inside, out + term, out)
    return out


def _resample(kind: int, x: Any, size: Any, align_corners: bool, scales: tuple) -> Any:
    t = np.float64 if x.dtype == jnp.float64 else np.float32
    out = x.astype(t)
    for axis in (3, 2):  # the width first, as eager
        n_in, n_out = x.shape[axis], size[axis - 2]
        if n_in != n_out:
            weights = _weights(kind, n_in, n_out, align_corners, scales[axis - 2], t)
            out = _resample_axis(out, axis, weights)
    return out


@lowered_if(aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default)
def _floating(x: Any, *args: Any, **kwargs: Any) -> bool:
    return x.dtype.is_floating_point


def _forward(kind: int) -> Any:
    def lowered(
        x: Any, size: Any, align_corners: bool, scales_h: Any = None, scales_w: Any = None
    ) -> Any:
        return _resample(kind, x, size, align_corners, (scales_h, scales_w)).astype(x.dtype)

    return lowered


def _backward(kind: int) -> Any:
    def lowered(
        g: Any,
        size: Any,
        input_size: Any,
        align_corners: bool,
        scales_h: Any = None,
        scales_w: Any = None,
    ) -> Any:
        t = jnp.float64 if g.dtype == jnp.float64 else jnp.float32
        x = jnp.zeros(tuple(input_size), t)
        _, vjp = jax.vjp(lambda x: _resample(kind, x, size, align_corners, (scales_h, scales_w)), x)
        return vjp(g.astype(t))[0].astype(g.dtype)

    return lowered


reg(aten._upsample_bilinear2d_aa.default)(_forward(LINEAR))
reg(aten._upsample_bicubic2d_aa.default)(_forward(CUBIC))
reg(aten._upsample_bilinear2d_aa_backward.default)(_backward(LINEAR))
reg(aten._upsample_bicubic2d_aa_backward.default)(_backward(CUBIC))
