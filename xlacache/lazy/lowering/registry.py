"""The lowering table (aten op -> JAX function), its dtype map and helpers shared by op families."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch

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


Fn = Callable[..., Any]


def registrar(table: dict[Any, Fn], what: str) -> Callable[..., Callable[[Fn], Fn]]:
    """A decorator factory ``deco(*ops)(fn)`` filling ``table``; each op is registered once."""

    def register(*ops: Any) -> Callable[[Fn], Fn]:
        def deco(fn: Fn) -> Fn:
            for op in ops:
                if op in table:
                    raise ValueError(f"xlacache.lazy: {op} already has {what}")
                table[op] = fn
            return fn

        return deco

    return register


reg = registrar(LOWERINGS, "a lowering")  # ``@reg(aten.op.overload, ...)``


def norm_dim(dim: int, ndim: int) -> int:
    return dim % ndim if ndim else 0


def norm_dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted(norm_dim(d, ndim) for d in dim))


def jdt(dtype: Any) -> Any:
    return None if dtype is None else jax_dtype(dtype)


def upcast(x: Any) -> Any:
    """Upcast low-precision floats for reductions/normalizations."""
    return x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x


def as_shape(size: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in size)


def scaled(b: Any, alpha: Any) -> Any:
    return b if isinstance(alpha, int) and alpha == 1 else b * alpha
