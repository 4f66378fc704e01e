"""IR nodes of the lazy graph.

A node is one recorded aten op (or a leaf: device data, a dynamic scalar, an RNG key). Its hash is
computed when it is recorded, from the op, its static attributes, its inputs' hashes and its output
shapes and dtypes, so graph identity costs nothing extra at the barrier.
"""

from __future__ import annotations

from typing import Any

import torch

Aval = tuple[tuple[int, ...], torch.dtype]


class Node:
    """One IR node. ``inputs`` are ``(node, output_index)`` pairs; ``avals`` its outputs."""

    __slots__ = ("op", "func", "inputs", "attrs", "avals", "hash", "data", "__weakref__")

    def __init__(
        self,
        op: str,
        inputs: tuple[tuple[Node, int], ...],
        attrs: Any,
        avals: tuple[Aval, ...],
        func: Any = None,
        data: Any = None,
    ) -> None:
        self.op = op
        self.func = func
        self.inputs = inputs
        self.attrs = attrs
        self.avals = avals
        self.data = data
        self.hash = hash((op, attrs, avals, tuple((n.hash, i) for n, i in inputs)))

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAF_OPS

    def __repr__(self) -> str:
        return f"Node({self.op}, {[a[0] for a in self.avals]})"


DATA = "data"  # device data: ``data`` is a jax array
SCALAR = "scalar"  # a Python float that may change between steps: a graph input, not a constant
RNG = "rng"  # the RNG key of one trace epoch: ``data`` is a uint32[2] numpy array
LEAF_OPS = frozenset((DATA, SCALAR, RNG))


def data_node(array: Any, dtype: torch.dtype) -> Node:
    """A leaf holding a materialized jax array (logical torch dtype ``dtype``)."""
    return Node(DATA, (), None, ((tuple(array.shape), dtype),), data=array)


def scalar_node(value: float) -> Node:
    return Node(SCALAR, (), None, (((), torch.float32),), data=float(value))


class Placeholder:
    """Stands for the i-th input of a node inside its stored argument template."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i

    def __repr__(self) -> str:
        return f"%{self.i}"

    def __hash__(self) -> int:
        return hash(("%", self.i))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placeholder) and other.i == self.i


def toposort(roots: list[tuple[Node, int]]) -> list[Node]:
    """Post-order list of the distinct nodes reachable from ``roots``."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(n, False) for n, _ in reversed(roots)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for inp, _ in reversed(node.inputs):
            if id(inp) not in seen:
                stack.append((inp, False))
    return order
