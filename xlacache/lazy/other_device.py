"""``*_like`` and ``new_*`` ops on a lazy tensor that name another device.

``torch.zeros_like(x, device="cpu")``, ``x.new_empty(n, device="meta")``: such an op reads
``x`` for its shape, dtype and layout only, and its result lives where ``device`` says, as in
eager and torch_xla (a script that builds host buffers or meta shapes from device tensors).
"""

from __future__ import annotations

from typing import Any

import torch

from .tensor import LazyTensor

# the ops (``aten::`` and ``prims::`` names) whose tensor argument gives metadata only
LIKE_OPS = frozenset(
    {
        "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
        "randint_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
    }
)  # fmt: skip


def is_like_op(func: Any) -> bool:
    namespace, name = func._schema.name.split("::")
    return namespace in ("aten", "prims") and name in LIKE_OPS


def elsewhere(kwargs: dict) -> torch.device | None:
    """The device an op's ``device=`` names, if it is not the lazy device."""
    d = kwargs.get("device")
    if d is None:
        return None
    d = torch.device(d)
    return None if d.type == "xla" else d


def run_elsewhere(func: Any, args: tuple, kwargs: dict, device: torch.device) -> Any:
    """``func`` with its result on ``device``: the lazy ``self`` becomes an empty meta tensor
    with its shape, dtype and eager's strides (for ``memory_format=torch.preserve_format``);
    another lazy argument (``randint_like``'s ``high``) is copied to ``device``."""
    x, *rest = args
    if isinstance(x, LazyTensor):
        lay = x._c._lay  # eager's layout where it is not contiguous
        stride = lay.stride() if lay is not None else torch.empty(x.shape, device="meta").stride()
        x = torch.empty_strided(x.shape, stride, dtype=x.dtype, device="meta")
    rest = [a.to(device) if isinstance(a, LazyTensor) else a for a in rest]
    return func(x, *rest, **kwargs)
