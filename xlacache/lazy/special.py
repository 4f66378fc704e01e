"""Special handlers: ops that are not one IR node (aliases, copies, transfers, splits...).

Each handler is registered with ``@special(op)`` and runs instead of recording the op.
"""

from __future__ import annotations

from typing import Any

import torch

from ._device import xla_one_hot
from .dispatch import dispatch, special
from .executor import to_cpu
from .record import assign, record, value
from .state import STATE
from .tensor import LazyTensor, untraced
from .torch_internals import aten_ops
from .transfer import to_device

aten = torch.ops.aten


@special(aten.detach.default, aten.alias.default)
def _alias(args: tuple, kwargs: dict) -> LazyTensor:
    untraced()
    t = args[0]
    out = LazyTensor(t._meta, value(t))
    c, o = t._c, out._c
    root = c._root if c._root is not None else c
    o._root = root
    o._chain = c._chain
    o._rgen = root._gen
    o._lay = c._lay
    return out


@special(aten.lift_fresh.default)
def _noop_first(args: tuple, kwargs: dict) -> Any:
    untraced()
    return args[0]


@special(aten._to_copy.default)
def _to_copy(args: tuple, kwargs: dict) -> Any:
    t = args[0]
    dev = kwargs.get("device")
    dtype = kwargs.get("dtype") or t.dtype
    if dev is not None and torch.device(dev).type != "xla":
        untraced()  # a read
        out = to_cpu(t)
        return out.to(device=dev, dtype=dtype)
    if dtype == t.dtype:
        return record(aten.clone.default, (t,), {})
    return record(aten._to_copy.default, (t,), {"dtype": dtype})


@special(aten.copy_.default)
def _copy_(args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(dst, LazyTensor):
        dst.copy_(to_cpu(src))
        return dst
    if not isinstance(src, LazyTensor):
        if src.dtype == dst.dtype and src.shape == dst.shape:
            untraced()  # a transfer (``.to(device)``): data in, nothing traced
        src = to_device(src)
    assign(dst, src)
    return dst


@special(aten.copy.default)
def _copy(args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(src, LazyTensor):
        src = to_device(src)
    out = src
    if out.dtype != dst.dtype:
        out = record(aten._to_copy.default, (out,), {"dtype": dst.dtype})
    if tuple(out.shape) != tuple(dst.shape):
        out = record(aten.expand.default, (out, list(dst.shape)), {})
    return record(aten.clone.default, (out,), {})


@special(aten._local_scalar_dense.default)
def _item(args: tuple, kwargs: dict) -> Any:
    untraced()  # a read
    return to_cpu(args[0]).item()


@special(aten.is_pinned.default)
def _is_pinned(args: tuple, kwargs: dict) -> bool:
    untraced()  # device memory is never pinned host memory (as for CUDA tensors)
    return False


@special(aten._linalg_check_errors.default)
def _linalg_check_errors(args: tuple, kwargs: dict) -> None:
    """``torch.linalg``'s error check reads LAPACK's ``info``: materialize it (a barrier, like
    ``.item()``) and raise exactly as eager would. The ``*_ex`` functions skip the check."""
    info = args[0]
    cpu = to_cpu(info) if isinstance(info, LazyTensor) else info
    aten._linalg_check_errors.default(cpu, *args[1:], **kwargs)


# aten::cholesky is gone from torch 2.14 (torch.linalg.cholesky replaced it)
@special(*aten_ops("cholesky"))
def _cholesky(args: tuple, kwargs: dict) -> LazyTensor:
    """The deprecated ``torch.cholesky``: raises as eager's does where the input is not
    positive-definite (LAPACK's ``info``, read as ``torch.linalg.cholesky`` reads it)."""
    a = args[0]
    upper = args[1] if len(args) > 1 else kwargs.get("upper", False)
    low, info = dispatch(aten.linalg_cholesky_ex.default, (a,), {"upper": upper})
    _linalg_check_errors((info, "cholesky"), {"is_matrix": a.dim() == 2})
    return low


@special(aten.allclose.default)
def _allclose(args: tuple, kwargs: dict) -> bool:
    """Computed on the device; only the answer crosses to the host (like ``.item()``)."""
    close = dispatch(aten.isclose.default, args, kwargs)
    return bool(to_cpu(dispatch(aten.all.default, (close,), {})).item())


@special(aten.equal.default)
def _equal(args: tuple, kwargs: dict) -> bool:
    a, b = args
    return bool(torch.equal(to_cpu(a), to_cpu(b) if isinstance(b, LazyTensor) else b))


@special(aten.is_same_size.default)
def _is_same_size(args: tuple, kwargs: dict) -> bool:
    untraced()
    return tuple(args[0].shape) == tuple(args[1].shape)


_FILL_DEFAULTS = {"dtype": None, "layout": torch.strided, "pin_memory": False}


def _fill_like(func: Any, fill: int) -> Any:
    """A one-element ``ones_like``/``zeros_like`` (autograd's seed for ``loss.backward()``) is
    a device constant made once and shared (recording nothing); larger ones are recorded."""

    def handler(args: tuple, kwargs: dict) -> Any:
        t = args[0]
        plain = all(kwargs.get(k, v) in (v, None) for k, v in _FILL_DEFAULTS.items())
        dev = kwargs.get("device")
        if len(args) > 1 or t.numel() != 1 or not plain or (dev is not None and dev.type != "xla"):
            return record(func, args, kwargs)
        dtype = kwargs.get("dtype") or t.dtype
        key = (tuple(t.shape), dtype, fill)
        held = STATE.constants.get(key)
        if held is None:
            held = STATE.constants[key] = to_device(torch.full(key[0], fill, dtype=dtype))
        untraced()
        return LazyTensor(held._c._meta, held._c._v)

    return special(func)(handler)


_fill_like(aten.ones_like.default, 1)
_fill_like(aten.zeros_like.default, 0)


@special(aten.split.Tensor)
def _split(args: tuple, kwargs: dict) -> list:
    t, size = args[0], args[1]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    n = t.shape[dim]
    sizes = [size] * (n // size) + ([n % size] if n % size else []) if n else [0]
    return _split_sizes(t, sizes, dim)


@special(aten.split_with_sizes.default)
def _split_with_sizes(args: tuple, kwargs: dict) -> list:
    t, sizes = args[0], args[1]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    return _split_sizes(t, list(sizes), dim)


def _split_sizes(t: LazyTensor, sizes: list[int], dim: int) -> list:
    out, start = [], 0
    for s in sizes:
        out.append(dispatch(aten.slice.Tensor, (t, dim, start, start + s), {}))
        start += s
    return out


@special(aten.unbind.int)
def _unbind(args: tuple, kwargs: dict) -> tuple:
    t = args[0]
    dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    return tuple(dispatch(aten.select.int, (t, dim, i), {}) for i in range(t.shape[dim]))


@special(aten._batch_norm_with_update.default)
def _bn_with_update(args: tuple, kwargs: dict) -> Any:
    x, w, b, rm, rv, momentum, eps = args[:7]
    out = record(
        aten._batch_norm_with_update_functional.default, (x, w, b, rm, rv, momentum, eps), {}
    )
    assign(rm, out[4])
    assign(rv, out[5])
    return _stats_like_input(x, out[:4])


def _stats_like_input(x: LazyTensor, out: Any) -> Any:
    """Eager's CPU norms keep bfloat16/float16 statistics in the input's dtype (their meta
    kernels, like CUDA, say float32): outputs 1 and 2 follow eager."""
    if x.dtype not in (torch.bfloat16, torch.float16):
        return out
    cast = [record(aten._to_copy.default, (t,), {"dtype": x.dtype}) for t in out[1:3]]
    return (out[0], *cast, *out[3:])


@special(aten.native_layer_norm.default)
def _layer_norm(args: tuple, kwargs: dict) -> Any:
    return _stats_like_input(args[0], record(aten.native_layer_norm.default, args, kwargs))


@special(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
def _native_bn(args: tuple, kwargs: dict) -> Any:
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    if training and rm is not None:
        return _bn_with_update((x, w, b, rm, rv, momentum, eps), {})[:3]
    out = record(aten.native_batch_norm.default, args[:8], {})
    if training or rm is None:
        return _stats_like_input(x, out)
    empty = record(aten.new_zeros.default, (x, [0]), {})  # as eager: no saved statistics
    return out[0], empty, empty


@special(aten._native_batch_norm_legit.no_stats)
def _native_bn_no_stats(args: tuple, kwargs: dict) -> Any:
    x, w, b, training, momentum, eps = args[:6]
    return _native_bn((x, w, b, None, None, training, momentum, eps), {})


# GradScaler (``torch.amp.GradScaler("xla")``): its two fused ops, as torch's kernels compute them


@special(aten._amp_foreach_non_finite_check_and_unscale_.default)
def _amp_unscale_(args: tuple, kwargs: dict) -> None:
    """Each gradient times ``inv_scale`` (in float32 at least, rounded to its dtype, as
    torch's kernels compute it), and ``found_inf`` set to 1 if any value was not finite."""
    grads, found_inf, inv_scale = args
    found = found_inf
    for g in grads:
        bad = torch.logical_not(torch.isfinite(g)).any().to(found_inf.dtype)
        found = torch.maximum(found, bad.reshape(found_inf.shape))
        math = torch.promote_types(g.dtype, torch.float32)
        assign(g, (g.to(math) * inv_scale.to(math)).to(g.dtype))
    assign(found_inf, found)


@special(aten._amp_update_scale_.default)
def _amp_update_scale_(args: tuple, kwargs: dict) -> LazyTensor:
    """The scale backs off after a step with infs or nans, and grows (unless that overflows
    float32) after ``growth_interval`` clean steps in a row; products in float64, rounded to
    float32, as torch's kernels compute them."""
    scale, tracker, found_inf, growth, backoff, interval = args
    found = found_inf != 0  # as the kernel reads it: any nonzero value (nan too)
    clean = tracker + 1
    grow = clean == interval
    grown = (scale.double() * growth).to(scale.dtype)
    backed = (scale.double() * backoff).to(scale.dtype)
    kept = torch.where(grow & torch.isfinite(grown), grown, scale)
    assign(scale, torch.where(found, backed, kept))
    zero = torch.zeros_like(tracker)
    assign(tracker, torch.where(found | grow, zero, clean))
    return scale


@special(aten.ldexp.Tensor)
def _ldexp(args: tuple, kwargs: dict) -> Any:
    # eager's kernel: ``mul(self, pow(2.0, other))`` (torch's decomposition makes the 2.0 a
    # float32 tensor for integer ``self``: ``ldexp(int8, float16 0-dim)`` would be float32)
    a, b = args
    return torch.mul(a, torch.pow(2.0, b))


@special(aten.one_hot.default)
def _one_hot(args: tuple, kwargs: dict) -> Any:
    """``one_hot`` below autograd (``torch.inference_mode``), as above it (``_device``)."""
    return xla_one_hot(*args, **kwargs)


def _factor_as_torch(func: Any) -> Any:
    """Torch factors a contiguous real ``A`` as ``A^T`` for ``func`` (the same determinant),
    and its backward solves with those LU factors and pivots accordingly; the lowering factors
    its input, so it is given ``A^T`` then (compiled graphs: ``dynamo.strided``)."""

    def handler(args: tuple, kwargs: dict) -> Any:
        a = args[0]
        if a.is_contiguous() and not a.is_complex():
            a = dispatch(aten.transpose.int, (a, -2, -1), {})
        return record(func, (a, *args[1:]), kwargs)

    return handler


for _op in (aten._linalg_det.default, aten._linalg_slogdet.default):
    special(_op)(_factor_as_torch(_op))
