"""IR nodes of the lazy graph.

A node is one recorded aten op (or a leaf: device data, a dynamic scalar, an RNG key). Its
``prefix`` (``identity.node_prefix``), shared by every node of the same op, attributes
(canonical typed encoding) and output shapes and dtypes, comes from the recording cache; a
graph's identity is its nodes' prefixes in post-order with their wiring
(``identity.graph_key``), so recording hashes nothing. A node's Merkle ``digest`` (its
prefix and its inputs' digests) is computed only when asked for.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from .identity import Placeholder, encode, encode_avals, node_digest, node_prefix, placeholder

__all__ = [
    "DATA",
    "EXACT_INT_SCALAR",
    "LEAF_OPS",
    "RANDOM",
    "RNG",
    "SCALAR",
    "Node",
    "Placeholder",
    "avals_code",
    "data_node",
    "dynamic_int",
    "int_scalar_node",
    "leaf_prefix",
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


_NODE_SEQ = itertools.count()


def nodes_made() -> int:
    """A number above every node's ``seq`` so far: the nodes made since an earlier call are
    at most the difference (it takes one number of the sequence)."""
    return next(_NODE_SEQ)


class Node:
    """One IR node. ``inputs`` are ``(node, output_index)`` pairs; ``avals`` its outputs;
    ``prefix`` the exact encoding of its op, attributes and avals (``identity.node_prefix``)."""

    __slots__ = (
        "op", "func", "inputs", "attrs", "avals", "prefix", "_digest", "data", "pos", "seq",
        "__weakref__",
    )  # fmt: skip

    def __init__(
        self,
        op: Any,
        inputs: tuple[tuple[Node, int], ...],
        attrs: Any,
        avals: tuple[Aval | None, ...],
        func: Any = None,
        data: Any = None,
        prefix: bytes | None = None,
    ) -> None:
        self.op = op
        self.func = func
        self.inputs = inputs
        self.attrs = attrs
        self.avals = avals
        self.data = data
        self.pos = -1  # scratch for toposort: its visit mark, then its place in the order
        self.seq = next(_NODE_SEQ)  # creation order: a node's inputs are older than it
        if prefix is None:
            prefix = node_prefix(op_code(op), encode(attrs), avals_code(avals))
        self.prefix = prefix
        self._digest: bytes | None = None

    @property
    def digest(self) -> bytes:
        """The node's Merkle digest (its prefix and its inputs' digests), computed when first
        asked for: graph keys are built from prefixes and wiring (``identity.graph_key``)."""
        if self._digest is None:
            stack: list[Node] = [self]
            while stack:  # iteratively: a long chain of nodes is no recursion
                n = stack[-1]
                todo = [m for m, _ in n.inputs if m._digest is None]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                if n._digest is None:
                    n._digest = node_digest(n.prefix, n.inputs)
        return self._digest  # type: ignore[return-value]

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAF_OPS

    def __repr__(self) -> str:
        return f"Node({self.op}, {[a[0] for a in self.avals if a is not None]})"


DATA = "data"  # device data: ``data`` is a jax array
SCALAR = "scalar"  # a Python number that may change between steps: a graph input, not a constant
RNG = "rng"  # the RNG key of one trace epoch: ``data`` is a uint32[2] numpy array
LEAF_OPS = frozenset((DATA, SCALAR, RNG))
RANDOM = (
    "random"  # a random draw (``random_ops.random_tensor``): inputs are the RNG leaf and tensors
)
_LEAF_PREFIX: dict[tuple, bytes] = {}  # a leaf's prefix depends on its kind and avals only


def leaf_prefix(op: str, avals: tuple) -> bytes:
    """The prefix of a leaf of kind ``op`` (``DATA``, ``SCALAR``, ``RNG``) with ``avals``."""
    d = _LEAF_PREFIX.get((op, avals))
    if d is None:
        d = _LEAF_PREFIX[(op, avals)] = node_prefix(op_code(op), "N", avals_code(avals))
    return d


def _leaf(op: str, avals: tuple, data: Any) -> Node:
    return Node(op, (), None, avals, data=data, prefix=leaf_prefix(op, avals))


def data_node(array: Any, dtype: torch.dtype) -> Node:
    """A leaf holding a materialized jax array (logical torch dtype ``dtype``)."""
    return _leaf(DATA, ((tuple(array.shape), dtype),), array)


_SCALAR_AVALS = (((), torch.float32),)
_SCALAR_PREFIX = leaf_prefix(SCALAR, _SCALAR_AVALS)


_INT_SCALAR_AVALS = (((), torch.int64),)
_INT_SCALAR_PREFIX = leaf_prefix(SCALAR, _INT_SCALAR_AVALS)
# Python ints up to this magnitude are graph inputs: the scalars travel as one float32 vector,
# which holds them exactly; larger ones stay constants
EXACT_INT_SCALAR = 2**24


def scalar_node(value: float) -> Node:
    """A float graph input (float32)."""
    return Node(SCALAR, (), None, _SCALAR_AVALS, data=float(value), prefix=_SCALAR_PREFIX)


def dynamic_int(x: int) -> bool:
    """Is the int ``x``, given to a ``Scalar`` argument, a graph input? All but 0 and 1, as
    torch_xla's scalars (which keeps those two as constants), while float32 holds them exactly."""
    return (x > 1 or x < 0) and -EXACT_INT_SCALAR <= x <= EXACT_INT_SCALAR


def int_scalar_node(value: int) -> Node:
    """An int graph input (int64 in the graph; ``|value| <= EXACT_INT_SCALAR``)."""
    return Node(SCALAR, (), None, _INT_SCALAR_AVALS, data=float(value), prefix=_INT_SCALAR_PREFIX)


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
