"""Graph outputs that are views of graph inputs, made on the inputs themselves.

AOTAutograd rebuilds such an output from the input after the compiled graph runs. When none of
the view ops has a symbolic argument it replays them (the plan keeps the program's result: no
op traced per call); otherwise it takes the output's ``_base`` and view function, or else
``input.as_strided(out.size(), out.stride(), out.storage_offset())``. A result the program
computed is a new contiguous tensor, so after a recompile with dynamic sizes (``x[:, n:]`` with
``n`` changing between calls) that read the wrong elements. The plan gives such an output (of
an input, or of the value the graph gives an input in place) as the graph's view ops applied
lazily to this call's input instead (``replay``): a view with ``_base``, exact whatever the
sizes, and it stays aliased with the input, as eager's output does.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node
from torch.fx.node import map_arg


def updated_inputs(nodes: list[Node], mutation: Any) -> dict[Node, Node]:
    """Each value the graph gives an input in place (``mutation(placeholder, value)``), and
    that input."""
    return {
        n.args[1]: n.args[0]
        for n in nodes
        if n.op == "call_function" and n.target is mutation and n.args[0].op == "placeholder"
    }


def base_input(n: Node, updated: dict[Node, Node]) -> tuple[Node, Node] | None:
    """``(start, placeholder)`` when ``n`` is a view, through view ops alone (their other
    arguments no tensors, one of them symbolic: else AOTAutograd replays them itself), of
    ``start``: a placeholder, or the value ``updated`` says a placeholder is given in place
    (``copy_(placeholder, start)``); else None."""
    symbolic = False
    while n.op == "call_function":
        if n in updated:
            return (n, updated[n]) if symbolic else None
        op = n.target
        if not getattr(op, "is_view", False):  # an aten op whose output views its input
            return None
        if not n.args or not isinstance(n.args[0], Node):
            return None
        rest: list[Node] = []
        map_arg((n.args[1:], n.kwargs), rest.append)
        if any(isinstance(m.meta.get("val"), torch.Tensor) for m in rest):
            return None
        symbolic = symbolic or bool(rest)  # a size or an int argument given per call
        n = n.args[0]
    return (n, n) if n.op == "placeholder" and symbolic else None


def replay(n: Node, start: Node, base: Any, placeholders: list[Node], args: list) -> Any:
    """``n``'s value computed lazily from ``base`` (the input ``start`` stands for) and this
    call's ``args`` (the graph's inputs, in its placeholders' order, for the int arguments):
    the view ops and the int arithmetic of their arguments. A lazy view follows its input's
    later updates, so it may be made before the graph's updates are given to the inputs."""
    env: dict[Node, Any] = dict(zip(placeholders, args, strict=True))
    env[start] = base

    def value(m: Node) -> Any:
        if m not in env:
            args_, kwargs = map_arg((m.args, m.kwargs), value)
            env[m] = m.target(*args_, **kwargs)
        return env[m]

    return value(n)
