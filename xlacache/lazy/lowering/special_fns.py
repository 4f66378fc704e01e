"""Special functions: the gamma, error-function, Bessel and zeta families (``jax.scipy.special``)
and the orthogonal polynomials of ``torch.special``, which follow eager's recurrences and
shortcuts (ATen's ``Math.h``) so that they round the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import jax.scipy.special as jss
import torch
from jax import lax

from .dtypes import floating, promote
from .registry import reg_opmath

aten = torch.ops.aten
reg = reg_opmath  # bfloat16/float16 math in float32, as eager
prims = torch.ops.prims
Fn = Callable[..., Any]


def _unary(fn: Fn) -> Fn:
    return lambda x: fn(floating(x))


def _digamma(x: Any) -> Any:
    # eager: digamma(+-0) is -+inf, and nan at the negative integers
    r = jss.digamma(x)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), r)


def _spherical_j0(x: Any) -> Any:
    small = jnp.abs(x) < 0.5
    x2 = x * x
    series = 1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (1 / 362880))))
    safe = jnp.where(small, 1, x)
    return jnp.where(small, series, jnp.where(jnp.isinf(x), 0, jnp.sin(safe) / safe))


for _ops, _fn in [
    ((aten.lgamma.default, prims.lgamma.default), jss.gammaln),
    ((aten.digamma.default, prims.digamma.default), _digamma),
    ((aten.i0.default, aten.special_modified_bessel_i0.default, prims.bessel_i0.default), jss.i0),
    ((aten.special_i0e.default, prims.bessel_i0e.default), jss.i0e),
    ((aten.special_i1.default, aten.special_modified_bessel_i1.default), jss.i1),
    ((prims.bessel_i1.default,), jss.i1),
    ((aten.special_i1e.default, prims.bessel_i1e.default), jss.i1e),
    ((aten.special_ndtri.default, prims.ndtri.default), jss.ndtri),
    ((aten.special_ndtr.default,), jss.ndtr),
    ((aten.special_log_ndtr.default,), jss.log_ndtr),
    # jax.scipy.special.erfcx came in jax 0.10.1: before, these ops take the fallback path
    ((aten.special_erfcx.default, prims.erfcx.default), getattr(jss, "erfcx", None)),
    ((aten.special_entr.default,), jss.entr),
    ((aten.special_spherical_bessel_j0.default, prims.spherical_bessel_j0.default), _spherical_j0),
]:
    if _fn is not None:
        reg(*_ops)(_unary(_fn))


def _trigamma(x: Any) -> Any:
    """Eager's trigamma (in the input's precision)."""
    neg = x < 0.5
    s = jnp.sin(jnp.pi * x)
    result = jnp.where(neg, -(jnp.pi * jnp.pi) / (s * s), jnp.zeros_like(x))
    x = jnp.where(neg, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return jnp.where(neg, -result, result)


_ZETA_A = (
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
)
_MACHEP = 1.11022302462515654042e-16


def _zeta(x: Any, q: Any) -> Any:
    """Eager's Hurwitz zeta (Cephes, in float64 as eager's CPU kernel accumulates)."""
    dtype = x.dtype
    x, q = jnp.broadcast_arrays(x.astype(jnp.float64), q.astype(jnp.float64))
    s = jnp.power(q, -x)
    state = (jnp.zeros(x.shape, jnp.int32), q, jnp.zeros_like(x), s, jnp.zeros(x.shape, bool))

    def cond(st: tuple) -> Any:
        i, a, _, _, done = st
        return jnp.any(~done & ((i < 9) | (a <= 9.0)))

    def body(st: tuple) -> tuple:
        i, a, b, s, done = st
        go = ~done & ((i < 9) | (a <= 9.0))
        a2 = a + 1
        b2 = jnp.power(a2, -x)
        s2 = s + b2
        hit = go & (-_MACHEP * s2 < b2) & (b2 < _MACHEP * s2)
        return (
            jnp.where(go, i + 1, i),
            jnp.where(go, a2, a),
            jnp.where(go, b2, b),
            jnp.where(go, s2, s),
            done | hit,
        )

    _, a, b, s, done = lax.while_loop(cond, body, state)
    w = a
    s = jnp.where(done, s, s + b * w / (x - 1) - 0.5 * b)
    a = jnp.ones_like(x)
    k = jnp.zeros_like(x)
    for coef in _ZETA_A:
        a = a * (x + k)
        b = b / w
        t = a * b / coef
        s = jnp.where(done, s, s + t)
        done = done | (jnp.abs(t / s) < _MACHEP)
        k = k + 1
        a = a * (x + k)
        b = b / w
        k = k + 1
    s = jnp.where((q <= 0) & (x != jnp.floor(x)), jnp.nan, s)
    s = jnp.where((q <= 0) & (q == jnp.floor(q)), jnp.inf, s)
    s = jnp.where(x < 1, jnp.nan, jnp.where(x == 1, jnp.inf, s))
    return s.astype(dtype)


@reg(aten.polygamma.default)
def _polygamma(n: int, x: Any) -> Any:
    x = floating(x)
    if n == 0:
        return _digamma(x)
    if n == 1:
        return _trigamma(x)
    fact = jnp.exp(jss.gammaln(jnp.asarray(n + 1, x.dtype)))
    return (1 if n % 2 else -1) * fact * _zeta(jnp.full_like(x, n + 1), x)


def _binary(fn: Fn) -> Fn:
    def lowered(a: Any, b: Any) -> Any:
        a, b = promote(a, b)
        return fn(floating(jnp.asarray(a)), floating(jnp.asarray(b)))

    return lowered


def _xlog1py(x: Any, y: Any) -> Any:
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log1p(y)))


reg(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar)(_binary(_xlog1py))
reg(aten.special_xlog1py.other_scalar)(_binary(_xlog1py))
reg(aten.special_zeta.default, aten.special_zeta.self_scalar, aten.special_zeta.other_scalar)(
    _binary(_zeta)
)
reg(prims.zeta.default)(_binary(_zeta))
reg(aten.igamma.default, prims.igamma.default)(_binary(jss.gammainc))
reg(aten.igammac.default, prims.igammac.default)(_binary(jss.gammaincc))


# ---------------------------------------------------------------- orthogonal polynomials


def _recurrence(
    x: Any, n: Any, p: Any, q: Any, step: Fn, first: int, more: Fn, nan_stops: bool
) -> Any:
    """Eager's loop ``for k = first; more(k, n) [&& !isnan(q)]; k++: r = step(k, p, q); p, q =
    q, r`` run for every element to its own ``n``; returns ``r`` (``q`` if the loop never ran)."""

    def active(k: Any, q: Any) -> Any:
        a = more(k, n)
        return a & ~jnp.isnan(q) if nan_stops else a

    def cond(s: tuple) -> Any:
        k, _, q, _ = s
        return jnp.any(active(k, q))

    def body(s: tuple) -> tuple:
        k, p, q, r = s
        a = active(k, q)
        nr = step(k.astype(x.dtype), p, q)
        return k + 1, jnp.where(a, q, p), jnp.where(a, nr, q), jnp.where(a, nr, r)

    init = (jnp.asarray(first, n.dtype), p, q, q)
    return lax.while_loop(cond, body, init)[3]


def _poly(fn: Fn) -> Fn:
    """``fn(x, n)`` with eager's argument handling: broadcast, ``n`` truncated to an integer."""

    def lowered(x: Any, n: Any) -> Any:
        x, n = promote(x, n)
        x = floating(jnp.asarray(x))
        n = jnp.asarray(n)
        if jnp.issubdtype(n.dtype, jnp.floating):
            n = jnp.where(jnp.isfinite(n), n, -1).astype(jnp.int64)
        x, n = jnp.broadcast_arrays(x, n.astype(jnp.int64))
        return fn(x, n)

    return lowered


def _chebyshev(kind: str, shifted: bool = False) -> Fn:
    """T, U, V, W (of ``2x - 1`` if ``shifted``): eager's edge cases, its trigonometric form
    above a degree, its recurrence below."""
    big_n = ({"t": 6, "u": 6, "v": 6, "w": 4} if shifted else {"t": 6, "u": 8, "v": 8, "w": 8})[
        kind
    ]

    def fn(x: Any, n: Any) -> Any:
        edge_at = ((x == 1) | (x == 0)) if shifted else (jnp.abs(x) == 1)
        if shifted:
            x = x + x - 1
        one = jnp.ones_like(x)
        ax = jnp.abs(x)
        nf = n.astype(x.dtype)
        first = {"t": x, "u": x + x, "v": x + x - 1, "w": x + x + 1}[kind]

        def step(k: Any, p: Any, q: Any) -> Any:
            return (x + x) * q - p

        r = _recurrence(x, n, one, first, step, 2, lambda k, n: k <= n, True)
        r = jnp.where(n == 0, one, jnp.where(n == 1, first, r))
        th = jnp.arccos(jnp.where(ax < 1, x, 0))
        odd = n % 2 == 1
        if kind == "t":
            edge = jnp.where((x > 0) | ~odd, one, -one)
            r = jnp.where((n > big_n) & (ax < 1), jnp.cos(nf * th), r)
        elif kind == "u":
            edge = jnp.where((x > 0) | ~odd, nf + 1, -(nf + 1))
            s = jnp.sin(th)
            big = jnp.where(
                s != 0,
                jnp.sin((nf + 1) * th) / jnp.where(s != 0, s, 1),
                (nf + 1) * jnp.cos((nf + 1) * th) / x,
            )
            r = jnp.where((n > big_n) & (ax < 1), big, r)
        elif kind == "v":
            edge = jnp.where(x > 0, one, jnp.where(odd, -(nf + nf + 1), nf + nf + 1))
            c = jnp.cos(th / 2)
            big = jnp.where(
                jnp.sin(th / 2) != 1,
                jnp.cos((nf + 0.5) * th) / c,
                jnp.where(odd, -(nf + nf + 1), nf + nf + 1),
            )
            r = jnp.where((n > big_n) & (ax < 1), big, r)
        else:
            edge = jnp.where(x > 0, nf + nf + 1, jnp.where(odd, -one, one))
            sn = jnp.sin(th / 2)
            big = jnp.where(
                jnp.cos(th / 2) != 1,
                jnp.sin((nf + 0.5) * th) / jnp.where(sn != 0, sn, 1),
                jnp.where(x > 0, nf + nf + 1, jnp.where(odd, -one, one)),
            )
            r = jnp.where((n > big_n) & (ax < 1), big, r)
        r = jnp.where(edge_at, edge, r)
        return jnp.where(n < 0, 0, r)

    return fn


def _hermite(physicists: bool) -> Fn:
    def fn(x: Any, n: Any) -> Any:
        one = jnp.ones_like(x)
        first = x + x if physicists else x
        if physicists:  # for k = 2; k < n + n; k += 2: r = 2x q - k p
            r = _recurrence(
                x, n, one, first, lambda j, p, q: (x + x) * q - (j + j) * p, 1, _lt, False
            )
        else:  # for k = 1; k < n; k++: r = x q - k p
            r = _recurrence(x, n, one, first, lambda k, p, q: x * q - k * p, 1, _lt, False)
        limit = {2: 1024, 4: 128, 8: 512}.get(x.dtype.itemsize, 1024)
        r = jnp.where(n > limit, jnp.nan, r)
        r = jnp.where(n == 0, one, jnp.where(n == 1, first, r))
        return jnp.where(n < 0, 0, r)

    return fn


def _lt(k: Any, n: Any) -> Any:
    return k < n


def _laguerre(x: Any, n: Any) -> Any:
    one = jnp.ones_like(x)
    first = 1 - x
    r = _recurrence(
        x, n, one, first, lambda k, p, q: (((k + k) + (1 - x)) * q - k * p) / (k + 1), 1, _lt, True
    )
    r = jnp.where(n == 0, one, jnp.where(n == 1, first, r))
    r = jnp.where(jnp.abs(x) == 0, one, r)
    return jnp.where(n < 0, 0, r)


def _legendre(x: Any, n: Any) -> Any:
    one = jnp.ones_like(x)
    r = _recurrence(
        x, n, one, x, lambda k, p, q: ((k + k + 1) * x * q - k * p) / (k + 1), 1, _lt, True
    )
    r = jnp.where(n == 0, one, jnp.where(n == 1, x, r))
    r = jnp.where(jnp.abs(x) == 1, jnp.where((x > 0) | (n % 2 == 0), one, -one), r)
    return jnp.where(n < 0, 0, r)


for _name, _fn in [
    ("chebyshev_polynomial_t", _chebyshev("t")),
    ("chebyshev_polynomial_u", _chebyshev("u")),
    ("chebyshev_polynomial_v", _chebyshev("v")),
    ("chebyshev_polynomial_w", _chebyshev("w")),
    ("shifted_chebyshev_polynomial_t", _chebyshev("t", shifted=True)),
    ("shifted_chebyshev_polynomial_u", _chebyshev("u", shifted=True)),
    ("shifted_chebyshev_polynomial_v", _chebyshev("v", shifted=True)),
    ("shifted_chebyshev_polynomial_w", _chebyshev("w", shifted=True)),
    ("hermite_polynomial_h", _hermite(True)),
    ("hermite_polynomial_he", _hermite(False)),
    ("laguerre_polynomial_l", _laguerre),
    ("legendre_polynomial_p", _legendre),
]:
    _p = getattr(aten, "special_" + _name)
    reg(_p.default, _p.x_scalar, _p.n_scalar)(_poly(_fn))
