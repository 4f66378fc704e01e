"""Optimizers on the ``xla`` device default to their ``foreach`` implementation, as on CUDA.

With ``foreach`` left None, torch picks an optimizer's implementation (and
``clip_grad_norm_``'s) per call: the multi-tensor one (``_foreach_*`` ops over all
parameters) for plain tensors on CUDA-like devices, else a Python loop over the parameters.
A lazy tensor is a subclass on the ``xla`` device, so it got the loop: a dozen traced ops per
parameter per step, and a loop ``torch.compile``'s Dynamo unrolls again in every process.

Here the device takes the multi-tensor implementation: ``LazyTensor`` joins torch's lists of
foreach-capable tensor types (as DTensor does), ``xla`` its foreach devices, and the
``capturable`` check of the multi-tensor implementations (torch lets only their loops run
``capturable`` on ``xla``). torch keeps the two implementations numerically the same (its
``test_foreach_matches_forloop``); here each optimizer is tested against eager
(``tests/lazy/test_optim_defaults.py``). ``foreach=False`` still picks the loop, and
``XLACACHE_LAZY_OPTIM_LOOP=1`` keeps torch's choice.

Dynamo inlines this module's functions (it is off the runtime's skip list): torch's
optimizers call them while Dynamo traces ``opt.step()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from torch.optim import optimizer
from torch.utils import _foreach_utils

from .tensor import LazyTensor

# the modules that hold torch's foreach device function and foreach type list by name; not
# ``swa_utils``: its multi-tensor average is a ``lerp``, not the loop's float32 numbers
FOREACH = ("torch.utils._foreach_utils", "torch.optim.optimizer")
# the multi-tensor implementations that check ``capturable`` devices
CAPTURABLE = (
    "torch.optim.adam",
    "torch.optim.adamax",
    "torch.optim.asgd",
    "torch.optim.nadam",
    "torch.optim.radam",
    "torch.optim.adadelta",
)
_TORCH_FOREACH = _foreach_utils._get_foreach_kernels_supported_devices
_TORCH_CAPTURABLE = optimizer._get_capturable_supported_devices


def foreach_devices() -> list[str]:
    """torch's foreach devices, and ``xla``."""
    return _TORCH_FOREACH() + ["xla"]


def capturable_devices(supports_xla: bool = True) -> list[str]:
    """torch's capturable devices, with ``xla`` for the multi-tensor implementations too."""
    return _TORCH_CAPTURABLE(supports_xla=True)


def install() -> Callable[[], None]:
    """Make the multi-tensor implementations the device's default; returns the undo."""
    undo: list[Callable[[], None]] = []
    for module in map(importlib.import_module, FOREACH):
        undo.append(_swap(module, "_get_foreach_kernels_supported_devices", foreach_devices))
        types = module._foreach_supported_types
        if LazyTensor not in types:
            types.append(LazyTensor)
            undo.append(lambda types=types: types.remove(LazyTensor))
    for module in map(importlib.import_module, CAPTURABLE):
        undo.append(_swap(module, "_get_capturable_supported_devices", capturable_devices))

    def uninstall() -> None:
        for step in reversed(undo):
            step()

    return uninstall


def _swap(module: Any, name: str, replacement: Callable[..., Any]) -> Callable[[], None]:
    original = getattr(module, name)
    if original is replacement:  # installed already: its own undo puts torch's back
        return lambda: None
    setattr(module, name, replacement)
    return lambda: setattr(module, name, original)
