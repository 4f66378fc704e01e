"""An AOTAutograd FX graph -> a ``Plan`` -> one JAX function per concrete shape binding.

``plan(gm)`` reads the graph once: what each input is (a device tensor, a 0-d CPU tensor, an
int), which inputs the graph updates in place (AOTAutograd keeps input mutations in the graph
as ``copy_`` nodes: ``keep_inference_input_mutations``), which outputs are inputs, device
values or CPU values, and why the graph cannot be lowered (``Plan.reason``). ``build(plan,
binding)`` turns it into a JAX function for one binding of its symbolic sizes (none for a
static graph): each ``call_function`` node runs its ``LOWERINGS`` entry on JAX values, as the
lazy executor does for an IR node: the arguments in the aten schema's order, float ``Scalar``
arguments as float32 values (the lazy runtime makes them float32 graph inputs; on
float64/complex128 values they stay exact Python floats), and the result cast to the dtype and
shape the node's fake tensor says (``meta["val"]``, its sizes evaluated under the binding),
with the executor's own ``conform_result``; size arithmetic (``sym_size``, ``operator.mul``...)
runs on Python ints.

0-d CPU tensors (an optimizer's ``step`` counters, a learning rate held in a tensor) enter the
program as values packed per dtype (one transfer each); the CPU tensors a graph updates get
their new values from the graph's CPU-only part, run on the host by torch (``Plan.host``), so
no value comes back from the device; an optimizer's counters, which only add 1, in one
``_foreach_add_`` (``Plan.counter_step``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
import torch._inductor.inductor_prims  # noqa: F401 - defines prims.fma (Dynamo's addcmul_)
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_aggregate

from ..executor import conform_result
from ..foreach import foreach_element, over_lists
from ..lowering import ARGUMENT_CHECKS, LOWERED_IF, LOWERINGS, precision
from ..lowering.checks import CHECKED_OPS, returning_checks
from ..lowering.elementwise import register_fma
from ..meta_inference import WIDE_DTYPES
from ..record import op_info
from ..rng import compiled_stream
from . import draws, input_views, strided
from .draws import RANDOM, REPLAYS, SAVES
from .sizes import SIZE_OPS as _SIZES
from .sizes import aval, concrete

aten = torch.ops.aten
_WIDE_JAX = (jnp.float64, jnp.complex128)

DEVICE, HOST, INT, RNG = "device", "host", "int", "rng"  # the kinds of graph inputs (RNG: a
# saved RNG state, ``draws.py``)

# ops with no lowering of their own whose value is their (first) input's
_IDENTITY = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}
# functional ops the lazy runtime handles outside its lowering table (``special.py``); the
# result is cast and broadcast to the node's dtype and shape like every lowering's
_LOCAL: dict[Any, Callable[..., Any]] = {
    aten.copy.default: lambda dst, src, non_blocking=False: src,
    # the lazy runtime's allocating factories (``factories.py``): zeros of the node's shape
    aten.empty.memory_format: lambda *args, **kwargs: 0,
    aten.empty_strided.default: lambda *args, **kwargs: 0,
}
_MUTATION = aten.copy_.default


register_fma()  # Dynamo writes addcmul_ as prims.fma (torch._inductor.inductor_prims)


def _lowering(t: Any) -> Callable[..., Any] | None:
    if isinstance(t, torch._ops.OpOverload) and t._schema.name.startswith("aten::_foreach_"):
        return _foreach_lowering(t)
    return _LOCAL.get(t) or LOWERINGS.get(t)


def _foreach_lowering(t: Any) -> Callable[..., Any] | None:
    """A ``_foreach_*`` op as its element op's lowering over the lists (``foreach.over_lists``,
    float32 scalars as the lazy recorder gives them); None when the element op has none."""
    try:
        element = foreach_element(t).op
    except NotImplementedError:
        return None
    low = _LOCAL.get(element) or LOWERINGS.get(element)
    if low is None:
        return None

    def prepare(pos: tuple, kw: dict) -> tuple[tuple, dict]:
        if any(getattr(a, "dtype", None) in _WIDE_JAX for a in (*pos, *kw.values())):
            return pos, kw
        return _float32_scalars(element, pos, kw)

    return over_lists(t, low, prepare)


def _fake(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _vals(n: Node) -> tuple:
    v = n.meta.get("val")
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _on_host(n: Node) -> bool:
    """Is ``n``'s value on the host (CPU tensors, ints)?"""
    return all(not _fake(v) or v.device.type == "cpu" for v in _vals(n))


@dataclass
class Plan:
    """What a graph takes, computes and updates; ``reason`` says why it cannot be lowered."""

    gm: GraphModule
    placeholders: list[Node]
    kinds: list[str]
    reason: str | None = None
    # per graph output: ("in", i) an input, ("view", k) the view ``views[k]`` of an input
    # (``input_views.py``), ("dev", k) device result k, ("host", k) host result k, ("size",
    # k) size result k (an int, fixed by the binding), ("rng", k) the state of the call's
    # draw k (``draws.py``), or None
    outputs: list[tuple[str, int] | None] = field(default_factory=list)
    views: list[tuple[Node, Node, int]] = field(default_factory=list)  # (view, start, input)
    size_results: list[int | torch.SymInt] = field(default_factory=list)
    device_results: list[Node] = field(default_factory=list)  # outputs, then updates
    device_updates: list[int] = field(default_factory=list)  # input updated by result k+n
    host_results: list[Node] = field(default_factory=list)  # outputs, then updates
    host_updates: list[int] = field(default_factory=list)
    n_device_outputs: int = 0
    n_host_outputs: int = 0
    host: GraphModule | None = None  # the host results from the CPU and int inputs
    counter_step: int | float | None = None  # the host part adds this to each update alone
    groups: list[tuple[torch.dtype, list[int]]] = field(default_factory=list)  # CPU scalars
    symbolic: bool = False
    random: bool = False  # draws random numbers: the program takes a key (``rng.compiled_key``)
    rng_inputs: list[int] = field(default_factory=list)  # saved RNG states, as words (packed)
    host_draws: list[Node] = field(default_factory=list)  # drawn on the host per call (packed)
    checked: bool = False  # eager checks its values: its last result says which checks failed

    @property
    def device_inputs(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == DEVICE]

    @property
    def int_inputs(self) -> list[int]:
        return [i for i, k in enumerate(self.kinds) if k == INT]


def plan(gm: GraphModule) -> Plan:
    """Read ``gm`` (see the module docstring)."""
    nodes = list(gm.graph.nodes)
    phs = [n for n in nodes if n.op == "placeholder"]
    p = Plan(gm, phs, [])
    for n in phs:
        v = n.meta.get("val")
        if draws.is_state_input(n):  # its size is the state's length: no size of the graph's
            p.kinds.append(RNG)
            p.rng_inputs.append(len(p.kinds) - 1)
            continue
        if isinstance(v, (int, torch.SymInt)):
            p.kinds.append(INT)
        elif not _fake(v):
            p.reason = f"input {n.name} is {type(v).__name__}, not a tensor or an int"
        elif v.device.type == "xla":
            p.kinds.append(DEVICE)
        elif v.device.type == "cpu" and v.dim() == 0:
            p.kinds.append(HOST)
        else:
            p.reason = f"input {n.name} is a {v.device} tensor of shape {list(v.shape)}, not xla"
        if isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape):
            p.symbolic = True
        p.symbolic = p.symbolic or isinstance(v, torch.SymInt)
        if p.reason:
            return p
    p.reason = _unlowerable(gm, nodes, {phs[i] for i in p.int_inputs})
    p.random = any(draws.draws_with_key(n) for n in nodes)
    p.host_draws = [n for n in nodes if n.op == "call_function" and n.target in draws.HOST]
    p.checked = any(n.op == "call_function" and n.target in CHECKED_OPS for n in nodes)
    if p.reason is None:
        p.reason = _results(p, nodes)
    if p.reason is None:
        p.reason = _host_part(p)
    return p


def _unlowerable(gm: GraphModule, nodes: list[Node], ints: set[Node]) -> str | None:
    for n in nodes:
        if n.op == "get_attr":
            c = getattr(gm, n.target, None)
            if isinstance(c, torch.nn.Module):  # a branch or body of torch.cond, scan...
                return f"{n.target} is a control-flow operator's subgraph"
            if not isinstance(c, torch.Tensor) or c.device.type != "cpu":
                return f"constant {n.target} is not a CPU tensor"
        elif n.op == "call_function":
            t = n.target
            if t is operator.getitem or t in _IDENTITY or t in _SIZES:
                continue
            if t in RANDOM or t is SAVES or t is REPLAYS:
                reason = draws.unlowerable(n)
                if reason is not None:
                    return reason
                continue
            if t in draws.HOST:
                if not draws.host_drawable(n, ints):
                    return f"{t}: a size not an input, a generator, or a dtype numpy lacks"
                continue
            if t is _MUTATION:  # returned or not: ``return x.add_(1)`` returns the input
                if n.args[0].op != "placeholder" or any(u.op != "output" for u in n.users):
                    return "an in-place update of a value that is not an input"
                continue
            if _lowering(t) is None:
                return f"{t} has no lowering"
            if (refused := _refused(n)) is not None:
                return refused
            for v in _vals(n):
                if v is not None and not _fake(v):
                    return f"{t} returns {type(v).__name__}"
        elif n.op not in ("placeholder", "output"):
            return f"{n.op} node {n.name}"
    return None


def _refused(n: Node) -> str | None:
    """Why ``n`` cannot be compiled: its lowering is for other arguments (``LOWERED_IF``: eager's
    CPU kernel runs), or eager's error for an argument its argument check refuses
    (``ARGUMENT_CHECKS``). The graph runs lazily, where the op falls back or raises."""
    check, lowered_if = ARGUMENT_CHECKS.get(n.target), LOWERED_IF.get(n.target)
    if check is None and lowered_if is None:
        return None
    args, kwargs = map_aggregate(
        (n.args, n.kwargs), lambda a: a.meta.get("val") if isinstance(a, Node) else a
    )
    if lowered_if is not None and not lowered_if(*args, **kwargs):
        return f"{n.target} runs on the CPU for these inputs"
    try:
        if check is not None:
            check(*args, **kwargs)
    except RuntimeError as e:
        return f"{n.target}: {e}"
    return None


def _results(p: Plan, nodes: list[Node]) -> str | None:
    index = {n: i for i, n in enumerate(p.placeholders)}
    (out_node,) = [n for n in nodes if n.op == "output"]
    results = out_node.args[0]
    results = list(results) if isinstance(results, (tuple, list)) else [results]
    dev_out: list[Node] = []
    host_out: list[Node] = []
    sites = draws.sites(nodes)
    updated = input_views.updated_inputs(nodes, _MUTATION)
    for r in results:
        if r is None:
            p.outputs.append(None)
        elif (saves := draws.saved_state(r)) is not None:
            p.outputs.append(("rng", sites[saves]))
        elif r.op == "placeholder":
            p.outputs.append(("in", index[r]))
        elif r.op == "call_function" and r.target is _MUTATION:  # the input, updated
            p.outputs.append(("in", index[r.args[0]]))
        elif (viewed := input_views.base_input(r, updated)) and p.kinds[index[viewed[1]]] == DEVICE:
            p.outputs.append(("view", len(p.views)))
            p.views.append((r, viewed[0], index[viewed[1]]))
        elif isinstance(r.meta.get("val"), (int, torch.SymInt)):  # a size the backward needs
            p.outputs.append(("size", len(p.size_results)))
            p.size_results.append(r.meta["val"])
        elif not _fake(r.meta.get("val")):
            return f"output {r.name} is not a tensor"
        elif _on_host(r):
            p.outputs.append(("host", len(host_out)))
            host_out.append(r)
        else:
            p.outputs.append(("dev", len(dev_out)))
            dev_out.append(r)
    p.device_results, p.host_results = dev_out, host_out
    p.n_device_outputs, p.n_host_outputs = len(dev_out), len(host_out)
    updated: set[int] = set()
    for n in nodes:
        if n.op == "call_function" and n.target is _MUTATION:
            i = index[n.args[0]]
            if i in updated:
                return f"input {n.args[0].name} is updated twice"
            updated.add(i)
            if p.kinds[i] == DEVICE:
                p.device_results.append(n.args[1])
                p.device_updates.append(i)
            elif p.kinds[i] == HOST:
                p.host_results.append(n.args[1])
                p.host_updates.append(i)
            else:
                return f"input {n.args[0].name} is an int updated in place"
    groups: dict[torch.dtype, list[int]] = {}
    for i, k in enumerate(p.kinds):
        if k == HOST:
            groups.setdefault(p.placeholders[i].meta["val"].dtype, []).append(i)
    p.groups = list(groups.items())
    return None


def _host_part(p: Plan) -> str | None:
    """``p.host``: a graph computing the host results from the CPU and int inputs alone."""
    if not p.host_results:
        return None
    needed: list[Node] = []
    seen: set[Node] = set()
    stack = list(p.host_results)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            if p.kinds[p.placeholders.index(n)] == DEVICE:
                return f"a CPU value is computed from the device input {n.name}"
        elif n.op == "call_function" and not _on_host(n):
            return f"a CPU value is computed from the device value {n.name}"
        needed.append(n)
        stack.extend(n.all_input_nodes)
    g = Graph()
    env: dict[Node, Node] = {}
    for i, n in enumerate(p.placeholders):
        if p.kinds[i] != DEVICE:
            env[n] = g.placeholder(n.name)
    for n in p.gm.graph.nodes:
        if n in seen and n.op != "placeholder":
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[r] for r in p.host_results))
    p.host = GraphModule(p.gm, g)
    p.counter_step = _counter_step(p)
    return None


def _counter_step(p: Plan) -> int | float | None:
    """``c`` when the host part only adds ``c`` to each CPU input it updates (the optimizers'
    ``step`` counters: one ``_foreach_add_`` in place does it), else None."""
    if p.n_host_outputs:
        return None
    steps = set()
    for i, r in zip(p.host_updates, p.host_results, strict=True):
        src, c = _added(r)
        if src is not p.placeholders[i] or type(c) not in (int, float):
            return None
        if r.meta["val"].dtype != src.meta["val"].dtype:
            return None
        steps.add((type(c), c))
    return steps.pop()[1] if len(steps) == 1 else None


def _added(r: Node) -> tuple[Any, Any]:
    """``(x, c)`` for ``r = x + c`` (an ``add`` or an element of a ``_foreach_add``), else Nones."""
    if r.op != "call_function" or r.kwargs:
        return None, None
    if r.target is aten.add.Tensor:
        return r.args[0], r.args[1]
    if r.target is operator.getitem and isinstance(r.args[0], Node):
        each, k = r.args
        if each.target is aten._foreach_add.Scalar and not each.kwargs:
            return each.args[0][k], each.args[1]
    return None, None


# --------------------------------------------------------------------------- one binding


def _wide(n: Node) -> bool:
    dts = [a.meta["val"].dtype for a in n.all_input_nodes if _fake(a.meta.get("val"))]
    dts += [v.dtype for v in _vals(n) if _fake(v)]
    return any(d in WIDE_DTYPES for d in dts)


def _scalars(n: Node, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Float ``Scalar`` arguments as the lazy recorder gives them to lowerings."""
    return (args, kwargs) if _wide(n) else _float32_scalars(n.target, args, kwargs)


def _float32_scalars(target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    op = op_info(target)
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
    p: Plan, bind: dict[Any, int], ints: dict[int, int], now: dict[str, str]
) -> Callable[..., list]:
    """``fn(*device_arrays, *packed_scalars)`` -> the device results of ``p`` for one binding
    of its sizes (``ints``: the int inputs' values, by input position); float32 matrix
    products and convolutions lower with the precision settings ``now``
    (``precision.settings``)."""
    nodes = list(p.gm.graph.nodes)
    consts = {
        n.target: jnp.asarray(getattr(p.gm, n.target).numpy()) for n in nodes if n.op == "get_attr"
    }
    steps = []
    sites = draws.sites(nodes)
    for n in nodes:
        if n.op != "call_function" or n.target is _MUTATION or n.target in draws.HOST:
            continue
        t = n.target
        fn = strided.lowering(n, lambda s: concrete(s, bind))
        if t in RANDOM:
            fn = draws.draw(t, sites[n], aval(n.meta["val"], bind))
        elif t is SAVES:
            fn = draws.saving(n, sites[n], lambda s: concrete(s, bind))
        elif t is REPLAYS:
            fn = draws.replaying(n, lambda s: concrete(s, bind))
        elif fn is None and t is not operator.getitem and t not in _IDENTITY:
            fn = _SIZES.get(t) or _lowering(t)
        multi = isinstance(n.meta.get("val"), (tuple, list))
        vals = () if t is operator.getitem else _vals(n)  # (an RNG state's size is unbound)
        avals = tuple(aval(v, bind) if _fake(v) else None for v in vals)
        steps.append((n, fn, avals, multi, t in _SIZES, str(t), _fp32(n, now)))
    dev = p.device_inputs
    results = p.device_results
    # each result as the graph gives it; an update as the input it replaces (copy_ casts and
    # broadcasts)
    final = [aval(r.meta["val"], bind) for r in results[: p.n_device_outputs]]
    final += [aval(p.placeholders[i].meta["val"], bind) for i in p.device_updates]

    def run(*arrays: Any) -> list:
        env: dict[Node, Any] = {p.placeholders[i]: a for i, a in zip(dev, arrays, strict=False)}
        packed = arrays[len(dev) :]
        key = None
        if p.random:  # the call's key comes last, after the saved RNG states
            key = compiled_stream(packed[-1])
            packed = packed[:-1]
        extra = len(p.host_draws) + len(p.rng_inputs)  # after the CPU scalars, in this order
        for n, value in zip(p.host_draws, packed[len(packed) - extra :], strict=False):
            env[n] = value
        for i, words in zip(p.rng_inputs, packed[len(packed) - len(p.rng_inputs) :], strict=True):
            env[p.placeholders[i]] = words
        packed = packed[: len(packed) - extra]
        for (_, members), values in zip(p.groups, packed, strict=True):
            for j, i in enumerate(members):
                env[p.placeholders[i]] = values[j]
        for i, value in ints.items():
            env[p.placeholders[i]] = value
        for n in nodes:
            if n.op == "get_attr":
                env[n] = consts[n.target]

        def look(a: Any) -> Any:
            return env[a] if isinstance(a, Node) else a

        for n, low, avals, multi, sizes, name, fp32 in steps:
            args = map_aggregate(n.args, look)
            kwargs = map_aggregate(n.kwargs, look)
            if n.target is operator.getitem:
                env[n] = args[0][args[1]]
                continue
            if low is None:
                env[n] = args[0]
                continue
            if sizes:
                env[n] = low(*args, **kwargs)
                continue
            if n.target in RANDOM or n.target is SAVES or n.target is REPLAYS:
                env[n] = low(key, *args, **kwargs)
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
        return [conform_result(env[r], a, "result") for r, a in zip(results, final, strict=True)]

    return returning_checks(run) if p.checked else run
