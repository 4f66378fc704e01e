"""Elementary functions whose XLA expansion loses accuracy that eager's kernels keep.

* ``exp2(x)`` is ``exp(x * ln 2)`` in XLA: the product's rounding is amplified by ``x`` (5 ulp
  at 43). Here ``2**floor(x)`` scales exactly and ``exp`` sees only the fraction.
* ``sinh``/``cosh`` are ``exp(x + log(1/2))`` sums in XLA: the sum's rounding costs 12 ulp at
  50 (24 near 88). Here ``e = exp(|x| / 2)`` and ``e * (e / 2)``, which neither rounds the
  argument nor overflows before the result does; below 1, ``sinh``'s series.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp

# past every float's exponent range: clipping there keeps exp2's value (0 or inf) and the
# exponent an int32
_EXP2_LIMIT = 1100.0


def _real_only(exact: Any, xla: Any) -> Any:
    """``exact`` for real floats; complex values keep XLA's (complex) function."""
    return lambda x: xla(x) if jnp.iscomplexobj(x) else exact(x)


def _exp2(x: Any) -> Any:
    xc = jnp.clip(x, -_EXP2_LIMIT, _EXP2_LIMIT)
    n = jnp.floor(xc)
    scaled = jnp.ldexp(jnp.exp((xc - n) * jnp.log(jnp.asarray(2, x.dtype))), n.astype(jnp.int32))
    return jnp.where(jnp.isnan(x), x, scaled)


# below this, exp(|x|) is finite in every float dtype: (e +- 1/e) / 2 directly
_EXP_FINITE = 88.0


def _halves(x: Any) -> tuple[Any, Any]:
    """``exp(|x|) / 2`` and ``exp(-|x|) / 2``: from ``e = exp(|x|)`` where that is finite,
    else as ``e * (e / 2)`` with ``e = exp(|x| / 2)``, which overflows only with the result."""
    t = jnp.abs(x)
    e = jnp.exp(jnp.minimum(t, _EXP_FINITE))
    h = jnp.exp(t * 0.5)
    big = jnp.where(t < _EXP_FINITE, e * 0.5, h * (h * 0.5))
    return big, 0.25 / big


def _cosh(x: Any) -> Any:
    big, small = _halves(x)
    return big + small


# sinh's Taylor coefficients 1/3!, 1/5!, ... 1/21!: below 1, its series to x**21 is exact to
# float64's last bit (XLA's expm1-based sinh is 6 ulp off near 0.5)
_SINH_SERIES = tuple(1.0 / math.factorial(k) for k in range(21, 2, -2))


def _sinh(x: Any) -> Any:
    x2 = x * x
    series = jnp.zeros_like(x)
    for c in _SINH_SERIES:
        series = series * x2 + c
    near = x + x * x2 * series
    big, small = _halves(x)
    return jnp.where(jnp.abs(x) < 1, near, jnp.sign(x) * (big - small))


exp2 = _real_only(_exp2, jnp.exp2)
sinh = _real_only(_sinh, jnp.sinh)
cosh = _real_only(_cosh, jnp.cosh)
