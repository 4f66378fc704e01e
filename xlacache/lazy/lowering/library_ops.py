"""Lowerings of ops that libraries register with ``torch.library`` (not aten), by name.

Such an op exists only once its library is imported, so its entry joins ``LOWERINGS`` when the
runtime first meets it (``adopt``), and only if its schema is the one the lowering was written
for: another release's op with other arguments stays unlowered (CPU fallback, or a compiled
graph run lazily), never lowered wrongly.

``transformers::grouped_mm_fallback`` (and its backward) is what transformers' mixture-of-
experts layers call under ``torch.compile`` when the weights are not bfloat16: a loop of
``mm`` over each expert's rows after ``offs.tolist()``, opaque to Dynamo. It is the 2-d x 3-d
``_grouped_mm`` (rows grouped by the experts' end offsets, rows past the last one zero, as the
loop leaves them), lowered as a ragged dot.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from . import precision
from .checks import checked
from .linalg import _grouped_mm
from .registry import LOWERINGS


def grouped_mm_fallback(a: Any, b: Any, offs: Any, fp32_precision: str | None = None) -> Any:
    return _grouped_mm(a, b, offs, fp32_precision=fp32_precision)


def grouped_mm_fallback_backward(
    a: Any, b: Any, offs: Any, grad: Any, fp32_precision: str | None = None
) -> tuple[Any, Any]:
    """The gradients of ``a`` (rows grouped against each ``b[g]`` transposed) and of ``b``
    (one product per group over its rows; zero for a group without rows)."""
    kw = {"fp32_precision": fp32_precision}
    return _grouped_mm(grad, jnp.swapaxes(b, 1, 2), offs, **kw), _grouped_mm(a.T, grad, offs, **kw)


# "namespace::name" -> (the schema lowered, the lowering of its default overload); each is a
# matrix product whose float32 precision follows PyTorch's settings, as ``mm``'s
KNOWN: dict[str, tuple[str, Any]] = {
    "transformers::grouped_mm_fallback": (
        "transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor",
        grouped_mm_fallback,
    ),
    "transformers::grouped_mm_fallback_backward": (
        "transformers::grouped_mm_fallback_backward(Tensor input, Tensor weight, Tensor offs, "
        "Tensor grad_output) -> (Tensor, Tensor)",
        grouped_mm_fallback_backward,
    ),
}


def adopt(func: Any) -> bool:
    """Add ``func``'s lowering to ``LOWERINGS`` if it is a known library op with the schema
    it was written for; whether ``func`` is lowered now."""
    if func in LOWERINGS:
        return True
    known = KNOWN.get(getattr(func, "_schema", None) and func._schema.name)
    if known is None or func._overloadname != "default" or str(func._schema) != known[0]:
        return False
    LOWERINGS[func] = known[1]
    precision.OPS[func] = precision.MATMUL  # recorded with the op: part of the graph's key
    checked(func)  # the offsets, as _grouped_mm's
    return True


def adopt_registered() -> None:
    """``adopt`` each known op that its library has registered by now (before a Dynamo graph
    is planned: the graph names the op before the runtime meets it)."""
    for name in KNOWN:
        namespace, op = name.split("::")
        try:
            packet = getattr(getattr(torch.ops, namespace), op)
        except AttributeError:  # not registered (its library is not imported)
            continue
        adopt(packet.default)
