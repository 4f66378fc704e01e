"""``torch.cond``, ``while_loop``, ``scan`` and ``map`` on lazy tensors, as eager runs them.

torch's control-flow operators have no rule for tensor subclasses; on lazy tensors they get
the kernels eager runs for CPU tensors (their ``CompositeExplicitAutograd`` kernels): ``cond``
reads its predicate on the host and runs one branch, ``while_loop`` reads its condition at
each turn (a graph split, as ``if x.item():``), and ``scan``/``map`` run their body once per
element, unrolled into the graph. With gradients, the same kernel runs above autograd, which
records what ran as for Python control flow; the fakes ``torch.compile`` traces keep torch's
autograd kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .tensor import LazyTensor

# the operators, by their names in ``torch.ops.higher_order`` (those this torch has)
_OPERATORS = ("cond", "while_loop", "while_loop_stack_output", "scan", "map_impl")


def operators() -> list[Any]:
    found = []
    for name in _OPERATORS:
        try:
            found.append(getattr(torch.ops.higher_order, name))
        except AttributeError:
            continue
    return found


def install() -> Callable[[], None]:
    """Give each operator eager's kernel for lazy tensors, below autograd (a rule for the lazy
    tensor classes) and above it (a kernel for ``AutogradXLA``, which defers to torch's for
    anything else); the undo."""
    from .tensor import PlainLazyTensor

    autograd_xla = torch._C.DispatchKey.AutogradXLA
    added: list[tuple[Any, Any]] = []
    for op in operators():
        dense = op.py_kernels.get(torch._C.DispatchKey.CompositeExplicitAutograd)
        autograd = op.py_kernels.get(torch._C.DispatchKey.Autograd)
        if dense is None or autograd is None:
            continue
        for cls in (LazyTensor, PlainLazyTensor):
            if cls not in op.python_key_table:
                op.py_impl(cls)(dense)
                added.append((op, cls))
        if autograd_xla not in op.py_kernels:
            op.py_impl(autograd_xla)(_above_autograd(dense, autograd))
            added.append((op, autograd_xla))

    def undo() -> None:
        for op, key in added:
            table = op.py_kernels if key is autograd_xla else op.python_key_table
            table.pop(key, None)
            op._dispatch_cache.clear()

    return undo


def _above_autograd(dense: Any, autograd: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if any(isinstance(t, LazyTensor) for t in tree_leaves((args, kwargs))):
            return dense(*args, **kwargs)
        return autograd(*args, **kwargs)  # fakes of xla tensors, in torch.compile's tracing

    return kernel
