"""Eager's range check of a Python number converted to a tensor's dtype (``c10::overflows``).

Eager refuses ``int8_tensor.fill_(300)`` ("value cannot be converted to type int8_t without
overflow") where a graph would wrap the value to 44. The check depends on the value, which a
graph input does not fix (``record.dynamic_int``), so it runs as each op is recorded, for the
ops and arguments eager checks (``SCALAR_CONVERSIONS``); an add or a multiply by a Python
number converts it unchecked, as eager does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten

EXACT = "exact"  # converted to the result's dtype
STRICT = "strict"  # the same, and a negative number never fits an unsigned dtype
OPMATH = "opmath"  # converted to the dtype the kernel computes in (float32 for 16-bit floats)
WIDE_ONLY = "wide-only"  # like EXACT, but a 16-bit float takes any value (inf when too large)
TRUNCATED = "truncated"  # like EXACT, an integer dtype's float limit truncated first

SCALAR_CONVERSIONS: dict[Any, dict[str, str]] = {
    aten.fill.Scalar: {"value": EXACT},
    aten.full.default: {"fill_value": EXACT},
    aten.full_like.default: {"fill_value": EXACT},
    aten.new_full.default: {"fill_value": EXACT},
    aten.masked_fill.Scalar: {"value": EXACT},
    aten.scatter.value: {"value": EXACT},
    aten.scatter.value_reduce: {"value": EXACT},
    aten.index_fill.int_Scalar: {"value": EXACT},
    aten.clamp.default: {"min": EXACT, "max": EXACT},
    aten.clamp_min.default: {"min": EXACT},
    aten.clamp_max.default: {"max": EXACT},
    aten.hardtanh.default: {"min_val": TRUNCATED, "max_val": TRUNCATED},
    aten.threshold.default: {"threshold": OPMATH, "value": EXACT},
    aten.constant_pad_nd.default: {"value": STRICT},
    aten.addcmul.default: {"value": OPMATH},
    aten.addcdiv.default: {"value": OPMATH},
    aten.lerp.Scalar: {"weight": OPMATH},
    aten.scalar_tensor.default: {"s": WIDE_ONLY},
    aten.linspace.default: {"start": EXACT, "end": EXACT},
    aten.logspace.default: {"start": EXACT, "end": EXACT},
}

_HALVES = (torch.float16, torch.bfloat16)
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_C10_NAMES = {
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.int16: "int16_t",
    torch.int32: "int",
    torch.int64: "int64_t",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def overflows(value: Any, dtype: torch.dtype, strict_unsigned: bool = False) -> bool:
    """``c10::overflows<dtype>(value)``: does a Python int or float fall outside ``dtype``?"""
    t = type(value)
    if (t is not int and t is not float) or dtype is torch.bool:
        return False
    dt = _REAL.get(dtype, dtype)
    if dt.is_floating_point:
        if t is float and not math.isfinite(value):
            return False  # inf and NaN are floats' values
        info: Any = torch.finfo(dt)
        return value < info.min or value > info.max
    if t is float and math.isnan(value):
        return True
    info = torch.iinfo(dt)
    if info.min == 0 and not strict_unsigned and t is int:  # negatives wrap, as in C
        return value > info.max or -value > info.max
    return value < info.min or value > info.max


_CHECKED: dict[Any, tuple[tuple[int, str, str], ...]] = {}  # op -> (position, name, mode)


def check_scalar_conversions(func: Any, args: tuple, kwargs: dict, dtype: torch.dtype) -> None:
    """Raise eager's error where ``func`` converts a number among ``args``/``kwargs`` that
    does not fit its result's ``dtype``."""
    checked = _CHECKED.get(func)
    if checked is None:
        modes = SCALAR_CONVERSIONS[func]
        schema = func._schema.arguments
        checked = _CHECKED[func] = tuple(
            (i, a.name, modes[a.name]) for i, a in enumerate(schema) if a.name in modes
        )
    for i, name, mode in checked:
        value = args[i] if i < len(args) else kwargs.get(name)
        if mode == WIDE_ONLY and dtype in _HALVES:
            continue
        target = torch.float32 if mode == OPMATH and dtype in _HALVES else dtype
        if mode == TRUNCATED and type(value) is float and math.isfinite(value):
            value = value if target.is_floating_point else math.trunc(value)
        if overflows(value, target, strict_unsigned=mode == STRICT):
            c10 = _C10_NAMES.get(target, str(target))
            raise RuntimeError(f"value cannot be converted to type {c10} without overflow")
