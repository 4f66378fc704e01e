"""IR nodes of the lazy graph.

A node is one recorded aten op (or a leaf: device data, a dynamic scalar, an RNG key). Its
``digest`` (``identity.node_digest``) is computed when it is recorded, from the op, its static
attributes (canonical typed encoding), its output shapes and dtypes and its inputs' digests, so
graph identity is exact and costs nothing extra at the barrier.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from .identity import Placeholder, encode, encode_avals, node_digest, node_prefix, placeholder

__all__ = [
    "DATA",
    "LEAF_OPS",
    "RANDOM",
    "RNG",
    "SCALAR",
    "Node",
    "Placeholder",
    "avals_code",
    "data_node",
    "leaf_digest",
    "op_code",
    "placeholder",
    "rng_node",
    "scalar_node",
    "toposort",
]

Aval = tuple[tuple[int, ...], torch.dtype]

_OP_CODES: dict[Any, str] = {}  # op (an OpOverload or a str) -> its name in digests
_AVAL_CODES: dict[tuple, str] = {}  # avals (tuples of ints and torch dtypes: exact keys)


def op_code(op: Any) -> str:
    """An op's stable name: ``aten.sum.dim_IntList`` for aten ops, ``:random`` for internal ones."""
    c = _OP_CODES.get(op)
    if c is None:
        c = _OP_CODES[op] = ":" + op if isinstance(op, str) else str(op)
    return c


def avals_code(avals: tuple) -> str:
    c = _AVAL_CODES.get(avals)
    if c is None:
        c = _AVAL_CODES[avals] = encode_avals(avals)
    return c


class Node:
    """One IR node. ``inputs`` are ``(node, output_index)`` pairs; ``avals`` its outputs."""

    __slots__ = ("op", "func", "inputs", "attrs", "avals", "digest", "data", "pos", "__weakref__")

    def __init__(
        self,
        op: Any,
        inputs: tuple[tuple[Node, int], ...],
        attrs: Any,
        avals: tuple[Aval | None, ...],
        func: Any = None,
        data: Any = None,
        prefix: bytes | None = None,
        digest: bytes | None = None,
    ) -> None:
        self.op = op
        self.func = func
        self.inputs = inputs
        self.attrs = attrs
        self.avals = avals
        self.data = data
        self.pos = -1  # scratch for toposort: its visit mark, then its place in the order
        if digest is None:
            if prefix is None:
                prefix = node_prefix(op_code(op), encode(attrs), avals_code(avals))
            digest = node_digest(prefix, inputs)
        self.digest = digest

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAF_OPS

    def __repr__(self) -> str:
        return f"Node({self.op}, {[a[0] for a in self.avals if a is not None]})"


DATA = "data"  # device data: ``data`` is a jax array
SCALAR = "scalar"  # a Python float that may change between steps: a graph input, not a constant
RNG = "rng"  # the RNG key of one trace epoch: ``data`` is a uint32[2] numpy array
LEAF_OPS = frozenset((DATA, SCALAR, RNG))
RANDOM = (
    "random"  # a random draw (``random_ops.random_tensor``): inputs are the RNG leaf and tensors
)
_LEAF_DIGEST: dict[tuple, bytes] = {}  # a leaf's digest depends on its kind and avals only


def leaf_digest(op: str, avals: tuple) -> bytes:
    """The digest of a leaf of kind ``op`` (``DATA``, ``SCALAR``, ``RNG``) with ``avals``."""
    d = _LEAF_DIGEST.get((op, avals))
    if d is None:
        d = node_digest(node_prefix(op_code(op), "N", avals_code(avals)), ())
        _LEAF_DIGEST[(op, avals)] = d
    return d


def _leaf(op: str, avals: tuple, data: Any) -> Node:
    return Node(op, (), None, avals, data=data, digest=leaf_digest(op, avals))


def data_node(array: Any, dtype: torch.dtype) -> Node:
    """A leaf holding a materialized jax array (logical torch dtype ``dtype``)."""
    return _leaf(DATA, ((tuple(array.shape), dtype),), array)


_SCALAR_AVALS = (((), torch.float32),)
_SCALAR_DIGEST = leaf_digest(SCALAR, _SCALAR_AVALS)


def scalar_node(value: float) -> Node:
    return Node(SCALAR, (), None, _SCALAR_AVALS, data=float(value), digest=_SCALAR_DIGEST)


def rng_node(key: Any) -> Node:
    return _leaf(RNG, (((2,), torch.int32),), key)


_VISITS = itertools.count(-2, -1)  # visit marks of toposort, below any position


def toposort(roots: list[tuple[Node, int]]) -> list[Node]:
    """Post-order list of the distinct nodes reachable from ``roots``; each node's ``pos`` is
    set to its place in the list (valid until the next toposort; callers hold the trace lock).
    """
    visit = next(_VISITS)
    order: list[Node] = []
    push = order.append
    stack: list[Any] = [n for n, _ in reversed(roots)]
    pop = stack.pop
    while stack:
        node = pop()
        if node.__class__ is tuple:  # (node,): all its inputs are placed
            node = node[0]
            node.pos = len(order)
            push(node)
            continue
        p = node.pos
        if p == visit or (0 <= p < len(order) and order[p] is node):  # seen in this sort
            continue
        node.pos = visit
        stack.append((node,))
        for inp, _ in reversed(node.inputs):
            p = inp.pos
            if p != visit and not (0 <= p < len(order) and order[p] is inp):
                stack.append(inp)
    return order
