"""Device dtypes: the torch <-> JAX dtype map, torch's conversion rules, and the x64 scope.

Every torch dtype the device supports is stored as the same-width JAX dtype: ``int64`` as
``int64`` and ``float64`` as ``float64``, never narrowed. JAX narrows 64-bit values unless x64 is
enabled, so the runtime does everything that creates or computes device values (transfers,
lowering, compiling, executing) inside ``x64()``, a thread-local scope (``jax.enable_x64``) that
leaves JAX's global setting, and plain JAX code in the same process, alone. Lowerings therefore
never rely on JAX's default dtypes: a value's dtype is always the one torch's meta kernel
predicted (the executor casts every result to it with ``cast``).

``cast`` converts like eager PyTorch on x86 CPUs, where XLA's ``convert`` differs: a float
converted to an integer type of at most 32 bits goes through int32 and wraps (``-1.0`` ->
``uint8`` 255, ``300.0`` -> ``uint8`` 44), out-of-range floats and NaN become the most negative
int32/int64 (XLA saturates and sends NaN to 0); a float past ``float8_e4m3fn``'s range
becomes +-448 where this torch's kernel saturates (``e4m3fn_saturates``), where XLA gives NaN.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax._src.lax.lax import _convert_element_type  # a row of xlacache.jax_internals

DTYPES: dict[torch.dtype, Any] = {
    torch.float64: jnp.float64,
    torch.float32: jnp.float32,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e4m3fnuz: jnp.float8_e4m3fnuz,
    torch.float8_e5m2: jnp.float8_e5m2,
    torch.float8_e5m2fnuz: jnp.float8_e5m2fnuz,
    torch.int64: jnp.int64,
    torch.int32: jnp.int32,
    torch.int16: jnp.int16,
    torch.int8: jnp.int8,
    torch.uint64: jnp.uint64,
    torch.uint32: jnp.uint32,
    torch.uint16: jnp.uint16,
    torch.uint8: jnp.uint8,
    torch.bool: jnp.bool_,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
}
# numpy has no such dtype: torch hands these to numpy as same-width integers (a bit view)
BIT_VIEWS: dict[torch.dtype, torch.dtype] = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e4m3fnuz: torch.uint8,
    torch.float8_e5m2: torch.uint8,
    torch.float8_e5m2fnuz: torch.uint8,
}


def jax_dtype(dtype: torch.dtype) -> Any:
    """The device dtype of a torch dtype (the same width); TypeError if there is none."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise TypeError(f"xlacache.lazy: dtype {dtype} is not supported on the device") from None


def x64() -> contextlib.AbstractContextManager:
    """The scope in which the runtime creates, lowers, compiles and runs device values."""
    return jax.enable_x64(True)


_INT_MIN = {32: np.iinfo(np.int32).min, 64: np.iinfo(np.int64).min}


def cast(x: Any, dtype: Any) -> Any:
    """``x.astype(dtype)`` with eager PyTorch's conversion rules (see the module docstring)."""
    dtype = np.dtype(dtype)
    src = np.dtype(x.dtype)
    if src == dtype:
        return x
    if dtype == _E4M3FN and jnp.issubdtype(src, jnp.floating):
        return _to_e4m3fn(x)
    if dtype.kind not in "iu" or not jnp.issubdtype(src, jnp.inexact):  # bfloat16's kind is "V"
        return x.astype(dtype)
    if src.kind == "c":
        x = jnp.real(x)
    bits = 64 if dtype.itemsize == 8 else 32
    wide = jnp.float64 if bits == 64 or src.itemsize == 8 else jnp.float32
    xf = x.astype(wide)
    limit = float(2 ** (bits - 1))
    bad = jnp.isnan(xf) | (xf >= limit) | (xf < -limit)
    via = jnp.int64 if bits == 64 else jnp.int32
    i = jnp.where(bad, jnp.asarray(_INT_MIN[bits], via), xf.astype(via))
    return i.astype(dtype)


_E4M3FN = np.dtype(jnp.float8_e4m3fn)
_E4M3FN_MAX = 448.0


def e4m3fn_saturates() -> tuple[bool, bool]:
    """Whether this torch's conversion to ``float8_e4m3fn`` saturates a finite value past its
    range, and an infinity, to +-448 (CPU in torch 2.13, and CUDA), rather than making it
    NaN (earlier CPU releases, and XLA's ``convert``): measured on eager's kernel."""
    out = torch.tensor([1000.0, float("inf")]).to(torch.float8_e4m3fn).float().tolist()
    return out[0] == _E4M3FN_MAX, out[1] == _E4M3FN_MAX


# measured at import, where no mode (a fake tensor mode while Dynamo compiles) is active
_E4M3FN_SATURATES = e4m3fn_saturates()


def _to_e4m3fn(x: Any) -> Any:
    finite, infinite = _E4M3FN_SATURATES
    if finite:
        x = jnp.where(jnp.isfinite(x), jnp.clip(x, -_E4M3FN_MAX, _E4M3FN_MAX), x)
    if infinite:
        x = jnp.where(jnp.isinf(x), jnp.sign(x) * _E4M3FN_MAX, x)
    return x.astype(_E4M3FN)


_TORCH = {np.dtype(v): k for k, v in DTYPES.items()}
_WRAPPED = {bool: torch.bool, int: torch.int64, complex: torch.complex64}


def _category(dtype: torch.dtype) -> int:
    return (
        3 if dtype.is_complex else 2 if dtype.is_floating_point else 0 if dtype == torch.bool else 1
    )


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    """c10's ``combine_categories``: a lower-priority operand only lifts the category."""
    if higher is None:
        return lower
    if lower is None or _category(higher) >= _category(lower):
        return higher
    if higher.is_floating_point and lower.is_complex:
        return torch.promote_types(higher, torch.complex64)
    return torch.promote_types(higher, lower)


def weak_int(x: Any) -> Any:
    """``x`` (a whole number) as an int64 that JAX and ``result_type`` treat as a Python int
    (weakly typed): an int graph input keeps the meaning of the int it stands for, which a
    ``uint8`` tensor converts to its own dtype (``-1`` -> 255) and a division does not."""
    return _convert_element_type(x, jnp.dtype(jnp.int64), weak_type=True)


def _weak(x: Any) -> bool:
    return bool(getattr(getattr(x, "aval", None), "weak_type", False))


def result_dtype(*xs: Any) -> Any:
    """torch's result type (``TensorIterator``) of jax arrays and Python scalars: tensors with
    dimensions first, then 0-d ones (graph-input floats among them), then Python numbers (and
    the int graph inputs that stand for them, ``weak_int``)."""
    groups: list[torch.dtype | None] = [None, None, None]
    for x in xs:
        if isinstance(x, (jax.Array, np.ndarray)):
            if _weak(x):
                dt, g = torch.int64, 2
            else:
                dt, g = _TORCH[np.dtype(x.dtype)], 0 if x.ndim else 1
        elif type(x) in _WRAPPED:
            dt, g = _WRAPPED[type(x)], 2
        elif isinstance(x, float):
            dt, g = torch.get_default_dtype(), 2
        else:
            continue
        groups[g] = dt if groups[g] is None else torch.promote_types(groups[g], dt)
    out = _combine(groups[0], _combine(groups[1], groups[2]))
    return None if out is None else DTYPES[out]


def promote(*xs: Any) -> list[Any]:
    """``xs`` with their arrays cast to torch's result type, as eager computes binary ops (JAX's
    own promotion differs: int64 with a Python float is float64 under x64, for one)."""
    dt = result_dtype(*xs)
    return [
        cast(x, dt) if isinstance(x, jax.Array) and x.dtype != dt and not _weak(x) else x
        for x in xs
    ]


def floating(x: Any) -> Any:
    """``x`` as torch's float ops see it: integers and bools as the default float dtype."""
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return x.astype(DTYPES[torch.get_default_dtype()])
