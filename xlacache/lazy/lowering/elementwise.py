"""Elementwise ops: arithmetic, comparisons, logical/bitwise, rounding and unary math.

Binary ops compute in torch's result type (``dtypes.promote``), not JAX's: eager promotes a
tensor with a 0-d tensor or a Python number differently, and under x64 JAX would compute int64
with a Python float in float64. Float math on integers works on the default float dtype
(``dtypes.floating``), as eager's ``sin(int_tensor)`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from . import accurate
from .checks import ZERO_DIVISION, check, checked
from .dtypes import floating, promote, result_dtype
from .registry import (
    LOW_FLOATS,
    LOWERINGS,
    argument_check,
    in_opmath,
    real_sign,
    reg_opmath,
    scaled,
)
from .registry import reg as reg_plain

aten = torch.ops.aten
reg = reg_opmath  # bfloat16/float16 math in float32, as eager
prims = torch.ops.prims
Fn = Callable[..., Any]


def binary(fn: Fn) -> Fn:
    """``fn`` on its first two arguments cast to torch's result type."""

    def lowered(a: Any, b: Any, *rest: Any, **kw: Any) -> Any:
        a, b = promote(a, b)
        return fn(a, b, *rest, **kw)

    return lowered


def float_binary(fn: Fn) -> Fn:
    """``fn`` on its first two arguments promoted, integers as the default float dtype."""

    def lowered(a: Any, b: Any, *rest: Any, **kw: Any) -> Any:
        a, b = promote(a, b)
        return fn(floating(a) if isinstance(a, jax.Array) else a, b, *rest, **kw)

    return lowered


def float_unary(fn: Fn) -> Fn:
    return lambda x, *a, **k: fn(floating(x), *a, **k)


def _ovs(name: str, *overloads: str) -> list[Any]:
    packet = getattr(aten, name)
    return [getattr(packet, o) for o in overloads if o in packet.overloads()]


reg(aten.add.Tensor, aten.add.Scalar)(binary(lambda a, b, alpha=1: a + scaled(b, alpha)))
reg(aten.sub.Tensor, aten.sub.Scalar)(binary(lambda a, b, alpha=1: a - scaled(b, alpha)))
reg(aten.rsub.Tensor, aten.rsub.Scalar)(binary(lambda a, b, alpha=1: b - scaled(a, alpha)))
reg(aten.mul.Tensor, aten.mul.Scalar)(binary(lambda a, b: a * b))


def _by_zero(a: Any, b: Any) -> None:
    """Eager raises ZeroDivisionError for an integer division or remainder by zero (by a
    divisor that is zero once converted to the dividend's type: 2**20 for an int8 tensor)."""
    dt = jnp.result_type(a, b)
    if jnp.issubdtype(dt, jnp.integer):
        check(ZERO_DIVISION, lax.convert_element_type(jnp.asarray(b), dt) == 0)


def _int_checked(fn: Fn) -> Fn:
    def run(a: Any, b: Any) -> Any:
        _by_zero(a, b)
        return fn(a, b)

    return run


def _integers(a: Any, b: Any) -> tuple[Any, Any] | None:
    """``a`` and ``b`` as arrays of their integer result type (a number converted, wrapping,
    as eager converts it), or None when the result type is not an integer one."""
    dt = result_dtype(a, b)
    if dt is None or not jnp.issubdtype(dt, jnp.integer):
        return None
    a, b = (lax.convert_element_type(jnp.asarray(x), dt) for x in (a, b))
    _by_zero(a, b)
    return a, b


def _div_mode(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    a, b = promote(a, b)
    if rounding_mode is None:
        return jnp.true_divide(floating(jnp.asarray(a)), b)
    if rounding_mode == "floor":
        return _floor_divide(a, b)
    ints = _integers(a, b)
    if ints is not None:  # truncates, exactly (a float quotient would round int64)
        return lax.div(*jnp.broadcast_arrays(*ints))
    return jnp.trunc(jnp.true_divide(a, b))


reg(aten.div.Tensor, aten.div.Scalar)(lambda a, b: _div_mode(a, b))
reg(prims.div.default)(  # truncates integers
    lambda a, b: _div_mode(a, b, "trunc" if jnp.issubdtype(a.dtype, jnp.integer) else None)
)


def _floor_divide(a: Any, b: Any, rounded: Fn = lambda x: x) -> Any:
    """Eager's ``div_floor_floating`` (floor of the exact quotient, via ``fmod``), each step's
    result ``rounded`` as eager's kernel rounds it; integers' floor division."""
    ints = _integers(a, b)
    if ints is not None:
        return jnp.floor_divide(*ints)
    mod = jnp.fmod(a, b)
    div = rounded(rounded(a - mod) / b)
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), rounded(div - 1), div)
    fl = jnp.floor(div)
    fl = jnp.where(rounded(div - fl) > 0.5, rounded(fl + 1), fl)
    return jnp.where(b == 0, a / b, jnp.where(div == 0, jnp.copysign(0.0, a / b), fl))


@reg_plain(aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default)
@reg_plain(aten.floor_divide.Scalar)
def _rounding_division(a: Any, b: Any, rounding_mode: str | None = "floor") -> Any:
    """Division with a rounding mode. Eager computes a division by a 16-bit float tensor in
    that dtype, rounding after each operation (``trunc(a / b)`` rounds the quotient first; a
    number divided converts to the dtype first), and a division by a number in float32, as it
    computes every other op on 16-bit floats."""
    low = result_dtype(a, b)
    by_tensor = getattr(b, "ndim", 0) > 0 and b.dtype == low  # a 0-d divisor: eager's scalar
    if low not in LOW_FLOATS or rounding_mode is None or not by_tensor:
        return _div_mode(*in_opmath((a, b)), rounding_mode)

    def rounded(x: Any) -> Any:
        return jnp.asarray(x).astype(low).astype(jnp.float32)

    a, b = rounded(a), rounded(b)
    if rounding_mode == "trunc":
        return jnp.trunc(rounded(a / b))
    return _floor_divide(*jnp.broadcast_arrays(a, b), rounded)


reg(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)(
    binary(_int_checked(jnp.remainder))
)
reg(aten.fmod.Tensor, aten.fmod.Scalar)(binary(_int_checked(jnp.fmod)))
checked(
    aten.div.Tensor_mode,
    aten.div.Scalar_mode,
    aten.floor_divide.default,
    aten.floor_divide.Scalar,
    aten.remainder.Tensor,
    aten.remainder.Scalar,
    aten.remainder.Scalar_Tensor,
    aten.fmod.Tensor,
    aten.fmod.Scalar,
)


@argument_check(aten.pow.Tensor_Scalar)
def _no_negative_integer_power(base: torch.Tensor, exponent: Any) -> None:
    integral = not (base.dtype.is_floating_point or base.dtype.is_complex)
    if integral and type(exponent) is int and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _is_bool(x: Any) -> bool:
    return type(x) is bool or (isinstance(x, torch.Tensor) and x.dtype == torch.bool)


@argument_check(aten.add.Tensor, aten.add.Scalar)
def _alpha(a: Any, b: Any, alpha: Any = 1) -> None:
    """Eager's ``alpha_check``, whose bool case the meta kernels lack."""
    if type(alpha) is bool and not (_is_bool(a) and _is_bool(b)):
        raise RuntimeError("Boolean alpha only supported for Boolean results.")


@argument_check(aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar)
def _no_bool_subtraction(a: Any, b: Any, alpha: Any = 1) -> None:
    """Eager's ``sub_check``: the meta kernels refuse two bool tensors, eager refuses one (a
    Python ``True`` too)."""
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    _alpha(a, b, alpha)


@reg(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(a: Any, b: Any) -> Any:
    dt = result_dtype(a, b)
    a, b = promote(a, b)
    if not jnp.issubdtype(dt, jnp.integer):
        return jnp.power(a, b)
    # eager's powi: square-and-multiply, wrapping like the integer type; negative exponents
    # give 0 except for bases 1 and -1
    a, b = jnp.broadcast_arrays(jnp.asarray(a, dt), jnp.asarray(b, dt))

    def step(_: Any, st: tuple) -> tuple:
        r, base, e = st
        return jnp.where(e & 1, r * base, r), base * base, e >> 1

    init = (jnp.ones_like(a), a, jnp.where(b < 0, 0, b))
    r = lax.fori_loop(0, jnp.iinfo(a.dtype).bits, step, init)[0]
    neg = jnp.where(a == 1, 1, jnp.where(a == -1, jnp.where(b % 2 == 0, 1, -1), 0))
    return jnp.where(b < 0, neg.astype(a.dtype), r)


reg(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar, aten.float_power.Scalar)(
    lambda a, b: jnp.power(
        *(
            v.astype(jnp.complex128 if jnp.iscomplexobj(v) else jnp.float64)
            if isinstance(v, jax.Array)
            else v
            for v in (a, b)
        )
    )
)
reg(aten.maximum.default)(binary(jnp.maximum))
reg(aten.minimum.default)(binary(jnp.minimum))
reg(aten.fmax.default, prims.fmax.default)(binary(jnp.fmax))
reg(aten.fmin.default, prims.fmin.default)(binary(jnp.fmin))
reg(aten.atan2.default)(float_binary(jnp.arctan2))
reg(aten.hypot.default, prims.hypot.default)(float_binary(jnp.hypot))
reg(aten.copysign.Tensor, aten.copysign.Scalar)(float_binary(jnp.copysign))
# the neighbour in the values' own dtype: never computed in float32
reg_plain(aten.nextafter.default, prims.nextafter.default)(binary(jnp.nextafter))
reg(aten.logaddexp.default)(float_binary(jnp.logaddexp))
reg(aten.logaddexp2.default)(float_binary(jnp.logaddexp2))
reg(aten.heaviside.default)(binary(lambda x, v: jnp.where(x == 0, v, (x > 0).astype(x.dtype))))
reg(aten.gcd.default)(binary(jnp.gcd))
reg(aten.lcm.default)(binary(jnp.lcm))


@reg(*_ovs("xlogy", "Tensor", "Scalar_Self", "Scalar_Other"))
def _xlogy(x: Any, y: Any) -> Any:
    x, y = promote(x, y)
    x, y = floating(jnp.asarray(x)), floating(jnp.asarray(y))
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log(y)))


for _n, _f2 in [
    ("eq", jnp.equal),
    ("ne", jnp.not_equal),
    ("lt", jnp.less),
    ("le", jnp.less_equal),
    ("gt", jnp.greater),
    ("ge", jnp.greater_equal),
]:
    _p = getattr(aten, _n)
    reg(_p.Tensor, _p.Scalar)(binary(_f2))
for _n, _f2 in [
    ("logical_and", jnp.logical_and),
    ("logical_or", jnp.logical_or),
    ("logical_xor", jnp.logical_xor),
]:
    reg(getattr(aten, _n).default)(_f2)
for _n, _f2 in [
    ("bitwise_and", jnp.bitwise_and),
    ("bitwise_or", jnp.bitwise_or),
    ("bitwise_xor", jnp.bitwise_xor),
]:
    reg(*_ovs(_n, "Tensor", "Scalar", "Scalar_Tensor"))(binary(_f2))


def _shift(left: bool) -> Fn:
    def fn(a: Any, b: Any) -> Any:
        dt = result_dtype(a, b)
        a, b = jnp.broadcast_arrays(*(jnp.asarray(v, dt) for v in promote(a, b)))
        bits = jnp.iinfo(a.dtype).bits
        unsigned = jnp.issubdtype(a.dtype, jnp.unsignedinteger)  # eager: a logical shift
        right = lax.shift_right_logical if unsigned else lax.shift_right_arithmetic
        out = lax.shift_left(a, b) if left else right(a, b)
        big = (b < 0) | (b >= bits)  # eager: shifting by the width or more gives 0 (or -1)
        fill = jnp.zeros_like(out) if left else jnp.where(a < 0, -1, 0).astype(a.dtype)
        return jnp.where(big, fill, out)

    return fn


reg(*_ovs("bitwise_left_shift", "Tensor", "Tensor_Scalar", "Scalar_Tensor"))(_shift(True))
reg(*_ovs("bitwise_right_shift", "Tensor", "Tensor_Scalar", "Scalar_Tensor"))(_shift(False))
reg(aten.__lshift__.Tensor, aten.__lshift__.Scalar)(_shift(True))
reg(aten.__rshift__.Tensor, aten.__rshift__.Scalar)(_shift(False))
reg(aten.bitwise_not.default)(jnp.invert)


def _where(c: Any, a: Any, b: Any) -> Any:
    a, b = promote(a, b)
    return jnp.where(c, a, b)


reg(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)(_where)
reg(prims.where.default)(_where)


@reg(aten.clamp.default, aten.clamp.Tensor)
def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    x, lo, hi = promote(x, min, max)
    if lo is not None:
        x = jnp.where(jnp.isnan(x), x, jnp.maximum(x, lo))
    if hi is not None:
        x = jnp.where(jnp.isnan(x), x, jnp.minimum(x, hi))
    return x


reg(aten.clamp_min.default, aten.clamp_min.Tensor)(lambda x, m: _clamp(x, m, None))
reg(aten.clamp_max.default, aten.clamp_max.Tensor)(lambda x, m: _clamp(x, None, m))


@reg(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(a: Any, b: Any, w: Any) -> Any:
    a, b, w = promote(a, b, w)
    return jnp.where(jnp.abs(w) < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


@reg(aten.addcmul.default)
def _addcmul(s: Any, a: Any, b: Any, value: Any = 1) -> Any:
    s, a, b = promote(s, a, b)
    return s + scaled(a * b, value)


@reg(aten.addcdiv.default)
def _addcdiv(s: Any, a: Any, b: Any, value: Any = 1) -> Any:
    s, a, b = promote(s, a, b)
    return s + scaled(a / b, value)


@reg_plain(aten.nan_to_num.default)  # in the input's dtype: an infinity becomes its largest
def _nan_to_num(x: Any, nan: Any = None, posinf: Any = None, neginf: Any = None) -> Any:
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


def _round(x: Any, decimals: int = 0) -> Any:
    if decimals == 0 or not jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.round(x)
    ten = float(10 ** abs(decimals))  # eager: nearbyint(x * 10^d) / 10^d, or (x / 10^-d) * 10^-d
    return jnp.round(x * ten) / ten if decimals > 0 else jnp.round(x / ten) * ten


reg(aten.round.default, aten.round.decimals)(_round)


def _signbit(x: Any) -> Any:
    if jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.signbit(x)
    return x < 0 if jnp.issubdtype(x.dtype, jnp.signedinteger) else jnp.zeros(x.shape, bool)


def _frac(x: Any) -> Any:
    return x - jnp.trunc(x)


def _sign(x: Any) -> Any:
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        a = jnp.abs(x)
        return jnp.where(a == 0, 0, x / jnp.where(a == 0, 1, a)).astype(x.dtype)
    if x.dtype == jnp.bool_:
        return x
    if jnp.issubdtype(x.dtype, jnp.floating):  # NaN and -0.0 give 0.0, as in eager
        return real_sign(x)
    return jnp.sign(x)


_SAME = {  # result in the input's dtype
    "neg": jnp.negative,
    "abs": jnp.abs,
    "sign": _sign,
    "sgn": _sign,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "trunc": jnp.trunc,
    "fix": jnp.trunc,
    "frac": _frac,
    "square": jnp.square,
    "logical_not": jnp.logical_not,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
    "isposinf": jnp.isposinf,
    "isneginf": jnp.isneginf,
    "signbit": _signbit,
    "clone": lambda x, memory_format=None: x,
    "alias": lambda x: x,
    "lift_fresh_copy": lambda x: x,
    "positive": lambda x: x,
}
_FLOAT = {  # float math: integers are computed as the default float dtype
    "exp": jnp.exp,
    "exp2": accurate.exp2,
    "log": jnp.log,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "sinh": accurate.sinh,
    "cosh": accurate.cosh,
    "tanh": jnp.tanh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "sigmoid": jax.nn.sigmoid,
    "erf": jax.scipy.special.erf,
    "erfc": jax.scipy.special.erfc,
    "erfinv": jax.scipy.special.erfinv,
    "reciprocal": jnp.reciprocal,
    "sinc": jnp.sinc,
    "deg2rad": jnp.deg2rad,
    "rad2deg": jnp.rad2deg,
}
for _n, _f1 in _SAME.items():
    reg(getattr(aten, _n).default)(_f1)
for _n, _f1 in _FLOAT.items():
    reg(getattr(aten, _n).default)(float_unary(_f1))
for _n in ("abs", "neg", "signbit", "erfc", "asinh", "acosh", "atanh"):
    reg(getattr(prims, _n).default)(_SAME.get(_n) or float_unary(_FLOAT[_n]))


@reg(aten.logit.default)
def _logit(x: Any, eps: Any = None) -> Any:
    x = floating(x)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x))


@reg(aten.frexp.Tensor)
def _frexp(x: Any) -> Any:
    m, e = jnp.frexp(x)
    return m, e.astype(jnp.int32)


def _fma(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` (Dynamo's ``addcmul_``), the product exact in float64 for float32."""
    a, b, c = promote(a, b, c)
    dt = jnp.result_type(a, c)
    if dt == jnp.float32:
        wide = jnp.float64
        return (a.astype(wide) * jnp.asarray(b, wide) + jnp.asarray(c, wide)).astype(dt)
    return a * b + c


def register_fma() -> bool:
    """Lower ``prims.fma`` once it exists: Dynamo writes ``addcmul_`` as it, and
    ``torch._inductor.inductor_prims`` (1 s to import) defines it. True if this registered it."""
    fma = getattr(getattr(torch.ops.prims, "fma", None), "default", None)
    if fma is None or fma in LOWERINGS:
        return False
    reg_plain(fma)(_fma)
    return True
