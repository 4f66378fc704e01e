"""Random ops: one ``random`` node per draw, keyed by the epoch's RNG leaf and its index."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import torch

from .checks import BERNOULLI_P, NORMAL_STD, check, checked, probability
from .registry import jax_dtype

aten = torch.ops.aten
# a draw with tensor parameters checks them: the lazy runtime's random node of each kind takes
# an op whose graphs carry the check, as compiled graphs of these ops do
CHECKED_DRAWS = {
    "bernoulli_": aten.bernoulli.default,
    "bernoulli_tensor": aten.bernoulli.default,
    "normal_": aten.normal.Tensor_Tensor,
}
checked(*CHECKED_DRAWS.values(), aten.bernoulli.Tensor, aten.normal.float_Tensor)
# each kind's parameters where the op was given fewer (torch drops arguments equal to their
# defaults: ``uniform_(0.5)`` is ``from=0.5``, ``to=1``)
DEFAULTS = {
    "normal_": (0.0, 1.0),
    "uniform_": (0.0, 1.0),
    "log_normal_": (1.0, 2.0),
    "exponential_": (1.0,),
    "bernoulli_": (0.5,),
}


def with_defaults(kind: str, params: Any) -> list:
    """``params`` followed by the defaults of those not given."""
    return [*params, *DEFAULTS.get(kind, ())[len(params) :]]


def check_numbers(kind: str, params: tuple) -> None:
    """Raise eager's error for parameters of a draw of ``kind`` given as numbers that eager
    refuses (a negative standard deviation...)."""
    ps = [float(p) if isinstance(p, (int, float)) else None for p in with_defaults(kind, params)]
    first, second = (ps + [None, None])[:2]
    if kind == "bernoulli_" and first is not None and not 0 <= first <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={first:g}")
    if kind == "normal_" and second is not None and not second >= 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {second:g}")
    if kind == "log_normal_" and second is not None and not second > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={second:g}")
    if kind == "exponential_" and first is not None and not 0 < first < float("inf"):
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={first:g}")
    if kind == "uniform_" and first is not None and second is not None and first > second:
        raise RuntimeError(
            f"uniform_ expects to return a [from, to) range, but found from={first:g} > "
            f"to={second:g}"
        )


def lower_random(
    key: Any, *inputs: Any, kind: str, index: int, shape: Any, dtype: Any, params: Any
) -> Any:
    """Random ops: ``key`` is the epoch's ``(seed, epoch)``, ``index`` the op's number in it."""
    k = jax.random.fold_in(key.astype(jnp.uint32), index)
    shape = tuple(shape)
    jdt = jax_dtype(dtype)
    fdt = jdt if jnp.issubdtype(jdt, jnp.floating) else jnp.float32
    ps = with_defaults(kind, [inputs[p.i - 1] if hasattr(p, "i") else p for p in params])
    if kind == "normal_":
        mean, std = ps[:2]
        if hasattr(std, "dtype"):  # a tensor's (a number's was checked when it was drawn)
            check(NORMAL_STD, ~(std >= 0))
        out = mean + std * jax.random.normal(k, shape, fdt)
    elif kind == "uniform_":
        lo, hi = ps[:2]
        out = jax.random.uniform(k, shape, fdt, lo, hi)
    elif kind in ("bernoulli_", "bernoulli_tensor"):
        p = ps[0]
        if hasattr(p, "dtype"):
            probability(BERNOULLI_P, p)
        out = jax.random.uniform(k, shape, jnp.float32) < p
    elif kind == "exponential_":
        out = jax.random.exponential(k, shape, fdt) / ps[0]
    elif kind == "log_normal_":
        mean, std = ps[:2]
        out = jnp.exp(mean + std * jax.random.normal(k, shape, fdt))
    else:  # random_
        lo, hi = (0, 2**24) if not ps else ((0, ps[0]) if len(ps) == 1 else (ps[0], ps[1]))
        out = jax.random.randint(k, shape, lo, hi if hi is not None else 2**24)
    return out.astype(jdt)
