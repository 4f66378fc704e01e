"""The Dynamo graph before AOTAutograd: where torch's compiled path computes other numbers
than eager's, put right (``restore_inplace_ops``) or refused (``wrong_in_aot``: the graph then
runs lazily, where the runtime's own ops give eager's numbers or a clear error).

* Dynamo's own decompositions (its ``enable_dynamo_decompositions`` setting, on by default;
  made for Inductor) write ``t.addcmul_(a, b, value=v)`` as
  ``t.copy_(prims.fma(a * b, v, t))`` and ``t.addcdiv_(a, b, value=v)`` as
  ``t.copy_(prims.fma(a / b, v, t))``. On an integer ``t`` eager converts ``v`` to the integer
  type (``value=0.5`` adds nothing) where the fma adds ``0.5 * a * b`` and the copy truncates;
  on floats the product and quotient round in another order. The in-place calls are put
  back: AOTAutograd's functionalization takes them to ``aten.addcmul``/``aten.addcdiv`` and
  their lowerings, as the lazy runtime runs them.
* Calls AOTAutograd decomposes with torch's Python kernel whatever the decomposition table
  says, where that kernel is not eager's (torch 2.13: ``multilabel_margin_loss`` counts the
  positions after a target's -1 as class 0).
* In-place writes through an ``unfold`` or ``expand`` view (torch 2.13, Inductor too):
  functionalization writes the view back into a new base of zeros (an ``unfold`` view's
  write zeroes the elements it leaves out) or sums each repeat's write (an ``expand``
  view's ``fill_(7)`` writes 25 for 7 when a value shares three repeats).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.multiprocessing.reductions import StorageWeakRef

aten = torch.ops.aten
_FMA_OF = {torch.mul: "addcmul_", torch.div: "addcdiv_"}  # what Dynamo's fma came from
_WRONG_CALLS = (
    torch.nn.functional.multilabel_margin_loss,
    torch._C._nn.multilabel_margin_loss,
    aten.multilabel_margin_loss.default,
    aten.multilabel_margin_loss_forward.default,
)
_WRITE_BACK_WRONG = frozenset({"unfold", "expand", "expand_as", "broadcast_to"})


def restore_inplace_ops(gm: GraphModule) -> int:
    """Rewrite each ``t.copy_(prims.fma(torch.mul(a, b), v, t))`` (and ``torch.div``) of
    ``gm`` as ``t.addcmul_(a, b, value=v)`` (``addcdiv_``); returns how many it rewrote."""
    fma = getattr(getattr(torch.ops.prims, "fma", None), "default", None)
    if fma is None:
        return 0
    rewritten = 0
    for copy in list(gm.graph.find_nodes(op="call_method", target="copy_")):
        method = _undone(copy, fma)
        if method is None:
            continue
        dst, fused = copy.args
        product = fused.args[0]
        with gm.graph.inserting_before(copy):
            call = gm.graph.call_method(method, (dst, *product.args), {"value": fused.args[1]})
        call.meta = copy.meta
        copy.replace_all_uses_with(call)
        for node in (copy, fused, product):
            gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def _undone(copy: Node, fma: Any) -> str | None:
    """The in-place method a ``copy_`` node stands for, or None."""
    if len(copy.args) != 2 or copy.kwargs:
        return None
    dst, fused = copy.args
    if not isinstance(fused, Node) or fused.target is not fma or len(fused.users) != 1:
        return None
    if len(fused.args) != 3 or fused.kwargs or fused.args[2] is not dst:
        return None
    product = fused.args[0]
    if not isinstance(product, Node) or product.op != "call_function" or product.kwargs:
        return None
    if len(product.args) != 2 or len(product.users) != 1:
        return None
    return _FMA_OF.get(product.target)


def wrong_in_aot(gm: GraphModule) -> str | None:
    """Why AOTAutograd would give ``gm`` other numbers than eager's, or None."""
    for target in _WRONG_CALLS:
        if gm.graph.find_nodes(op="call_function", target=target):
            name = getattr(target, "__name__", str(target))
            return f"{name}: torch's decomposition in AOTAutograd is not eager's"
    return _write_through_view(gm)


def _write_through_view(gm: GraphModule) -> str | None:
    """An in-place write into a view of an ``unfold``/``expand`` view (or into one)."""
    viewing: dict[Node, str] = {}  # node -> the view op its value is a view through
    for n in gm.graph.nodes:
        if n.op not in ("call_method", "call_function"):
            continue
        name = _name(n)
        written = _written(n, name)
        if written is not None and written in viewing:
            return (
                f"an in-place {name} through a view made by {viewing[written]}: AOTAutograd writes "
                "it back wrongly"
            )
        if name in _WRITE_BACK_WRONG:
            viewing[n] = name
            continue
        viewed = [inp for inp in n.all_input_nodes if inp in viewing]
        if not viewed:
            continue  # the common case: no storage to look up
        storage = _storage(n)
        for inp in viewed:
            if storage is not None and storage == _storage(inp):
                viewing[n] = viewing[inp]  # a view of such a view (or the write's result)
                break
    return None


def _name(n: Node) -> str:
    if n.op == "call_method":
        return str(n.target)
    return getattr(n.target, "__name__", "").split(".")[0]


def _written(n: Node, name: str) -> Node | None:
    """The node whose value ``n`` writes in place, or None."""
    out = n.kwargs.get("out")
    if isinstance(out, Node):
        return out
    if (name.endswith("_") and not name.endswith("__")) or name == "setitem":
        first = n.args[0] if n.args else None
        return first if isinstance(first, Node) else None
    return None


def _storage(n: Node) -> StorageWeakRef | None:
    value = n.meta.get("example_value")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except (NotImplementedError, RuntimeError):  # a layout with no storage
        return None
