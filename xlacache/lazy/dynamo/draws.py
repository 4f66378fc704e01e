"""Random draws in compiled graphs: the ops AOTAutograd's graphs draw with (dropout is
``rand_like``), each lowered as the lazy runtime's draw of its kind (``lower_random``), keyed
by the call's key (``rng.compiled_key``, an input of the program) and the draw's number.

A checkpointed region that draws reaches the graphs as torch's RNG-state operators: the
forward's ``run_and_save_rng_state(op, ...)`` draws and returns the state its backward's
``run_with_rng_state(state, op, ...)`` draws the same numbers from. The forward's state is a
CPU tensor made on the host from the call's key and the draw's number (``rng.compiled_state``);
the backward takes it as four words (``rng.state_words``: also a state the lazy runtime saved,
where the forward ran lazily) and draws with that key and number.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_aggregate

from .. import rng
from ..lowering import lower_random
from ..lowering.random import check_numbers

aten, prims = torch.ops.aten, torch.ops.prims

# each op: the lazy runtime's kind of draw, and its parameters from the node's arguments
RANDOM: dict[Any, tuple[str, Callable[..., tuple]]] = {
    aten.rand_like.default: ("uniform_", lambda x, **kw: ()),
    aten.randn_like.default: ("normal_", lambda x, **kw: ()),
    aten.rand.default: ("uniform_", lambda size, **kw: ()),
    aten.randn.default: ("normal_", lambda size, **kw: ()),
    aten.bernoulli.p: ("bernoulli_", lambda x, p=0.5, **kw: (p,)),
    aten.bernoulli.default: ("bernoulli_tensor", lambda x, **kw: (x,)),
    aten.bernoulli.Tensor: ("bernoulli_", lambda x, p, **kw: (p,)),
    aten.uniform.default: ("uniform_", lambda x, lo=0.0, hi=1.0, **kw: (lo, hi)),
    aten.exponential.default: ("exponential_", lambda x, lambd=1.0, **kw: (lambd,)),
    aten.normal_functional.default: ("normal_", lambda x, mean=0.0, std=1.0, **kw: (mean, std)),
    aten.normal.Tensor_Tensor: ("normal_", lambda mean, std, **kw: (mean, std)),
    aten.normal.Tensor_float: ("normal_", lambda mean, std=1.0, **kw: (mean, std)),
    aten.normal.float_Tensor: ("normal_", lambda mean, std, **kw: (mean, std)),
    prims.uniform.default: ("uniform_", lambda shape, *, low, high, **kw: (low, high)),
    prims.normal.default: ("normal_", lambda shape, *, mean, std, **kw: (mean, std)),
}
SAVES, REPLAYS = run_and_save_rng_state, run_with_rng_state
# draws the lazy runtime makes on the host, from the CPU generator (``factories.py``): in a
# compiled graph, made on the host at each call and given to the program as inputs
HOST = {aten.randint.default, aten.randint.low, aten.randperm.default}


def host_drawable(n: Node, ints: set[Node]) -> bool:
    """Can ``n`` be drawn on the host before its program runs: its sizes and bounds are
    constants or the int inputs ``ints``, and it has no generator of its own?"""
    nodes: list[Node] = []
    map_aggregate((n.args, n.kwargs), lambda a: nodes.append(a) if isinstance(a, Node) else a)
    val = n.meta.get("val")
    numpy_dtype = isinstance(val, torch.Tensor) and val.dtype not in _NOT_NUMPY
    return numpy_dtype and set(nodes) <= ints and n.kwargs.get("generator") is None


_NOT_NUMPY = {torch.bfloat16, torch.complex32}  # no numpy array for these: the graph runs lazily


def draw_on_host(n: Node, ints: dict[Node, int]) -> np.ndarray:
    """The host draw ``n`` made now, as the lazy runtime makes it: on the CPU generator (its
    int inputs' values ``ints``)."""
    args, kwargs = map_aggregate(
        (n.args, n.kwargs), lambda a: ints[a] if isinstance(a, Node) else a
    )
    return n.target(*args, **{**kwargs, "device": "cpu", "pin_memory": False}).numpy()


def draws_with_key(n: Node) -> bool:
    """Does ``n`` draw with the call's key (a plain draw, or one whose state it saves)?"""
    return n.op == "call_function" and (n.target in RANDOM or n.target is SAVES)


def sites(nodes: list[Node]) -> dict[Node, int]:
    """Each draw's number in its graph (the index folded into the call's key)."""
    return {n: i for i, n in enumerate(n for n in nodes if draws_with_key(n))}


def is_state_input(n: Node) -> bool:
    """Is placeholder ``n`` a saved RNG state (read only by ``run_with_rng_state``)?"""
    users = list(n.users)
    return bool(users) and all(u.target is REPLAYS and u.args[0] is n for u in users)


def saved_state(r: Node) -> Node | None:
    """The ``run_and_save_rng_state`` node whose state ``r`` is, else None."""
    if r.op == "call_function" and r.target is operator.getitem and r.args[1] == 0:
        src = r.args[0]
        if isinstance(src, Node) and src.target is SAVES:
            return src
    return None


def unlowerable(n: Node) -> str | None:
    """Why the draw ``n`` (a random op or an RNG-state operator) cannot be lowered."""
    op = n.args[0] if n.target is SAVES else n.args[1] if n.target is REPLAYS else n.target
    if op not in RANDOM:
        return f"{n.target} of {op}, which has no lowering"
    if n.kwargs.get("generator") is not None:
        return f"{op} draws from a generator of its own"
    if n.target is op:  # a plain draw (not an RNG-state operator wrapping one)
        kind, params = RANDOM[op]
        try:
            check_numbers(kind, params(*n.args, **n.kwargs))
        except RuntimeError as e:  # run lazily: the lazy runtime raises it, as eager does
            return f"{op}: {e}"
    return None


def drawn(n: Node, concrete: Callable[[Any], int]) -> tuple[Any, tuple]:
    """The op an RNG-state operator ``n`` draws with, and its result's shape and dtype (the
    operator's node carries no value: its op runs on meta tensors, sizes under the binding)."""
    op, args = (n.args[0], n.args[1:]) if n.target is SAVES else (n.args[1], n.args[2:])

    def meta(a: Any) -> Any:
        v = a.meta["val"] if isinstance(a, Node) else a
        if isinstance(v, torch.Tensor):
            return torch.empty([concrete(s) for s in v.shape], dtype=v.dtype, device="meta")
        return concrete(v) if isinstance(v, torch.SymInt) else v

    kwargs = dict(n.kwargs)
    if any(a.name == "device" for a in op._schema.arguments):  # a factory (``rand``)
        kwargs["device"] = "meta"
    out = op(*map_aggregate(args, meta), **kwargs)
    return op, (tuple(out.shape), out.dtype)


def _draw(op: Any, out: tuple, key: Any, index: Any, args: tuple, kwargs: dict) -> Any:
    kind, params = RANDOM[op]
    ps = params(*args, **kwargs)  # (``generator``: None, the plan checked)
    return lower_random(key, kind=kind, index=index, shape=out[0], dtype=out[1], params=ps)


def draw(op: Any, index: int, out: tuple) -> Callable[..., Any]:
    """The lowering of the ``index``-th random draw of a graph, whose result is ``out``:
    ``lowered(key, *args)``, ``key`` the call's (``rng.compiled_stream``)."""
    return lambda key, *args, **kwargs: _draw(op, out, key, index, args, kwargs)


def saving(n: Node, index: int, concrete: Callable[[Any], int]) -> Callable[..., Any]:
    """``run_and_save_rng_state(op, ...)`` as draw ``index``: its state comes from the host."""
    op, out = drawn(n, concrete)
    return lambda key, _op, *args, **kwargs: (None, _draw(op, out, key, index, args, kwargs))


def replaying(n: Node, concrete: Callable[[Any], int]) -> Callable[..., Any]:
    """``run_with_rng_state(state, op, ...)``: the draw with the key and number the state's
    words give (``rng.state_words``), the call's own key unused."""
    op, out = drawn(n, concrete)

    def lowered(_key: Any, words: Any, _op: Any, *args: Any, **kwargs: Any) -> Any:
        key = jnp.where(words[3] != 0, rng.compiled_stream(words[:2]), words[:2])
        return _draw(op, out, key, words[2], args, kwargs)

    return lowered


def lazy_graph(gm: GraphModule) -> GraphModule:
    """``gm`` to run op by op on lazy tensors: a copy calling the lazy runtime's own RNG-state
    operators (``rng.run_and_save_rng_state``...) where it has torch's, whose dispatch of a
    draw with no tensor argument (``rand(..., device=xla)``) knows only torch's devices."""
    ours = {SAVES: rng.run_and_save_rng_state, REPLAYS: rng.run_with_rng_state}
    if not any(n.target in ours for n in gm.graph.nodes):
        return gm
    graph = Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    for n in graph.nodes:
        n.target = ours.get(n.target, n.target)
    return GraphModule(gm, graph)
