"""xlacache.lazy: PyTorch lazy tensors on XLA (through jax/jaxlib) with the xlacache cache.

Tensors on ``device()`` record operations into an IR graph; at a barrier (``sync``, ``.item()``,
``.cpu()``, ``print``) the graph is lowered to a JAX function, compiled or found in the cache, and
executed. Names follow torch_xla so that code ports by changing imports::

    import xlacache.lazy as xl            # instead of torch_xla.core.xla_model as xm
    dev = xl.device()                     # xm.xla_device()
    xl.sync()                             # xm.mark_step() / torch_xla.sync()
"""

from __future__ import annotations

import contextlib as _contextlib
from typing import Any

import jax as _jax

from xlacache import config as _config
from xlacache import variables as _variables
from xlacache._version import LAZY_MIN_JAX, jax_too_old
from xlacache.lazy_settings import lazy_setting as _lazy_setting

if (_too_old := jax_too_old(_jax.__version__, LAZY_MIN_JAX, "xlacache.lazy")) is not None:
    raise ImportError(_too_old)

import torch  # noqa: E402

# torch and jax leave ~250k long-lived objects behind at import; every full (gen 2) collection
# re-scans them, ~100-200 ms each, and a training loop that records thousands of IR nodes a step
# triggers one every few steps. Move them to the permanent generation (``gc.freeze``): they are
# modules, functions and classes, never garbage. ``XLACACHE_LAZY_GC_FREEZE=0`` turns this off.
if _lazy_setting("gc_freeze"):
    import gc as _gc

    _gc.freeze()  # after jax's import (above): its objects are frozen too

from . import _device, metrics  # noqa: E402
from . import autocast as _autocast  # noqa: E402
from . import control_flow as _control_flow  # noqa: E402
from . import dispatch as _dispatch  # noqa: E402
from . import factories as _factories  # noqa: E402
from . import optim_defaults as _optim_defaults  # noqa: E402
from . import packed as _packed  # noqa: E402, F401 - registers its handlers
from . import random_ops as _random_ops  # noqa: E402, F401 - registers its handlers
from . import rng as _rng  # noqa: E402
from . import serialization as _serialization  # noqa: E402
from . import special as _special  # noqa: E402, F401 - registers its handlers
from . import storage_restore as _storage_restore  # noqa: E402
from . import tensor as _tensor  # noqa: E402
from . import trim as _trim  # noqa: E402
from . import views as _views  # noqa: E402, F401 - registers its handlers
from .distributed import env as _env  # noqa: E402
from .distributed.collectives import (  # noqa: E402 - multi-process data parallel
    all_gather,
    all_reduce,
    optimizer_step,
    reduce_gradients,
)
from .executor import (  # noqa: E402
    clear_compiled_cache,
    compiled_cache_size,
    sync,
    wait_device_ops,
)
from .loader import MpDeviceLoader, ParallelLoader  # noqa: E402
from .metrics import metrics_report, short_metrics_report  # noqa: E402
from .rng import XlaGenerator  # noqa: E402
from .rng import get_seed as get_rng_state  # noqa: E402
from .rng import set_seed as set_rng_state  # noqa: E402
from .runtime import (  # noqa: E402
    broadcast_master_param,
    device_type,
    global_ordinal,
    is_master_ordinal,
    launch,
    local_ordinal,
    master_print,
    mesh_reduce,
    rendezvous,
    world_size,
)
from .spmd.mesh import (  # noqa: E402 - SPMD sharding (torch_xla.distributed.spmd)
    Mesh,
    ShardingSpec,
    clear_sharding,
    get_global_mesh,
    is_spmd,
    mark_sharding,
    set_global_mesh,
    sharding_spec,
    use_spmd,
)
from .steps import (  # noqa: E402
    RateTracker,
    SampleGenerator,
    add_step_closure,
    compile,
    reset_runtime,
)
from .tensor import LazyTensor  # noqa: E402

_tensor.install_dispatcher(_dispatch.dispatch)
_trim.install()
_env.configure_devices()  # torch_xla's CPU_NUM_DEVICES, before JAX's backend starts
# Nothing in torch changes at import: what the device needs from torch is installed at its
# first use (``device()``, ``install()``) and undone by ``uninstall()`` (docs/lazy.md).

__all__ = [
    "LazyTensor",
    "Mesh",
    "MpDeviceLoader",
    "ParallelLoader",
    "RateTracker",
    "SampleGenerator",
    "ShardingSpec",
    "XlaGenerator",
    "add_step_closure",
    "all_gather",
    "all_reduce",
    "broadcast_master_param",
    "clear_compiled_cache",
    "clear_sharding",
    "compile",
    "compiled_cache_size",
    "device",
    "device_type",
    "get_global_mesh",
    "get_rng_state",
    "global_ordinal",
    "install",
    "is_lazy",
    "is_master_ordinal",
    "is_spmd",
    "launch",
    "local_ordinal",
    "manual_seed",
    "mark_sharding",
    "mark_step",
    "master_print",
    "mesh_reduce",
    "metrics",
    "metrics_report",
    "optimizer_step",
    "reduce_gradients",
    "rendezvous",
    "reset_runtime",
    "save",
    "set_global_mesh",
    "set_rng_state",
    "sharding_spec",
    "short_metrics_report",
    "sync",
    "uninstall",
    "use_spmd",
    "wait_device_ops",
    "world_size",
    "xla_device",
]


def _cache_from_environment() -> None:
    """As torch_xla: ``XLA_PERSISTENT_CACHE_PATH`` (or ``XLACACHE_DIR``) alone turns the
    persistent cache on at import, read-only with ``XLA_PERSISTENT_CACHE_READ_ONLY=1`` (or
    ``XLACACHE_READONLY``); the other ``XLACACHE_*`` settings apply too."""
    _variables.check_environment()  # a misspelled XLACACHE_* setting: one warning
    if _config.env_value("path") is None:  # XLACACHE_DIR, XLA_PERSISTENT_CACHE_PATH
        return
    import xlacache

    if xlacache.is_initialized():
        return
    try:
        xlacache.initialize_cache()
    except Exception as e:  # noqa: BLE001 - a cache never stops training
        import warnings

        warnings.warn(
            f"xlacache.lazy: the persistent cache named by the environment is off: {e}",
            stacklevel=3,
        )


_cache_from_environment()


def _guard_at_import() -> None:
    """The xla device guard, before anything runs a backward (``_device.install_guard``).
    Where it cannot be built now (torch 2.9 without a C++ compiler), ``device()`` says why."""
    with _contextlib.suppress(Exception):  # device() installs it again and raises why
        _device.install_guard()


_guard_at_import()


def _install_dynamo_rules() -> None:
    """Dynamo's trace rules for the runtime, if Dynamo is loaded (else the backend adds them
    at its first graph)."""
    import sys

    if "torch._dynamo" in sys.modules:
        from . import torch_internals

        torch_internals.dynamo_skips_runtime()


def install() -> None:
    """Install what the ``xla`` device needs from torch (``device()`` does it at first use):
    the device guard and the XLA-key factory kernels, ``torch.autocast("xla")``'s kernels,
    ``torch.Generator(device="xla")``, the seeding hook of ``torch.manual_seed``, Dynamo's
    trace rules, the control-flow operators' rules (``torch.cond``...), ``torch.load``'s
    restore to the device, optimizers' multi-tensor default (``optim_defaults``); backward
    passes of the calling thread run on it (``_backward_on_this_thread``).
    Nothing else changes for any other device; ``uninstall()`` undoes it."""
    if _device.active():
        return
    _device.activate(
        [
            lambda: _device.install(_factories.factory, _factories.XLA_KERNELS),
            _autocast.install,
            _rng.install_generator,
            _rng.install_seed_hook,
            _rng.install_device_module,
            _rng.install_rng_hops,
            _install_dynamo_rules,
            _control_flow.install,
            _backward_on_this_thread,
            _storage_restore.install,
            _optim_defaults_unless_loop,
        ]
    )


def _optim_defaults_unless_loop() -> Any:
    """Optimizers take their multi-tensor implementation on the device (``optim_defaults``)
    unless ``XLACACHE_LAZY_OPTIM_LOOP=1``."""
    return None if _lazy_setting("optim_loop") else _optim_defaults.install()


def _backward_on_this_thread() -> Any:
    """Backward passes started on this thread run on it, not on torch's autograd thread for
    the xla device: a backward of the lazy runtime is Python that dispatches work (the device
    runs asynchronously), and handing it to a device thread and back costs more than it runs
    (``XLACACHE_LAZY_AUTOGRAD_THREADS=1`` keeps torch's threads). The setting is torch's own,
    per thread (``torch.autograd.set_multithreading_enabled``); values are the same."""
    if _lazy_setting("autograd_threads"):
        return None
    switch = torch.autograd.set_multithreading_enabled(False)  # as a function: set now
    return lambda: switch.__exit__(None, None, None)


def uninstall() -> None:
    """Put torch's global functions back as torch had them (``torch.Generator``,
    ``torch.set_autocast_enabled``, the seeding hook); the ``xla`` device's own registrations
    (guard, factory and autocast kernels, Dynamo's rules for this package) stay, for the
    tensors still alive. ``reset_runtime`` calls it;
    the next ``device()`` installs again."""
    _device.deactivate()


def __getattr__(name: str) -> Any:
    """``xlacache.lazy.dynamo`` (the ``torch.compile`` backend), imported at first use: Dynamo
    is not imported with ``xlacache.lazy``."""
    if name == "dynamo":
        import importlib

        return importlib.import_module(".dynamo", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def device(index: int = 0) -> torch.device:
    """The lazy XLA device (``torch.device('xla:0')``); its first call installs what the
    device needs from torch (``install``)."""
    if index != 0:
        raise ValueError("xlacache.lazy has one device, xla:0")
    if not _device.active():
        install()
    return _device.DEVICE


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """torch_xla's ``xm.xla_device()``."""
    return device(0 if n is None else n)


def manual_seed(seed: int, device: Any = None) -> None:
    """``torch_xla.manual_seed``: reseed the device's random numbers (not torch's CPU ones)."""
    set_rng_state(int(seed))


def mark_step(wait: bool = False) -> None:
    """torch_xla's name for ``sync``."""
    sync(wait)


def is_lazy(t: Any) -> bool:
    return isinstance(t, LazyTensor)


def save(data: Any, path: Any, master_only: bool = True, global_master: bool = False) -> None:
    """``xm.save``: move tensors to CPU, then ``torch.save``. Load, then ``.to(device())``.

    In a multi-process job every process calls it (reading sharded values back is
    collective); with ``master_only`` only the master (of the host, or of the job with
    ``global_master``) writes, and the processes meet after the write."""
    sync()
    cpu = _serialization.map_tensors(data, lambda t: t.detach().cpu() if is_lazy(t) else t)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu, path)
    rendezvous("xlacache.lazy.save")
