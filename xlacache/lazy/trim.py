"""A cap on the pending graph: torch_xla's ``XLA_TRIM_GRAPH_SIZE``.

A program that reaches no barrier records one graph that grows without bound: an evaluation
loop that sums a metric and never calls ``sync()``, a generation that reads nothing until its
end. Every node and every input stays in memory, and the graph's compile grows with it (a
chain of 20,000 elementwise ops takes about 24 s to lower and compile on this CPU). Every
``XLA_TRIM_GRAPH_CHECK_FREQUENCY`` top-level ops since the last ``sync()``, before the next op
is recorded, the runtime looks at what is pending; past ``XLA_TRIM_GRAPH_SIZE`` nodes it runs
it as a read does (``TrimIrGraph``): the same values, and later ops start from device data.

As in torch_xla, the look costs nothing in a loop that syncs every step: no step reaches the
cap. Where torch_xla runs the one tensor updated in place, this runs every live tensor's
pending value, so one graph, not one per accumulator. Not inside ``compile(full_graph=True)``,
nor for graphs that other processes must run too (SPMD, collectives): one process alone cannot
choose to run those.
"""

from __future__ import annotations

from xlacache.lazy_settings import lazy_setting

from . import metrics
from .distributed.program import has_collectives
from .executor import materialize
from .graph import DATA, nodes_made, toposort
from .state import STATE
from .tensor import live_tensors


def look() -> None:
    """``STATE.trim_check``: run what is pending if its graph passed ``STATE.trim_size``."""
    s = STATE
    s.trim_at = s.traced_ops + s.trim_every
    made = nodes_made()
    if made - s.trim_base <= s.trim_size or not s.allow_execution or s.spmd:
        return  # fewer nodes made since the last look than the cap: nothing can pass it
    everyone = live_tensors()
    roots = []
    for c in everyone:
        root = c._root
        if (root is None or c._rgen == root._gen) and c._v[0].op is not DATA:
            roots.append(c._v)  # a stale view is derived from its root, which is here too
    order = toposort(roots)
    size = len(order)
    if size <= s.trim_size or has_collectives(order):
        # walk again only once enough nodes are made to pass the cap (half the cap at most)
        s.trim_base = made - max(size, s.trim_size // 2)
        return
    metrics.counter_inc("TrimIrGraph")
    materialize(everyone, what=f"a pending graph of {size} nodes (XLA_TRIM_GRAPH_SIZE)")
    s.trim_base = nodes_made()


def install() -> None:
    STATE.trim_every = lazy_setting("trim_graph_check_frequency")
    STATE.trim_size = lazy_setting("trim_graph_size")
    STATE.trim_check = look
