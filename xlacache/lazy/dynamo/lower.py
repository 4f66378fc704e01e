"""An AOTAutograd FX graph -> one JAX function, through the lazy runtime's lowering table.

Each ``call_function`` node runs its ``LOWERINGS`` entry on JAX values, as the lazy executor
does for an IR node: the arguments in the aten schema's order, float ``Scalar`` arguments as
float32 values (the lazy runtime makes them float32 graph inputs; on float64/complex128
values they stay exact Python floats), and the result cast to the dtype and shape that the
node's fake tensor (``meta["val"]``) says, with the executor's own ``conform_result``. A graph whose
nodes are not all lowerable is not built (``unsupported`` names the first such node): it
runs lazily instead.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_aggregate

from ..executor import conform_result
from ..lowering import LOWERINGS, precision
from ..record import WIDE_DTYPES, op_info

aten = torch.ops.aten

# ops with no lowering of their own whose value is their (first) input's
_IDENTITY = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}
# functional ops the lazy runtime handles outside its lowering table (``special.py``); the
# result is cast and broadcast to the node's dtype and shape like every lowering's
_LOCAL: dict[Any, Callable[..., Any]] = {
    aten.copy.default: lambda dst, src, non_blocking=False: src,
}


def _lowering(t: Any) -> Callable[..., Any] | None:
    return _LOCAL.get(t) or LOWERINGS.get(t)


def _fake(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def unsupported(gm: GraphModule) -> str | None:
    """Why ``gm`` cannot be one JAX function (None: it can)."""
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            if not _fake(v):
                return f"input {n.name} is {type(v).__name__}, not a tensor (symbolic shapes?)"
            if v.device.type != "xla":
                return f"input {n.name} is on {v.device}, not xla"
        elif n.op == "get_attr":
            c = getattr(gm, n.target, None)
            if not isinstance(c, torch.Tensor) or c.device.type != "cpu":
                return f"constant {n.target} is not a CPU tensor"
        elif n.op == "call_function":
            t = n.target
            if t is operator.getitem or t in _IDENTITY:
                continue
            if _lowering(t) is None:
                return f"{t} has no lowering"
            vals = n.meta.get("val")
            for v in vals if isinstance(vals, (tuple, list)) else (vals,):
                if v is not None and not _fake(v):
                    return f"{t} returns {type(v).__name__}"
        elif n.op != "output":
            return f"{n.op} node {n.name}"
    return None


def _aval(v: Any) -> tuple | None:
    return None if v is None else (tuple(int(s) for s in v.shape), v.dtype)


def _wide(n: Node) -> bool:
    dts = [a.meta["val"].dtype for a in n.all_input_nodes if _fake(a.meta.get("val"))]
    vals = n.meta.get("val")
    for v in vals if isinstance(vals, (tuple, list)) else (vals,):
        if _fake(v):
            dts.append(v.dtype)
    return any(d in WIDE_DTYPES for d in dts)


def _scalars(n: Node, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Float ``Scalar`` arguments as the lazy recorder gives them to lowerings."""
    if _wide(n):
        return args, kwargs
    op = op_info(n.target)
    args = tuple(
        np.float32(a) if type(a) is float and i in op.spos else a for i, a in enumerate(args)
    )
    kwargs = {
        k: np.float32(a) if type(a) is float and k in op.snames else a for k, a in kwargs.items()
    }
    return args, kwargs


def _fp32(n: Node, now: dict[str, str]) -> dict[str, str]:
    """The float32 precision keyword of a matmul or convolution on float32 values (as the lazy
    recorder gives it, from the settings ``now``), else nothing."""
    kind = precision.OPS.get(n.target)
    if kind is None:
        return {}
    dts = [a.meta["val"].dtype for a in n.all_input_nodes if _fake(a.meta.get("val"))]
    value = precision.attribute(kind, dts, now)
    return {} if value is None else {precision.ATTRIBUTE: value}


def build(
    gm: GraphModule, now: dict[str, str] | None = None
) -> tuple[Callable[..., list], list[int | None]]:
    """``(fn, outs)``: ``fn(*arrays)`` returns the graph's tensor outputs that are computed
    (not inputs, not None); ``outs[j]`` says where output ``j`` comes from: ``("in", i)`` the
    graph's input ``i``, ``("out", k)`` the function's result ``k``, or None. Float32 matrix
    products and convolutions lower with the precision settings ``now`` (default: torch's
    now, ``precision.settings``)."""
    now = precision.settings() if now is None else now
    nodes = list(gm.graph.nodes)
    consts = {
        n.target: jnp.asarray(getattr(gm, n.target).numpy()) for n in nodes if n.op == "get_attr"
    }
    placeholders = [n for n in nodes if n.op == "placeholder"]
    (out_node,) = [n for n in nodes if n.op == "output"]
    results = out_node.args[0]
    results = list(results) if isinstance(results, (tuple, list)) else [results]
    where: list[Any] = []
    computed: list[Node] = []
    for r in results:
        if r is None:
            where.append(None)
        elif r.op == "placeholder":
            where.append(("in", placeholders.index(r)))
        else:
            where.append(("out", len(computed)))
            computed.append(r)
    steps = []
    for n in nodes:
        if n.op == "call_function":
            t = n.target
            fn = None if t is operator.getitem or t in _IDENTITY else _lowering(t)
            vals = n.meta.get("val")
            avals = (
                tuple(_aval(v) for v in vals) if isinstance(vals, (tuple, list)) else (_aval(vals),)
            )
            steps.append((n, fn, avals, isinstance(vals, (tuple, list)), str(t), _fp32(n, now)))

    def fn(*arrays: Any) -> list:
        env: dict[Node, Any] = dict(zip(placeholders, arrays, strict=True))
        for n in nodes:
            if n.op == "get_attr":
                env[n] = consts[n.target]

        def look(a: Any) -> Any:
            return env[a] if isinstance(a, Node) else a

        for n, low, avals, multi, name, fp32 in steps:
            args = map_aggregate(n.args, look)
            kwargs = map_aggregate(n.kwargs, look)
            if n.target is operator.getitem:
                env[n] = args[0][args[1]]
                continue
            if low is None:
                env[n] = args[0]
                continue
            args, kwargs = _scalars(n, args, kwargs)
            if fp32:
                kwargs = {**kwargs, **fp32}
            try:
                res = low(*args, **kwargs)
            except Exception as e:
                raise RuntimeError(f"xlacache.lazy.dynamo: lowering {name} failed: {e}") from e
            if multi:
                res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
                env[n] = tuple(conform_result(r, a, name) for r, a in zip(res, avals, strict=False))
            else:
                if isinstance(res, (tuple, list)):
                    res = res[0]
                env[n] = conform_result(res, avals[0], name)
        return [env[r] for r in computed]

    return fn, where
