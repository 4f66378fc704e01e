"""Makes torch's built-in ``xla`` device usable without torch_xla.

Two things a C++ backend normally provides are set up here:

* a device guard for ``DeviceType::XLA``: autograd asks for one whenever it records a tensor on a
  device (``torch_internals.install_xla_guard``: c10's guard registry, per torch release);
* kernels on the ``XLA`` dispatch key for the factory ops that allocate (``empty``,
  ``empty_strided``, ``arange``...). Everything else reaches ``LazyTensor.__torch_dispatch__``
  because lazy tensors carry the Python dispatch key;
* ``as_strided_``'s metadata kernel on the ``XLA`` key: torch's (a composite kernel for
  "non-functional" backends) leaves XLA out, and AOTAutograd's functional wrappers of ``xla``
  fakes apply in-place view ops (``squeeze_``, ``transpose_``...) with it;
* ``one_hot`` on the ``AutogradXLA`` key: torch's composite kernel writes it as
  ``eq(x.unsqueeze(-1), arange(n))`` for any tensor with the Python key (lazy tensors, and
  the fakes ``torch.compile`` traces), where a class past ``n`` gives a row of zeros; its
  kernel for the ``xla`` device itself scatters the ones and lets the scatter's device check
  raise, and so does this one, for lazy tensors and in compiled graphs; ``ctc_loss`` with
  lengths in tensors is there too (``xla_ctc_loss``).

The guard is registered at import (``install_guard``), as torch_xla's extension does: torch's
autograd engine sizes its per-device queues once, at the process's first backward, from the
guards registered then, so a guard that comes later (a CPU backward first, then the device)
crashes every backward on the device. The factory kernels are registered when the device is
first used (``xl.device()``). Both concern the ``xla`` device only; ``activate``/``deactivate``
also run what the rest of the runtime installs then (the undo of each is kept for
``xl.uninstall()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import torch_internals

DEVICE = torch.device("xla:0")
aten = torch.ops.aten
_state: dict[str, Any] = {"done": False, "libs": [], "undo": []}
# the allocating factory ops (those this torch has get an XLA-key kernel)
_FACTORIES = """
empty.memory_format empty_strided arange arange.start arange.start_step full zeros ones
scalar_tensor logspace triu_indices tril_indices _efficientzerotensor linspace eye eye.m randn
rand randint randint.low randint.generator randint.low_generator randperm randperm.generator
kaiser_window kaiser_window.periodic kaiser_window.beta
"""


def install(factory: Callable[[Any, tuple, dict], Any], kernels: dict[Any, Callable]) -> None:
    """Install the guard, route XLA-key factory ops to ``factory(func, args, kwargs)`` and
    each op of ``kernels`` (ops torch runs with no Python key: ``aten::_copy_from``...) to its
    kernel."""
    if _state["done"]:
        return
    install_guard()
    lib = torch.library.Library("aten", "IMPL")
    for op in torch_internals.aten_ops(*_FACTORIES.split()):
        lib.impl(op, _bind(factory, op), "XLA")
    for op, kernel in kernels.items():
        lib.impl(op, kernel, "XLA")
    strided_ = torch.ops.aten.as_strided_.default
    if not strided_.has_kernel_for_dispatch_key(torch._C.DispatchKey.XLA):  # torch_xla's wins
        lib.impl(strided_, _as_strided_, "XLA")
    for op, kernel in ((aten.one_hot.default, xla_one_hot), (aten.ctc_loss.Tensor, xla_ctc_loss)):
        if not op.has_kernel_for_dispatch_key(torch._C.DispatchKey.AutogradXLA):
            lib.impl(op, kernel, "AutogradXLA")
    _state["libs"].append(lib)
    _state["done"] = True


def install_guard() -> None:
    """Register the ``DeviceType::XLA`` guard (once per process; kept alive)."""
    if "guard" not in _state:
        _state["guard"] = torch_internals.install_xla_guard()


def _as_strided_(t: torch.Tensor, size: Any, stride: Any, storage_offset: Any = None) -> Any:
    """Set ``t``'s sizes, strides and offset: the kernel torch runs for CPU tensors."""
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    return torch.ops.aten.as_strided_.default.redispatch(cpu, t, size, stride, storage_offset)


def xla_one_hot(x: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """``F.one_hot``: the kernel torch runs for ``xla`` tensors without the Python key (its
    ``at::native::one_hot``): a class outside ``[0, num_classes)`` fails the scatter's index
    check (``DeviceIndexError``, a ``RuntimeError`` as eager's), where torch's kernel for
    tensors with the Python key (``eq`` with an ``arange``) gives a row of zeros."""
    if x.dtype != torch.long:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if x.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        return torch.empty((*x.shape, num_classes), dtype=x.dtype, device=x.device)
    if num_classes == -1:
        num_classes = int(x.max().item()) + 1
    elif num_classes < 1:
        raise RuntimeError("num_classes should be positive")
    out = torch.zeros((*x.shape, num_classes), dtype=x.dtype, device=x.device)
    return out.scatter_(-1, x.unsqueeze(-1), 1)


def xla_ctc_loss(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    *args: Any,
) -> torch.Tensor:
    """``F.ctc_loss`` with lengths in tensors: eager reads them on the host, so lengths on the
    CPU go with log-probabilities on a device (torch's own example); torch's kernel for
    tensors with the Python key divides by ``target_lengths`` where they are, mixing devices.
    Lengths go to the log-probabilities' device first, then that kernel runs."""
    il, tl = (x.to(log_probs.device) for x in (input_lengths, target_lengths))
    return aten.ctc_loss.Tensor.decompose(log_probs, targets, il, tl, *args)


def _bind(factory: Callable[[Any, tuple, dict], Any], op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return factory(op, args, kwargs)

    return kernel


def activate(steps: list[Callable[[], Callable[[], None] | None]]) -> None:
    """Run each install step once (at the device's first use), keeping each one's undo."""
    if _state.get("active"):
        return
    _state["active"] = True
    for step in steps:
        undo = step()
        if undo is not None:
            _state["undo"].append(undo)


def active() -> bool:
    return bool(_state.get("active"))


def deactivate() -> None:
    """Undo what ``activate`` installed in torch's global functions, newest first. The xla
    device's own registrations (its guard, its factory kernels) stay: they concern no other
    device, and live tensors need them."""
    while _state["undo"]:
        _state["undo"].pop()()
    _state["active"] = False
