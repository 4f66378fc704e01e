"""Matrix factorizations and solvers: Cholesky, LU, QR, SVD, symmetric eigendecomposition,
triangular and general solves, inverses and determinants, as ``torch.linalg`` defines them.

The ``*_ex`` ops return LAPACK's ``info`` (0, or the 1-based position where the factorization
broke down); ``torch.linalg`` raises from it with ``_linalg_check_errors``, which the runtime
runs on the materialized ``info`` (``special.py``). Pivots are LAPACK's: 1-based int32.
Factors whose sign or phase is not unique (QR, SVD, eigenvectors) come from the backend's
algorithm: LAPACK's on CPU, as eager; other backends may pick other, equally valid ones.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from .registry import reg

aten = torch.ops.aten


def _mT(x: Any) -> Any:  # noqa: N802 - torch's name
    return jnp.swapaxes(x, -1, -2)


def _mH(x: Any) -> Any:  # noqa: N802
    return jnp.conj(_mT(x))


def _first_bad(d: Any) -> Any:
    """LAPACK's info from a factor's diagonal: 1 + the first bad position, else 0."""
    n = d.shape[-1]
    if n == 0:
        return jnp.zeros(d.shape[:-1], jnp.int32)
    pos = jnp.arange(1, n + 1, dtype=jnp.int32)
    return jnp.min(jnp.where(d, pos, n + 1), axis=-1) % (n + 1)


@reg(aten.linalg_cholesky_ex.default)
def _cholesky_ex(a: Any, upper: bool = False, check_errors: bool = False) -> Any:
    low = jnp.tril(lax.linalg.cholesky(a, symmetrize_input=False))
    failed = ~jnp.isfinite(jnp.diagonal(low, axis1=-2, axis2=-1))
    # a failed factor is all NaN: LAPACK's info (the first leading minor that is not positive
    # definite) comes from an unblocked factorization, run only then
    info = lax.cond(
        jnp.any(failed),
        lambda: _potrf_info(a, _first_bad(failed)),
        lambda: jnp.zeros(a.shape[:-2], jnp.int32),
    )
    low = jnp.where(jnp.isfinite(low), low, 0)  # LAPACK leaves the rest; eager raises anyway
    return (_mH(low) if upper else low), info


def _potrf_info(a: Any, fallback: Any) -> Any:
    """LAPACK potrf's ``info`` for the lower triangle of ``a``: 1 + the first column whose
    pivot is not positive (or NaN), else ``fallback`` (where the factor failed by a rounding
    the unblocked order does not meet, or 0 where it did not fail)."""
    n = a.shape[-1]
    if n == 0:
        return fallback
    cols = jnp.arange(n)

    def step(j: Any, state: tuple) -> tuple:
        low, info = state
        row = jnp.where(cols < j, low[..., j, :], 0)  # l[j, :j]
        pivot = jnp.real(a[..., j, j]) - jnp.sum(jnp.abs(row) ** 2, axis=-1)
        bad = ~(pivot > 0)
        info = jnp.where((info == 0) & bad, j + 1, info)
        d = jnp.sqrt(jnp.where(bad, 1, pivot)).astype(a.dtype)
        below = a[..., :, j] - jnp.einsum("...ik,...k->...i", low, jnp.conj(row))
        col = jnp.where(cols > j, below / d[..., None], jnp.where(cols == j, d[..., None], 0))
        return low.at[..., :, j].set(col), info

    low0 = jnp.zeros_like(a)
    info0 = jnp.zeros(a.shape[:-2], jnp.int32)
    info = lax.fori_loop(0, n, step, (low0, info0))[1]
    return jnp.where(info > 0, info, fallback)


def _cho_solve(b: Any, low: Any) -> Any:
    y = lax.linalg.triangular_solve(low, b, left_side=True, lower=True)
    return lax.linalg.triangular_solve(
        low, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True
    )


@reg(aten.cholesky_solve.default)
def _cholesky_solve(b: Any, factor: Any, upper: bool = False) -> Any:
    b, factor = _batch(b, factor)
    return _cho_solve(b, _mH(factor) if upper else factor)


@reg(aten.cholesky_inverse.default)
def _cholesky_inverse(factor: Any, upper: bool = False) -> Any:
    eye = jnp.broadcast_to(jnp.eye(factor.shape[-1], dtype=factor.dtype), factor.shape)
    return _cho_solve(eye, _mH(factor) if upper else factor)


def _batch(b: Any, a: Any) -> tuple[Any, Any]:
    """Broadcast the batch dimensions of two matrix stacks."""
    batch = jnp.broadcast_shapes(b.shape[:-2], a.shape[:-2])
    return (jnp.broadcast_to(b, batch + b.shape[-2:]), jnp.broadcast_to(a, batch + a.shape[-2:]))


def _lu(a: Any) -> tuple[Any, Any, Any, Any]:
    """(LU, 1-based pivots, permutation, info) of LAPACK's getrf."""
    lu, piv, perm = lax.linalg.lu(a)
    k = min(a.shape[-2], a.shape[-1])
    info = _first_bad(jnp.diagonal(lu, axis1=-2, axis2=-1)[..., :k] == 0)
    return lu, (piv + 1).astype(jnp.int32), perm, info


def _lu_solve(lu: Any, perm: Any, b: Any, adjoint: bool = False) -> Any:
    """Solve ``A x = b`` (``A^H x = b``) from ``A[perm] = L U``."""
    if not adjoint:
        pb = jnp.take_along_axis(b, perm[..., :, None], axis=-2)
        y = lax.linalg.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
        return lax.linalg.triangular_solve(lu, y, left_side=True, lower=False)
    y = lax.linalg.triangular_solve(
        lu, b, left_side=True, lower=False, transpose_a=True, conjugate_a=True
    )
    x = lax.linalg.triangular_solve(
        lu, y, left_side=True, lower=True, unit_diagonal=True, transpose_a=True, conjugate_a=True
    )
    inv = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(x, inv[..., :, None], axis=-2)


@reg(aten.linalg_inv_ex.default)
def _inv_ex(a: Any, check_errors: bool = False) -> Any:
    lu, _, perm, info = _lu(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return _lu_solve(lu, perm, eye), info


@reg(aten._linalg_solve_ex.default)
def _solve_ex(a: Any, b: Any, left: bool = True, check_errors: bool = False) -> Any:
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    if vector:
        b = b[..., None]
    if not left:  # X A = B  <=>  A^H X^H = B^H, from the LU of A (torch returns A's, the
        b = _mH(b)  # factors its backward solves with)
    b, a = _batch(b, a)
    lu, piv, perm, info = _lu(a)
    x = _lu_solve(lu, perm, b, adjoint=not left)
    if not left:
        x = _mH(x)
    return (x[..., 0] if vector else x), lu, piv, info


@reg(aten.linalg_lu_factor_ex.default)
def _lu_factor_ex(a: Any, pivot: bool = True, check_errors: bool = False) -> Any:
    if not pivot:
        raise NotImplementedError("xlacache.lazy: LU without pivoting")
    lu, piv, _, info = _lu(a)
    return lu, piv, info


def _unpack(lu: Any, perm: Any) -> tuple[Any, Any, Any]:
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    low = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    up = jnp.triu(lu[..., :k, :])
    # A = P L U with P[perm[i], i] = 1
    p = (perm[..., None, :] == jnp.arange(m)[:, None]).astype(lu.dtype)
    return p, low, up


@reg(aten.linalg_lu.default)
def _linalg_lu(a: Any, pivot: bool = True) -> Any:
    if not pivot:
        raise NotImplementedError("xlacache.lazy: LU without pivoting")
    lu, _, perm, _ = _lu(a)
    return _unpack(lu, perm)


def _perm_of_pivots(piv: Any, m: int) -> Any:
    """The row permutation LAPACK's 1-based swaps ``piv`` describe."""
    perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), piv.shape[:-1] + (m,))
    if piv.shape[-1] == 0 or m == 0:
        return perm

    def swap(i: Any, perm: Any) -> Any:
        j = piv[..., i].astype(jnp.int32) - 1
        pi = jnp.take_along_axis(perm, jnp.full(perm.shape[:-1] + (1,), i), -1)
        pj = jnp.take_along_axis(perm, j[..., None], -1)
        rows = jnp.arange(m)
        perm = jnp.where(rows == i, pj, perm)
        return jnp.where(rows == j[..., None], pi, perm)

    return lax.fori_loop(0, piv.shape[-1], swap, perm)


@reg(aten.lu_unpack.default)
def _lu_unpack(lu: Any, piv: Any, unpack_data: bool = True, unpack_pivots: bool = True) -> Any:
    m = lu.shape[-2]
    p, low, up = _unpack(lu, _perm_of_pivots(piv, m))
    empty = jnp.zeros((0,), lu.dtype)
    return (
        (p if unpack_pivots else empty),
        (low if unpack_data else empty),
        (up if unpack_data else empty),
    )


@reg(aten.linalg_lu_solve.default)
def _linalg_lu_solve(lu: Any, piv: Any, b: Any, left: bool = True, adjoint: bool = False) -> Any:
    perm = _perm_of_pivots(piv, lu.shape[-2])
    if left:
        b, lu = _batch(b, lu)
        perm = jnp.broadcast_to(perm, lu.shape[:-1])
        return _lu_solve(lu, perm, b, adjoint)
    # X A = B  <=>  A^H X^H = B^H (adjoint: X A^H = B  <=>  A X^H = B^H)
    bh, lu = _batch(_mH(b), lu)
    perm = jnp.broadcast_to(perm, lu.shape[:-1])
    return _mH(_lu_solve(lu, perm, bh, not adjoint))


@reg(aten._linalg_det.default)
def _det(a: Any) -> Any:
    lu, piv, _, _ = _lu(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    flips = jnp.sum(piv != jnp.arange(1, a.shape[-1] + 1, dtype=jnp.int32), axis=-1)
    sign = jnp.where(flips % 2 == 1, -1, 1).astype(a.dtype)
    return sign * jnp.prod(d, axis=-1), lu, piv


@reg(aten._linalg_slogdet.default)
def _slogdet(a: Any) -> Any:
    lu, piv, _, _ = _lu(a)
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    flips = jnp.sum(piv != jnp.arange(1, a.shape[-1] + 1, dtype=jnp.int32), axis=-1)
    sign = jnp.where(flips % 2 == 1, -1, 1).astype(a.dtype)
    absd = jnp.abs(d)
    sign = sign * jnp.prod(d / jnp.where(absd == 0, 1, absd), axis=-1)
    sign = jnp.where(jnp.any(absd == 0, axis=-1), 0, sign)
    return sign, jnp.sum(jnp.log(absd), axis=-1), lu, piv


@reg(aten.linalg_solve_triangular.default)
def _solve_triangular(
    a: Any, b: Any, *, upper: bool, left: bool = True, unitriangular: bool = False
) -> Any:
    b, a = _batch(b, a)
    return lax.linalg.triangular_solve(
        a, b, left_side=left, lower=not upper, unit_diagonal=unitriangular
    )


@reg(aten.triangular_solve.default)
def _triangular_solve(
    b: Any, a: Any, upper: bool = True, transpose: bool = False, unitriangular: bool = False
) -> Any:
    b, a = _batch(b, a)
    x = lax.linalg.triangular_solve(
        a, b, left_side=True, lower=not upper, transpose_a=transpose, unit_diagonal=unitriangular
    )
    return x, a


@reg(aten._linalg_eigh.default)
def _eigh(a: Any, uplo: str = "L", compute_v: bool = True) -> Any:
    w, v = jnp.linalg.eigh(a, UPLO=uplo, symmetrize_input=False)
    return w, (v if compute_v else jnp.zeros((0,), a.dtype))


@reg(aten.linalg_qr.default)
def _qr(a: Any, mode: str = "reduced") -> Any:
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    q, r = jnp.linalg.qr(a, mode=mode)
    return q, r


@reg(aten._linalg_svd.default)
def _svd(a: Any, full_matrices: bool = False, compute_uv: bool = True, driver: Any = None) -> Any:
    if not compute_uv:
        s = jnp.linalg.svd(a, full_matrices=False, compute_uv=False)
        empty = jnp.zeros((0,), a.dtype)
        return empty, s, empty
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@reg(aten.linalg_householder_product.default)
def _householder_product(a: Any, tau: Any) -> Any:
    return lax.linalg.householder_product(a, tau)


@reg(aten.linalg_pinv.atol_rtol_tensor)
def _pinv(a: Any, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Any:
    """Eager's pinv: singular values above max(atol, rtol * largest) are inverted."""
    m, n = a.shape[-2], a.shape[-1]
    real = jnp.finfo(a.dtype).dtype
    if rtol is None:
        eps = jnp.finfo(real).eps * max(m, n)
        rtol = eps if atol is None else jnp.where(jnp.asarray(atol) > 0, 0.0, eps)
    atol = jnp.zeros((), real) if atol is None else jnp.asarray(atol, real)
    rtol = jnp.asarray(rtol, real)
    if hermitian:
        s, u = jnp.linalg.eigh(a, symmetrize_input=False)
        top = jnp.max(jnp.abs(s), axis=-1, keepdims=True, initial=0)
        keep = jnp.abs(s) > jnp.maximum(atol[..., None], rtol[..., None] * top)
        inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(a.dtype)
        return jnp.matmul(u * inv[..., None, :], _mH(u), precision=lax.Precision.HIGHEST)
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    top = s[..., :1] if s.shape[-1] else jnp.zeros(s.shape[:-1] + (1,), s.dtype)
    keep = s > jnp.maximum(atol[..., None], rtol[..., None] * top)
    inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(a.dtype)
    return jnp.matmul(_mH(vh) * inv[..., None, :], _mH(u), precision=lax.Precision.HIGHEST)
