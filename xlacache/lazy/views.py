"""Ops that change which storage a tensor views, or its shape, in place.

* In-place view ops (``t_``, ``transpose_``, ``unsqueeze_``, ``squeeze_``, ``as_strided_``):
  the tensor becomes the view its functional op returns. Its state cell is replaced by the
  view's (whose root is the storage it viewed before), so earlier views of the same storage
  stay aliased with it, and torch's sizes for the tensor are updated in place
  (``tensor.set_shape``).
* ``as_strided`` works on the tensor's own elements in the layout lazy tensors report
  (contiguous, ``storage_offset() == 0``), so strides and offsets computed from ``.stride()``
  and ``.storage_offset()`` mean what they say; reaching past those elements (into the rest of
  an eager storage) is an error, never a clamped read.
* ``resize_`` to at most the current number of elements is a view of the first ones (as
  eager); a growing resize gives the tensor a new storage (zeros past the old elements) that
  views taken before no longer alias.
* ``set_(source)`` makes the tensor an alias of ``source``; ``set_(storage, offset, size,
  stride)`` takes only a storage ``torch.load`` restores onto the device
  (``storage_restore.py``): the tensor becomes a device copy of the view it names.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .dispatch import special
from .record import record
from .storage_restore import host_storage
from .tensor import LazyTensor, set_shape
from .transfer import to_device

aten = torch.ops.aten


def _adopt(t: LazyTensor, view: LazyTensor) -> LazyTensor:
    """``t`` becomes ``view`` (an in-place view op): its cell, value and sizes."""
    t._c = view._c
    set_shape(t, view.shape)
    return t


def _inplace_view(functional: Any) -> Any:
    def handler(args: tuple, kwargs: dict) -> LazyTensor:
        return _adopt(args[0], record(functional, args, kwargs))

    return handler


for _inplace, _functional in [
    (aten.t_.default, aten.t.default),
    (aten.transpose_.default, aten.transpose.int),
    (aten.swapdims_.default, aten.transpose.int),
    (aten.swapaxes_.default, aten.transpose.int),
    (aten.unsqueeze_.default, aten.unsqueeze.default),
    (aten.squeeze_.default, aten.squeeze.default),
    (aten.squeeze_.dim, aten.squeeze.dim),
    (aten.squeeze_.dims, aten.squeeze.dims),
]:
    special(_inplace)(_inplace_view(_functional))


def _strided(args: tuple, kwargs: dict) -> LazyTensor:
    """``as_strided`` of the tensor's own elements (the contiguous layout it reports)."""
    t, size, stride = args[:3]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    off = int(offset or 0)
    last = off + sum((int(n) - 1) * int(s) for n, s in zip(size, stride, strict=True))
    if any(int(n) == 0 for n in size):
        last = off - 1
    if off < 0 or last >= t.numel():
        raise RuntimeError(
            f"xlacache.lazy: as_strided(size={list(size)}, stride={list(stride)}, "
            f"storage_offset={off}) reaches past the {t.numel()} elements of a lazy tensor: a "
            "lazy tensor is its own contiguous storage (storage_offset() is 0), so it cannot "
            "read the rest of the storage its eager counterpart views"
        )
    return record(aten.as_strided.default, (t, list(size), list(stride), off), {})


special(aten.as_strided.default)(_strided)


@special(aten.as_strided_.default)
def _as_strided_(args: tuple, kwargs: dict) -> LazyTensor:
    return _adopt(args[0], _strided(args, kwargs))


def _resize(t: LazyTensor, size: Any) -> LazyTensor:
    size = [int(s) for s in size]
    if list(t.shape) == size:
        return t
    n = math.prod(size)
    stride = list(torch.empty(size, device="meta").stride())
    if n <= t.numel():  # fits in the storage: a view of its first n elements, as eager
        return _adopt(t, _strided((t, size, stride, 0), {}))
    flat = record(aten.reshape.default, (t, [-1]), {}, as_view=False)
    pad = record(aten.constant_pad_nd.default, (flat, [0, n - t.numel()], 0), {})
    return _adopt(t, record(aten.reshape.default, (pad, size), {}, as_view=False))


@special(aten.resize_.default)
def _resize_(args: tuple, kwargs: dict) -> LazyTensor:
    return _resize(args[0], args[1])


@special(aten.resize_as_.default)
def _resize_as_(args: tuple, kwargs: dict) -> LazyTensor:
    return _resize(args[0], args[1].shape)


@special(aten.set_.source_Tensor)
def _set_(args: tuple, kwargs: dict) -> LazyTensor:
    dst, src = args[0], args[1]
    if not isinstance(src, LazyTensor):
        raise RuntimeError("xlacache.lazy: set_ of an xla tensor needs an xla source tensor")
    if src.dtype != dst.dtype:
        raise RuntimeError(f"xlacache.lazy: set_ from {src.dtype} into {dst.dtype}")
    alias = aten.alias.default(src)
    return _adopt(dst, alias)


@special(aten.set_.source_Storage_storage_offset)
def _set_storage(args: tuple, kwargs: dict) -> LazyTensor:
    t, storage, offset, size, stride = args
    host = host_storage(storage)
    if host is None:
        raise RuntimeError(
            "xlacache.lazy: set_(storage) of an xla tensor takes only the storages torch.load "
            f"restores onto the device (this one is on {storage.device}); use set_(tensor)"
        )
    view = torch.empty((0,), dtype=t.dtype).set_(host, offset, size, stride)
    return _adopt(t, to_device(view))


@special(aten._has_same_storage_numel.default)
def _same_storage_numel(args: tuple, kwargs: dict) -> bool:
    """Autograd's view replay (``_view_func``) asks it: a metadata question, no data read."""
    base, other = args
    sizes = [t.untyped_storage().nbytes() // t.element_size() for t in (base, other)]
    return sizes[0] == sizes[1]


def _copy_of_view(view: Any) -> Any:
    def handler(args: tuple, kwargs: dict) -> Any:
        out = view(*args, **kwargs)
        if isinstance(out, (tuple, list)):
            return [o.clone() for o in out]
        return out.clone()

    return handler


# ``X_copy`` (a view op's functional form, what torch's own control flow and functionalized
# graphs call) is ``X`` then a copy; for those torch has no decomposition of
for _name, _overload in (
    ("select_copy", "int"), ("slice_copy", "Tensor"), ("split_copy", "Tensor"),
    ("detach_copy", "default"), ("_reshape_alias_copy", "default"),
    ("view_as_real_copy", "default"), ("view_as_complex_copy", "default"),
):  # fmt: skip
    _copy = getattr(getattr(aten, _name), _overload)
    special(_copy)(_copy_of_view(getattr(getattr(aten, _name[: -len("_copy")]), _overload)))
