"""``F.grid_sample``'s ops: ``grid_sampler_3d`` and the backward ops of the 2-d and 3-d
samplers (the 2-d forward is PyTorch's decomposition).

``sample`` reads eager's scalar CPU kernels (``ATen/native/GridSampler.h``): coordinates
unnormalized from [-1, 1], padded (``border`` clips, ``reflection`` reflects then clips),
then each output reads its 2**k corners (``bilinear``: weights in eager's order, x fastest),
its nearest element (``nearest``: half to even), or 16 taps (``bicubic``, 2-d only: each tap
padded, A = -0.75). A corner outside the input adds nothing (``zeros``). The backward ops are
``jax.vjp`` of ``sample``, written with eager's gradient conventions at the ties: a clipped
coordinate on the border has gradient 0, a reflected one flips the sign past each border,
rounding and flooring pass none. Values are computed in float32 for bfloat16/float16.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import torch

from .registry import reg, upcast
from .resample import cubic_weights

aten = torch.ops.aten
BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_A = -0.75  # the cubic convolution's parameter (eager's, as in bicubic upsampling)


def _unnormalize(x: Any, size: int, align_corners: bool) -> Any:
    """[-1, 1] -> [0, size - 1] (``align_corners``), else [-0.5, size - 0.5]."""
    if align_corners:
        return ((x + 1) / 2) * (size - 1)
    return ((x + 1) * size - 1) / 2


def _clip(x: Any, size: int, forward: bool) -> Any:
    """Clip to [0, size - 1]; the borders themselves count as outside (gradient 0 there). NaN
    stays NaN for a gradient, and is the upper border for a forward value, as in eager."""
    hi = jnp.full_like(x, size - 1)
    if forward:
        x = jnp.where(x < 0, jnp.zeros_like(x), x)  # eager's min(hi, max(x, 0))
        return jnp.where(x < hi, x, hi)
    return jnp.where(x <= 0, jnp.zeros_like(x), jnp.where(x >= hi, hi, x))


def _reflect(x: Any, twice_low: int, twice_high: int) -> Any:
    """Reflect by the borders ``twice_low / 2`` and ``twice_high / 2`` until inside them."""
    if twice_low == twice_high:
        return jnp.zeros_like(x)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    x = x - low
    x = jnp.where(x < 0, -x, x)
    extra = jnp.fmod(x, span)
    even = jnp.floor(x / span) % 2 == 0
    return jnp.where(even, extra + low, span - extra + low)


def _pad(x: Any, size: int, padding_mode: int, align_corners: bool, forward: bool) -> Any:
    if padding_mode == BORDER:
        return _clip(x, size, forward)
    if padding_mode == REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(x, *twice), size, forward)
    return x


def _reader(a: Any) -> Any:
    """``read(coords)``: the input's values (N, *out, C) at float coordinates (x first), zero
    and without gradient where outside, with the mask of the positions inside."""
    n = a.shape[0]
    sizes = a.shape[2:][::-1]  # W, H(, D)
    last = jnp.moveaxis(a, 1, -1)  # (N, *spatial, C)

    def read(coords: list) -> tuple[Any, Any]:
        inside = jnp.ones(coords[0].shape, bool)
        for c, size in zip(coords, sizes, strict=True):
            inside = inside & (c >= 0) & (c < size)
        idx = [jnp.where(inside, c, 0).astype(jnp.int32) for c in coords]
        batch = jnp.arange(n).reshape((n,) + (1,) * (coords[0].ndim - 1))
        return last[(batch, *idx[::-1])], inside[..., None]

    return read


def _bicubic(read: Any, ix: Any, iy: Any, pad_x: Any, pad_y: Any) -> Any:
    """The 16 taps around each point (each padded), weighted by rows then columns. The four
    weights of a row sum to 1, so each tap enters as its difference from the row's second:
    the gradient cancels exactly where taps read the same element (clipped onto a border),
    where the plain weighted sum leaves rounding noise beyond eager's."""
    x0, y0 = jnp.floor(ix), jnp.floor(iy)
    rows = []
    for j in range(4):
        ty = pad_y(y0 - 1 + j)
        taps = []
        for i in range(4):
            v, inside = read([pad_x(x0 - 1 + i), ty])
            taps.append(jnp.where(inside, v, 0))
        rows.append(_around_second(taps, cubic_weights(ix - x0, _A)))
    return _around_second(rows, cubic_weights(iy - y0, _A))


def _around_second(values: list, weights: list) -> Any:
    out = values[1]
    for k in (0, 2, 3):
        out = out + (values[k] - values[1]) * weights[k][..., None]
    return out


def sample(
    a: Any, grid: Any, mode: int, padding_mode: int, align_corners: bool, forward: bool = True
) -> Any:
    """``grid_sampler_{2,3}d`` on values ``a`` (N, C, *spatial) at ``grid`` (N, *out, k);
    ``forward=False``: the coordinates as eager's backward kernels pad them."""
    k = grid.shape[-1]
    sizes = a.shape[2:][::-1]
    read = _reader(a)
    coords = [_unnormalize(grid[..., d], sizes[d], align_corners) for d in range(k)]
    if mode == BICUBIC:
        pad_x, pad_y = (
            functools.partial(
                _pad, size=s, padding_mode=padding_mode, align_corners=align_corners, forward=True
            )
            for s in sizes
        )
        out = _bicubic(read, coords[0], coords[1], pad_x, pad_y)
    else:
        coords = [
            _pad(c, s, padding_mode, align_corners, forward)
            for c, s in zip(coords, sizes, strict=True)
        ]
        if mode == NEAREST:
            v, inside = read([jnp.round(c) for c in coords])
            out = jnp.where(inside, v, 0)
        else:
            lo = [jnp.floor(c) for c in coords]
            out = jnp.zeros((), a.dtype)  # eager adds each corner inside to 0
            for corner in itertools.product((0, 1), repeat=k):
                corner = corner[::-1]  # x fastest: nw, ne, sw, se (then the back face)
                at, w = [], None
                for c, low, up in zip(coords, lo, corner, strict=True):
                    at.append(low + up)
                    f = c - low if up else (low + 1) - c
                    w = f if w is None else w * f
                v, inside = read(at)
                out = out + jnp.where(inside, v * w[..., None], 0)
    return jnp.moveaxis(out, -1, 1)


@reg(aten.grid_sampler_3d.default)
def _grid_sampler_3d(a: Any, grid: Any, mode: int, padding_mode: int, align_corners: bool) -> Any:
    return sample(upcast(a), upcast(grid), mode, padding_mode, align_corners).astype(a.dtype)


@reg(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def _grid_sampler_backward(
    g: Any,
    a: Any,
    grid: Any,
    mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: Any,
) -> tuple[Any, Any]:
    def f(a: Any, grid: Any) -> Any:
        return sample(a, grid, mode, padding_mode, align_corners, forward=False)

    _, vjp = jax.vjp(f, upcast(a), upcast(grid))
    ga, gg = vjp(upcast(g))
    return (
        ga.astype(a.dtype) if output_mask[0] else None,
        gg.astype(grid.dtype) if output_mask[1] else None,
    )
