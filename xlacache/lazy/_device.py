"""Makes torch's built-in ``xla`` device usable without torch_xla.

Two things a C++ backend normally provides are set up here:

* a device guard for ``DeviceType::XLA``: autograd asks for one whenever it records a tensor on a
  device. torch lets Python provide a guard only for PrivateUse1, so we register ours there and
  move the pointer to the XLA slot of c10's guard registry (the PrivateUse1 slot is restored);
* kernels on the ``XLA`` dispatch key for the factory ops that allocate (``empty``,
  ``empty_strided``, ``arange``...). Everything else reaches ``LazyTensor.__torch_dispatch__``
  because lazy tensors carry the Python dispatch key.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

import torch

DEVICE = torch.device("xla:0")
_state: dict[str, Any] = {"done": False, "libs": []}


class _XlaGuard(torch._C._acc.DeviceGuard):
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.XLA


def _install_guard() -> None:
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    c10 = ctypes.CDLL(os.path.join(libdir, "libc10.so"))
    sym = ctypes.c_void_p.in_dll(c10, "_ZN3c104impl26device_guard_impl_registryE")
    registry = (ctypes.c_void_p * 64).from_address(ctypes.addressof(sym))
    xla = int(torch._C._autograd.DeviceType.XLA)
    pu1 = int(torch._C._autograd.DeviceType.PrivateUse1)
    if registry[xla]:  # torch_xla (or a previous install) already provides one
        return
    saved = registry[pu1]
    guard = _XlaGuard()
    torch._C._acc.register_python_privateuseone_device_guard(guard)
    registry[xla] = registry[pu1]
    registry[pu1] = saved
    _state["guard"] = guard  # keep the Python object alive


def install(
    factory: Callable[[Any, tuple, dict], Any], copy_from: Callable[..., Any] | None = None
) -> None:
    """Install the guard, route XLA-key factory ops to ``factory(func, args, kwargs)`` and
    ``aten::_copy_from`` (CPU <-> device copies with no Python key) to ``copy_from``."""
    if _state["done"]:
        return
    _install_guard()
    lib = torch.library.Library("aten", "IMPL")
    aten = torch.ops.aten
    for op in (
        aten.empty.memory_format,
        aten.empty_strided.default,
        aten.arange.default,
        aten.arange.start,
        aten.arange.start_step,
        aten.full.default,
        aten.zeros.default,
        aten.ones.default,
        aten.scalar_tensor.default,
        aten.logspace.default,
        aten.triu_indices.default,
        aten.tril_indices.default,
        aten._efficientzerotensor.default,
        aten.linspace.default,
        aten.eye.default,
        aten.eye.m,
        aten.randn.default,
        aten.rand.default,
        aten.randint.default,
        aten.randint.low,
        aten.randint.generator,
        aten.randint.low_generator,
        aten.randperm.default,
        aten.randperm.generator,
    ):
        lib.impl(op, _bind(factory, op), "XLA")
    if copy_from is not None:
        lib.impl(aten._copy_from.default, copy_from, "XLA")
    _state["libs"].append(lib)
    _state["done"] = True


def _bind(factory: Callable[[Any, tuple, dict], Any], op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return factory(op, args, kwargs)

    return kernel
