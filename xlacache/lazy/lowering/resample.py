"""Backward ops of interpolation (``upsample_*``) and padding.

Interpolation is linear in its input: along each axis an (output, input) weight matrix, built
here with eager's index and weight formulas (ATen's ``UpSample.h``, in float32 like eager's
kernels), maps input to output; the backward op applies the transposed matrices to the
gradient. The forward ops reach the device through PyTorch's decompositions.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .registry import argument_check, reg, upcast

aten = torch.ops.aten
_HIGHEST = jax.lax.Precision.HIGHEST  # exact sums, never a reduced-precision product
f32 = np.float32


def pixel_scale(n_in: int, n_out: int, align_corners: bool, scale: Any, t: type = f32) -> Any:
    """Eager's ``area_pixel_compute_scale`` in float type ``t``."""
    if align_corners:
        return t(n_in - 1) / t(n_out - 1) if n_out > 1 else t(0)
    return t(1.0 / scale) if scale is not None and scale > 0 else t(n_in) / t(n_out)


def cubic_weights(t: Any, a: Any) -> list:
    """The four cubic convolution weights at fraction ``t`` (numpy or JAX values), with eager's
    expressions (``UpSample.h``)."""

    def near(x: Any) -> Any:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Any) -> Any:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _nearest(n_in: int, n_out: int, scale: Any, exact: bool) -> np.ndarray:
    dst = np.arange(n_out)
    if exact:
        s = pixel_scale(n_in, n_out, False, scale)
        src = np.floor((dst.astype(f32) + f32(0.5)) * s).astype(np.int64)
    elif n_out == n_in:
        src = dst
    elif n_out == 2 * n_in:
        src = dst >> 1
    else:
        s = pixel_scale(n_in, n_out, False, scale)
        src = np.floor(dst.astype(f32) * s).astype(np.int64)
    m = np.zeros((n_out, n_in), f32)
    m[dst, np.minimum(src, n_in - 1)] = 1
    return m


def _linear(n_in: int, n_out: int, align_corners: bool, scale: Any) -> np.ndarray:
    s = pixel_scale(n_in, n_out, align_corners, scale)
    dst = np.arange(n_out).astype(f32)
    real = s * dst if align_corners else np.maximum(s * (dst + f32(0.5)) - f32(0.5), f32(0))
    i0 = np.minimum(np.floor(real).astype(np.int64), n_in - 1)
    lam = np.clip(real - i0.astype(f32), f32(0), f32(1)).astype(f32)
    i1 = i0 + (i0 < n_in - 1)
    m = np.zeros((n_out, n_in), f32)
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), f32(1) - lam)
    np.add.at(m, (rows, i1), lam)
    return m


def _cubic(n_in: int, n_out: int, align_corners: bool, scale: Any) -> np.ndarray:
    s = pixel_scale(n_in, n_out, align_corners, scale)
    dst = np.arange(n_out).astype(f32)
    real = s * dst if align_corners else s * (dst + f32(0.5)) - f32(0.5)
    i0 = np.floor(real).astype(np.int64)
    t = (real - i0.astype(f32)).astype(f32)
    coeffs = cubic_weights(t, f32(-0.75))
    m = np.zeros((n_out, n_in), f32)
    rows = np.arange(n_out)
    for k, c in enumerate(coeffs):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, n_in - 1)), c.astype(f32))
    return m


def _apply_t(g: Any, mats: list[np.ndarray]) -> Any:
    """The gradient of ``x -> x`` resampled by ``mats`` along its trailing axes."""
    out = upcast(g)
    nd = len(mats)
    for i, m in enumerate(mats):
        ax = g.ndim - nd + i
        out = jnp.tensordot(out, jnp.asarray(m), axes=[[ax], [0]], precision=_HIGHEST)
        out = jnp.moveaxis(out, -1, ax)
    return out.astype(g.dtype)


def _upsample_bwd(kind: str, nd: int, g: Any, out_size: Any, in_size: Any, *rest: Any) -> Any:
    align = rest[0] if kind in ("linear", "cubic") else False
    scales = list(rest[1:] if kind in ("linear", "cubic") else rest)
    scales = (scales + [None] * nd)[:nd]
    n_in = list(in_size)[-nd:]
    mats = []
    for i in range(nd):
        if kind in ("nearest", "exact"):
            mats.append(_nearest(n_in[i], out_size[i], scales[i], kind == "exact"))
        elif kind == "linear":
            mats.append(_linear(n_in[i], out_size[i], align, scales[i]))
        else:
            mats.append(_cubic(n_in[i], out_size[i], align, scales[i]))
    return _apply_t(g, mats)


for _kind, _nd, op_info in [
    ("nearest", 1, aten.upsample_nearest1d_backward.default),
    ("nearest", 2, aten.upsample_nearest2d_backward.default),
    ("nearest", 3, aten.upsample_nearest3d_backward.default),
    ("exact", 1, aten._upsample_nearest_exact1d_backward.default),
    ("exact", 2, aten._upsample_nearest_exact2d_backward.default),
    ("exact", 3, aten._upsample_nearest_exact3d_backward.default),
    ("linear", 1, aten.upsample_linear1d_backward.default),
    ("linear", 2, aten.upsample_bilinear2d_backward.default),
    ("linear", 3, aten.upsample_trilinear3d_backward.default),
    ("cubic", 2, aten.upsample_bicubic2d_backward.default),
]:
    reg(op_info)(partial(_upsample_bwd, _kind, _nd))


def _replicate_pad(x: Any, pad: Any) -> Any:
    nd = len(pad) // 2
    cfg = [(0, 0)] * (x.ndim - nd) + [
        (pad[2 * (nd - 1 - i)], pad[2 * (nd - 1 - i) + 1]) for i in range(nd)
    ]
    for ax, (lo, hi) in enumerate(cfg):  # out[i] = x[clamp(i - lo, 0, n - 1)]; lo < 0 crops
        n = x.shape[ax]
        if lo or hi:
            x = jnp.take(x, np.clip(np.arange(n + lo + hi) - lo, 0, n - 1), axis=ax)
    return x


@reg(
    aten.replication_pad1d_backward.default,
    aten.replication_pad2d_backward.default,
    aten.replication_pad3d_backward.default,
)
def _replicate_pad_bwd(g: Any, x: Any, pad: Any) -> Any:
    return jax.vjp(lambda x: _replicate_pad(x, pad), upcast(x))[1](upcast(g))[0].astype(x.dtype)


@reg(aten.masked_scatter_backward.default)
def _masked_scatter_bwd(g: Any, mask: Any, sizes: Any) -> Any:
    """The source's gradient: the masked gradient elements in order, then zeros."""
    n = math.prod(sizes)
    m = jnp.broadcast_to(mask, g.shape).reshape(-1)
    pos = jnp.where(m, jnp.cumsum(m.astype(jnp.int64)) - 1, n)
    out = jnp.zeros((n,), g.dtype).at[pos].set(g.reshape(-1), mode="drop")
    return out.reshape(tuple(sizes))


@argument_check(
    aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default
)
def _reflection_within_input(x: Any, pad: Any) -> None:
    """Eager's check: a reflection reaches no further than the input (torch's decomposition
    of the op would read past it)."""
    for i in range(len(pad) // 2):
        dim, lo, hi = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        if lo >= x.shape[dim] or hi >= x.shape[dim]:
            raise RuntimeError(
                f"Argument #{4 + 2 * i}: Padding size should be less than the corresponding "
                f"input dimension, but got: padding ({lo}, {hi}) at dimension {dim} of input "
                f"{list(x.shape)}"
            )
