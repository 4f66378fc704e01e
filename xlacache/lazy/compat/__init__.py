"""torch_xla-shaped modules over ``xlacache.lazy``, so torch_xla code runs by changing imports.

Replace the ``torch_xla`` prefix of an import with ``xlacache.lazy.compat``::

    import xlacache.lazy.compat as torch_xla                  # import torch_xla
    import xlacache.lazy.compat.core.xla_model as xm          # torch_xla.core.xla_model
    from xlacache.lazy.compat import runtime as xr            # from torch_xla import runtime
    import xlacache.lazy.compat.debug.metrics as met          # torch_xla.debug.metrics
    import xlacache.lazy.compat.utils.utils as xu             # torch_xla.utils.utils
    import xlacache.lazy.compat.utils.serialization as xser   # torch_xla.utils.serialization
    import xlacache.lazy.compat.distributed.parallel_loader as pl
    import xlacache.lazy.compat.distributed.xla_multiprocessing as xmp
    import xlacache.lazy.compat.test.test_utils as test_utils

One device (``xla:0``) per process; ``launch`` (``xmp.spawn``) starts a process per device and
``xm.all_reduce``/``xm.optimizer_step`` reduce across them (``xlacache.lazy.distributed``).
Nothing here is
registered as ``torch_xla`` itself: libraries that look for torch_xla (transformers) would then
call into its C++ internals.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

import xlacache.lazy as _xl
from xlacache.lazy import compile, launch, manual_seed, sync

from . import core, debug, distributed, runtime, test, utils

__all__ = [
    "compile",
    "core",
    "debug",
    "device",
    "device_count",
    "devices",
    "distributed",
    "launch",
    "manual_seed",
    "runtime",
    "step",
    "sync",
    "test",
    "utils",
]


def device(index: int | None = None) -> torch.device:
    """``torch_xla.device()``: the ``xla:0`` device."""
    return _xl.device(0 if index is None else index)


def devices() -> list[torch.device]:
    """``torch_xla.devices()``: the devices this process drives."""
    return [_xl.device()]


def device_count() -> int:
    return 1


@contextlib.contextmanager
def step() -> Iterator[None]:
    """``torch_xla.step()``: a training step whose pending work runs (``sync``) at the end."""
    sync()
    yield
    sync()


def __getattr__(name: str) -> Any:
    raise AttributeError(f"xlacache.lazy.compat has no torch_xla name {name!r}")
