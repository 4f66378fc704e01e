"""Complex numbers and FFTs: ``complex``/``polar``, real <-> complex views, conjugation, and
the three FFT primitives torch's ``torch.fft`` functions reduce to.

Lazy tensors carry no conjugate or negative bit: ``_conj``/``_neg_view`` produce the conjugated
or negated value itself, which reads the same as eager's lazily conjugated view.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from .registry import reg

aten = torch.ops.aten

reg(aten.complex.default)(lambda re, im: lax.complex(*jnp.broadcast_arrays(re, im)))
reg(aten.polar.default)(
    lambda r, th: lax.complex(*jnp.broadcast_arrays(r * jnp.cos(th), r * jnp.sin(th)))
)
reg(aten.view_as_real.default)(lambda x: jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1))
reg(aten.view_as_complex.default)(lambda x: lax.complex(x[..., 0], x[..., 1]))
reg(aten._conj.default, aten.conj_physical.default, aten._conj_physical.default)(jnp.conj)
reg(aten._neg_view.default)(jnp.negative)
reg(aten.real.default)(jnp.real)
reg(aten.imag.default)(jnp.imag)
reg(aten.angle.default)(
    lambda x: (
        jnp.angle(x) if jnp.iscomplexobj(x) else jnp.where(x != x, x, jnp.where(x < 0, math.pi, 0))
    )
)


def _scale(x: Any, n: int, normalization: int) -> Any:
    """torch's ``fft_norm_mode``: 0 none, 1 by 1/sqrt(n), 2 by 1/n."""
    if normalization == 1:
        return x * (1.0 / math.sqrt(n))
    if normalization == 2:
        return x * (1.0 / n)
    return x


def _axes(dim: Any, ndim: int) -> tuple[int, ...]:
    return tuple(d % ndim for d in dim)  # in order: the last one is the halved one


def _n(shape: Any, axes: tuple[int, ...]) -> int:
    return math.prod(shape[a] for a in axes)


@reg(aten._fft_r2c.default)
def _fft_r2c(x: Any, dim: Any, normalization: int, onesided: bool) -> Any:
    axes = _axes(dim, x.ndim)
    out = jnp.fft.rfftn(x, axes=axes) if onesided else jnp.fft.fftn(x, axes=axes)
    return _scale(out, _n(x.shape, axes), normalization)


@reg(aten._fft_c2c.default)
def _fft_c2c(x: Any, dim: Any, normalization: int, forward: bool) -> Any:
    axes = _axes(dim, x.ndim)
    # unnormalized both ways ("forward" puts jnp's 1/n on the forward transform)
    out = jnp.fft.fftn(x, axes=axes) if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scale(out, _n(x.shape, axes), normalization)


@reg(aten._fft_c2r.default)
def _fft_c2r(x: Any, dim: Any, normalization: int, last_dim_size: int) -> Any:
    axes = _axes(dim, x.ndim)
    sizes = [x.shape[a] for a in axes[:-1]] + [last_dim_size]
    out = jnp.fft.irfftn(x, s=sizes, axes=axes, norm="forward")
    return _scale(out, math.prod(sizes), normalization)
