"""The ``xlacache`` Dynamo backend: AOTAutograd graphs, each one cached executable.

Dynamo traces the user's code with fake tensors on the ``xla`` device (a lazy tensor's fake:
``LazyTensor.__tensor_unflatten__``); AOTAutograd splits the graph into forward and backward
aten graphs (or one inference graph: an optimizer's step), with PyTorch's decompositions for
the ops the lowering table lacks, and keeps the updates of inputs in the graph; each graph
becomes a ``CompiledGraph`` if every node lowers, else a ``LazyGraph`` (lazy tracing,
announced once with its reason). A graph break leaves the code between graphs to run as
usual: lazily.

Lazy tensors that Dynamo keeps as attributes of its graph (an optimizer's parameters and
state, marked static) are made graph inputs here, so that AOTAutograd sees their fakes and the
compiled program takes (and updates) their device buffers.
"""

from __future__ import annotations

from typing import Any

import torch
from functorch.compile import min_cut_rematerialization_partition
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler
from torch.fx import Graph, GraphModule

from xlacache import counters

from .. import metrics, torch_internals
from ..lowering import LOWERINGS, library_ops
from ..state import STATE
from ..tensor import LazyTensor
from . import aot_cache, lower
from .before_aot import restore_inplace_ops, wrong_in_aot
from .draws import RANDOM
from .program import CompiledGraph, LazyGraph, note_fallback

aten = torch.ops.aten


def decompositions() -> dict[Any, Any]:
    """PyTorch's decompositions of the ops the lowering table lacks (what the lazy
    dispatcher does with them too); kept in the runtime's state, built at first use."""
    table = STATE.dynamo_decompositions
    if not table:
        every = {**decomposition_table, **core_aten_decompositions()}
        keep = {aten.lift_fresh.default, aten.lift.default}  # how tracing takes in constants
        keep |= RANDOM.keys()  # drawn as the lazy runtime draws (their parameters checked)
        table.update({op: f for op, f in every.items() if op not in LOWERINGS and op not in keep})
    return table


def _mutates_inputs() -> bool:
    """Does the graph AOTAutograd is compiling update an input (its own analysis; True
    when it cannot be told)?"""
    tc = torch._guards.TracingContext.try_get()
    meta = tc.fw_metadata if tc is not None else None
    if meta is None:
        return True
    return any(i.mutates_data or i.mutates_metadata for i in meta.input_info)


def runtime_for(gm: GraphModule, what: str) -> CompiledGraph | LazyGraph:
    """What runs an AOTAutograd graph: compiled if it lowers, else lazily (announced)."""
    plan = lower.plan(gm)
    if plan.reason is not None:
        return LazyGraph(gm, f"{what}: {plan.reason}", warn=True)
    metrics.counter_inc("CompiledGraph")
    return CompiledGraph(gm, what, plan)


def _compiler(what: str, serializable: bool) -> Any:
    def compile_graph(gm: GraphModule, example_inputs: list) -> Any:
        mutates = what != "backward" and _mutates_inputs()
        aot_cache.note_mutation(mutates)
        if serializable:
            return aot_cache.XlaOutputCode(gm, what, runtime_for, mutates)
        return runtime_for(gm, what)

    if serializable:
        return SerializableAOTDispatchCompiler(aot_cache.XlaOutputCode, compile_graph)
    return compile_graph


def sync_dynamo_counters() -> None:
    """Dynamo's own counts (graph breaks, recompiles) as lazy metrics counters."""
    from torch._dynamo.utils import counters, guard_failures

    now = {
        "DynamoGraphBreak": sum(counters["graph_break"].values()),
        "DynamoRecompile": sum(len(v) for v in guard_failures.values()),
    }
    for name, n in now.items():
        delta = n - (metrics.counter_value(name) or 0)
        if delta > 0:
            metrics.counter_inc(name, delta)


def recompile_reasons() -> list[str]:
    """The guard failures that made Dynamo recompile, oldest first."""
    from torch._dynamo.utils import guard_failures

    return [r for reasons in guard_failures.values() for r in reasons]


def _symbolic(fake: Any) -> bool:
    """Is this graph input a symbolic size, or a tensor with one?"""
    if isinstance(fake, torch.SymInt):
        return True
    return isinstance(fake, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in fake.shape)


def _aliased(inputs: list) -> bool:
    """Do two of the (real) graph inputs view the same lazy storage?"""
    roots = [id(x._c._root or x._c) for x in inputs if isinstance(x, LazyTensor)]
    return len(roots) != len(set(roots))


def _attribute(gm: GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def lift_lazy_attributes(gm: GraphModule, fakes: list) -> tuple[GraphModule, list, list]:
    """``(graph, attributes, fakes)``: a copy of ``gm`` whose lazy tensor attributes are its
    first inputs (their values in ``attributes``; all inputs' fakes in ``fakes``), or ``gm``
    itself when it holds none. Dynamo's graph is left as it is (Dynamo reads it after)."""
    held = [
        n
        for n in gm.graph.find_nodes(op="get_attr")
        if isinstance(_attribute(gm, n.target), LazyTensor)
    ]
    if not held:
        return gm, [], fakes
    mode = torch._guards.detect_fake_mode(fakes) or torch._guards.TracingContext.get().fake_mode
    graph = Graph()
    copies: dict[Any, Any] = {}
    out = graph.graph_copy(gm.graph, copies)
    graph.output(out)
    for old, new in copies.items():
        if old.op == "placeholder":
            new._dynamo_source = getattr(old, "_dynamo_source", None)
    first = next(iter(graph.find_nodes(op="placeholder")), None)
    sources = dict(getattr(gm, "_param_name_to_source", {}) or {})
    attributes, lifted = [], []
    for n in held:
        value = _attribute(gm, n.target)
        fake = mode.from_tensor(value, static_shapes=True)
        with graph.inserting_before(first) if first is not None else graph.inserting_before():
            ph = graph.placeholder("lazy_" + n.target.replace(".", "_"))
        ph.meta = {"example_value": fake, "val": fake}
        ph._dynamo_source = sources.pop(n.target, None)
        copies[n].replace_all_uses_with(ph)
        graph.erase_node(copies[n])
        attributes.append(value)
        lifted.append(fake)
    new_gm = GraphModule(gm, graph)
    new_gm.meta = dict(gm.meta)
    new_gm._param_name_to_source = sources
    return new_gm, attributes, lifted + list(fakes)


# torch's experimental caching precompile (DynamoCache) cannot reload the guards of a frame
# that took xla tensors (torch 2.13: unpickling a wrapper subclass without inner tensors
# fails in torch.compile itself), and it drops identity guards; the xlacache cache serves
# warm processes instead
PRECOMPILE_REFUSED = (
    "TORCH_CACHING_PRECOMPILE=1 (torch's caching precompile) cannot reload graphs of xla "
    "tensors; unset it (xlacache's own cache serves warm processes)"
)


def xlacache_backend(gm: GraphModule, example_inputs: list, **kwargs: Any) -> Any:
    """``torch.compile(model, backend="xlacache")``."""
    torch_internals.dynamo_skips_runtime()  # here, not at import: nothing in torch changes then
    metrics.counter_inc("DynamoGraph")
    sync_dynamo_counters()
    library_ops.adopt_registered()  # the graph may name ops a library registered since
    if torch._dynamo.config.caching_precompile:
        note_fallback(PRECOMPILE_REFUSED, warn=True)
        return gm.forward  # no backend entry, so torch saves no package for this frame
    restore_inplace_ops(gm)  # Dynamo's fma for addcmul_/addcdiv_ is not eager's numbers
    wrong = wrong_in_aot(gm)
    if wrong is not None:
        note_fallback(wrong, warn=True)
        return gm.forward
    fakes = []
    for n in gm.graph.find_nodes(op="placeholder"):
        v = n.meta.get("example_value")
        if v is None:
            note_fallback("a Dynamo graph input without a fake value", warn=True)
            return gm.forward
        fakes.append(v)
    if torch_internals.backend_refakes(fakes) and any(map(_symbolic, fakes)):
        # torch 2.9-2.10: the inputs faked again have static sizes, so AOTAutograd's graph
        # would bake in this call's sizes where Dynamo's guards let other sizes through
        note_fallback("sizes Dynamo made dynamic, on a torch before 2.11", warn=True)
        return gm.forward
    fakes = torch_internals.backend_fakes(fakes, example_inputs)
    # a host tensor goes to AOTAutograd as it is, as with PyTorch's own backends: it fakes it
    # in its mode with what Dynamo noted (a float Dynamo made a tensor keeps its ``item``)
    fakes = [
        x if isinstance(x, torch.Tensor) and not isinstance(x, LazyTensor) else f
        for f, x in zip(fakes, example_inputs, strict=True)
    ]
    graph, attributes, fakes = lift_lazy_attributes(gm, fakes)
    seen: dict[str, Any] = {}
    # lazy tensors report contiguous strides: AOTAutograd expects contiguous tangents
    with (
        aot_cache.serving() as serializable,
        torch._functorch.config.patch(guess_tangent_strides_as_outputs=False),
    ):
        backend = aot_autograd(
            fw_compiler=_compiler("forward", serializable),
            bw_compiler=_compiler("backward", serializable),
            inference_compiler=_compiler("inference", serializable),
            decompositions=decompositions(),
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,  # updates of inputs in the graph: in place
        )
        STATE.dynamo_compiling = seen
        try:
            compiled = backend(graph, fakes)
        except torch_internals.dynamo_handles():
            raise
        except Exception as e:  # noqa: BLE001 - never a crash where the graph can run lazily
            counters.hidden("dynamo.aot_autograd", e)
            first = (str(e).strip().splitlines() or [""])[0]
            note_fallback(f"AOTAutograd failed: {type(e).__name__}: {first}", warn=True)
            return gm.forward
        finally:
            STATE.dynamo_compiling = None
    # nothing compiled (a graph AOTAutograd did not give us): assume it updates inputs
    mutates = seen.get("mutates", False) if seen.get("graphs") else True
    if mutates and _aliased([*attributes, *example_inputs]):
        # Dynamo gives each lazy view as a tensor of its own: a graph that updates a tensor
        # given with a view of it (or the view) would not see the update in the other; the
        # Dynamo graph runs lazily instead, where views are exact
        note_fallback("an input updated in place shares storage with another input", warn=True)
        return gm.forward
    if not attributes:
        return compiled

    def with_attributes(*args: Any) -> Any:
        return compiled(*attributes, *args)

    return with_attributes
