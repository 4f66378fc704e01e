"""What a read keeps: a read (``.item()``, ``.cpu()``, control flow on a value) runs the graph its
value needs, and that graph also returns what it computes that pending values need later, so the
next graph starts from device data (``executor._run`` calls both functions below).
"""

from __future__ import annotations

from .distributed.program import has_collectives
from .graph import LEAF_OPS, Node
from .state import STATE


def keep_computed(
    everyone: list, order: list[Node], outs: list[tuple[Node, int]], out_ix: dict
) -> list[tuple[Node, list[int]]]:
    """Extend a read's outputs with what else it computes that pending values need later: the
    live tensors' values in the graph, and the graph's nodes that pending nodes outside it take
    as inputs. Returns those consumers with the input positions to point at the new device
    data once the graph has run (``cut``). Without this, a loop whose only barrier is a read
    (a generation loop's stopping check, ``loss.item()`` without ``sync()``) computes all of
    its history again at every read: graphs grow step after step and each one compiles.

    Not for graphs run by several processes (collectives, a mesh over processes): what is
    pending may differ between processes, and their programs must be one."""
    if STATE.spmd or has_collectives(order):
        return []
    size = len(order)
    # a node older than the graph's oldest op cannot reach the graph: its inputs are older still
    oldest = min((n.seq for n in order if n.op not in LEAF_OPS), default=0)

    seen: set[int] = set()
    stack: list[Node] = []  # pending nodes outside the graph, walked down to where they meet it

    def meets(n: Node, k: int) -> bool:
        """Whether the graph computes output ``k`` of ``n`` (it is then kept); if not, ``n``
        is walked when it can reach the graph."""
        if n.op in LEAF_OPS:
            return False
        p = n.pos
        if 0 <= p < size and order[p] is n:
            if (id(n), k) not in out_ix:
                out_ix[(id(n), k)] = len(outs)
                outs.append((n, k))
            return True
        if n.seq > oldest and id(n) not in seen:
            seen.add(id(n))
            stack.append(n)
        return False

    for c in everyone:
        root = c._root
        if root is None or c._rgen == root._gen:  # a stale view is derived from its root again
            meets(*c._v)
    consumers: list[tuple[Node, list[int]]] = []
    while stack:
        m = stack.pop()
        hits = [j for j, (n, k) in enumerate(m.inputs) if meets(n, k)]
        if hits:
            consumers.append((m, hits))
    return consumers


def cut(consumers: list[tuple[Node, list[int]]], out_ix: dict, new_nodes: list[Node]) -> None:
    """Point the consumers found by ``keep_computed`` at the device data the graph returned:
    the same values, and graph keys stay exact (they come from the node prefixes, which hold no
    inputs, and the wiring of each graph)."""
    for m, hits in consumers:
        ins = list(m.inputs)
        for j in hits:
            n, k = ins[j]
            ins[j] = (new_nodes[out_ix[(id(n), k)]], 0)
        m.inputs = tuple(ins)
        m._digest = None
