"""The ``xlacache`` Dynamo backend: AOTAutograd graphs, each one cached executable.

Dynamo traces the user's code with fake tensors on the ``xla`` device (a lazy tensor's fake:
``LazyTensor.__tensor_unflatten__``); AOTAutograd splits the graph into forward and backward
aten graphs, with PyTorch's decompositions for the ops the lowering table lacks; each graph
becomes a ``CompiledGraph`` if every node lowers, else a ``LazyGraph`` (lazy tracing, counted
with its reason). A graph break leaves the code between graphs to run as usual: lazily.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._dynamo.backends.common import aot_autograd
from torch.fx import GraphModule

from .. import metrics, torch_internals
from ..lowering import LOWERINGS
from ..tensor import LazyTensor
from . import lower
from .program import CompiledGraph, LazyGraph, note_fallback

aten = torch.ops.aten
_DECOMPOSITIONS: dict[Any, Any] = {}


def decompositions() -> dict[Any, Any]:
    """PyTorch's decompositions of the ops the lowering table lacks (what the lazy
    dispatcher does with them too)."""
    if not _DECOMPOSITIONS:
        table = {**decomposition_table, **core_aten_decompositions()}
        keep = {aten.lift_fresh.default, aten.lift.default}  # how tracing takes in constants
        _DECOMPOSITIONS.update(
            {op: f for op, f in table.items() if op not in LOWERINGS and op not in keep}
        )
    return _DECOMPOSITIONS


def _mutates_inputs() -> bool:
    """Does the graph AOTAutograd is compiling update an input (its own analysis; True
    when it cannot be told)?"""
    tc = torch._guards.TracingContext.try_get()
    meta = tc.fw_metadata if tc is not None else None
    if meta is None:
        return True
    return any(i.mutates_data or i.mutates_metadata for i in meta.input_info)


def _compiler(what: str, seen: dict) -> Any:
    def compile_graph(gm: GraphModule, example_inputs: list) -> Any:
        if what != "backward":
            seen["mutates"] = seen.get("mutates", False) or _mutates_inputs()
        reason = lower.unsupported(gm)
        if reason is not None:
            return LazyGraph(gm, f"{what}: {reason}")
        metrics.counter_inc("CompiledGraph")
        return CompiledGraph(gm, what)

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


def _aliased(inputs: list) -> bool:
    """Do two of the (real) graph inputs view the same lazy storage?"""
    roots = [id(x._c._root or x._c) for x in inputs if isinstance(x, LazyTensor)]
    return len(roots) != len(set(roots))


def xlacache_backend(gm: GraphModule, example_inputs: list, **kwargs: Any) -> Any:
    """``torch.compile(model, backend="xlacache")``."""
    torch_internals.dynamo_skips_runtime()  # here, not at import: nothing in torch changes then
    metrics.counter_inc("DynamoGraph")
    sync_dynamo_counters()
    if any(isinstance(t, LazyTensor) for t in (*gm.parameters(), *gm.buffers())):
        # Dynamo kept tensors as graph attributes (an optimizer's step): they run lazily
        note_fallback("lazy tensors held by the graph as attributes")
        return gm.forward
    fakes = []
    for n in gm.graph.find_nodes(op="placeholder"):
        v = n.meta.get("example_value")
        if v is None:
            note_fallback("a Dynamo graph input without a fake value")
            return gm.forward
        fakes.append(v)
    fakes = torch_internals.backend_fakes(fakes, example_inputs)
    seen: dict[str, bool] = {}
    backend = aot_autograd(
        fw_compiler=_compiler("forward", seen),
        bw_compiler=_compiler("backward", seen),
        inference_compiler=_compiler("inference", seen),
        decompositions=decompositions(),
    )
    # lazy tensors report contiguous strides: AOTAutograd expects contiguous tangents
    with torch._functorch.config.patch(guess_tangent_strides_as_outputs=False):
        compiled = backend(gm, fakes)
    if seen.get("mutates", True) and _aliased(example_inputs):
        # Dynamo gives each lazy view as a tensor of its own: a graph that updates a tensor
        # given with a view of it (or the view) would not see the update in the other; the
        # Dynamo graph runs lazily instead, where views are exact
        note_fallback("an input updated in place shares storage with another input")
        return gm.forward
    return compiled
