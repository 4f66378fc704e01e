"""Random ops: one ``random`` node per draw, keyed by the epoch's RNG leaf and its index."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .registry import jax_dtype

aten = torch.ops.aten


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
