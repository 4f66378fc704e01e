"""XLA-key kernels: ops that reach the ``xla`` device with no lazy tensor among their arguments.

``_device.install(factory)`` registers ``factory`` for the allocating factories (``empty``,
``zeros``, ``arange``, ``full``, ``randn``...): ``torch.zeros(3, device=dev)`` has no lazy
argument, so it never reaches ``__torch_dispatch__``. Kernels for other ops torch runs below
the Python key (``XLA_KERNELS``: CPU <-> device copies, reading a scalar) belong here too.
"""

from __future__ import annotations

from typing import Any

import torch

from .executor import to_cpu
from .random_ops import random_tensor
from .record import assign, record
from .tensor import DEVICE, LOCK, LazyTensor
from .transfer import to_device

aten = torch.ops.aten


def factory(func: Any, args: tuple, kwargs: dict) -> LazyTensor:
    """XLA-key kernel for factory ops (``torch.zeros(..., device=dev)``)."""
    with LOCK:
        name = func.overloadpacket.__name__
        kw = {k: v for k, v in kwargs.items() if k not in ("pin_memory", "layout")}
        kw.pop("memory_format", None)
        kw["device"] = DEVICE
        if name in ("empty", "empty_strided"):
            dtype = kw.get("dtype") or torch.get_default_dtype()
            return record(aten.zeros.default, (list(args[0]),), {"dtype": dtype, "device": DEVICE})
        if name in ("randn", "rand"):
            dtype = kw.get("dtype") or torch.get_default_dtype()
            kind = "normal_" if name == "randn" else "uniform_"
            return random_tensor(kind, tuple(args[0]), dtype, (), {})
        if name in ("randint", "randperm", "kaiser_window"):  # kaiser: a CPU-only kernel
            cpu = func(*args, **{**kwargs, "device": "cpu"})
            return to_device(cpu)
        return record(func, args, kw)


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """XLA-key kernel for ``aten::_copy_from(src, dst)``: ``dst.copy_(src)`` across devices.

    ``copy_`` between a CPU and an ``xla`` tensor lands here when the Python dispatch key is
    excluded: ``torch.tensor(data, device=dev)``, ``torch.as_tensor(list, device=dev)`` and
    ``x.new_tensor(data)`` build the data on CPU, then copy it into an empty device tensor.
    """
    with LOCK:
        if isinstance(dst, LazyTensor):
            assign(dst, src if isinstance(src, LazyTensor) else to_device(src))
            return dst
        if not isinstance(src, LazyTensor):
            raise RuntimeError(f"xlacache.lazy: _copy_from between {src.device} and {dst.device}")
        dst.copy_(to_cpu(src))
        return dst


def local_scalar(x: torch.Tensor) -> Any:
    """XLA-key kernel for ``aten::_local_scalar_dense``: the value of a one-element tensor,
    where torch reads it with no Python key (``torch.tensor([loss_a, loss_b])``)."""
    with LOCK:
        return to_cpu(x).item()


# ops torch runs on device tensors below the Python key, with their kernels
XLA_KERNELS = {aten._copy_from.default: copy_from, aten._local_scalar_dense.default: local_scalar}
