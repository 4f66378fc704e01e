"""Tracing cost per IR node in ``xlacache.lazy``: node identity alone, and whole ops.

    python benchmarks/lazy_trace.py              # ~10 s
    python benchmarks/lazy_trace.py --reps 5

Reported (median of ``--reps``, microseconds):

* ``encode``: the canonical typed encoding of a typical attribute tuple (``identity.encode``),
  the meta-cache key and the input of the node prefix;
* ``digest``: a node's Merkle digest from its prefix and one input digest (computed only when
  asked for: graph keys hash the nodes' prefixes and wiring at the barrier);
* ``node``: building a ``graph.Node`` with a cached prefix (what recording pays per node);
* ``dispatch/op``: whole ops through ``__torch_dispatch__`` on small tensors in a steady loop
  (meta-kernel cache warm), from the runtime's own ``TraceTime`` / ``TracedOps`` metrics.
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import jax.numpy as jnp
import torch

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.graph import Node, data_node
from xlacache.lazy.identity import encode, node_digest, node_prefix, placeholder
from xlacache.lazy.tensor import flush_trace_metrics

aten = torch.ops.aten


def _per_call_us(fn: object, n: int) -> float:
    return timeit.timeit(fn, number=n) / n * 1e6  # type: ignore[arg-type]


def identity_costs(n: int) -> dict[str, float]:
    attrs = ((placeholder(0), (-1,), False), (("dtype", torch.float32),))
    leaf = data_node(jnp.zeros((4, 8)), torch.float32)
    avals = (((4,), torch.float32),)
    prefix = node_prefix("aten.sum.dim_IntList", encode(attrs), "4:dtorch.float32")
    op = aten.sum.dim_IntList
    return {
        "encode": _per_call_us(lambda: encode(attrs), n),
        "digest": _per_call_us(lambda: node_digest(prefix, ((leaf, 0),)), n),
        "node": _per_call_us(lambda: Node(op, ((leaf, 0),), attrs, avals, op, None, prefix), n),
    }


def dispatch_cost(reps: int) -> float:
    dev = xl.device()
    x = torch.randn(4, 8).to(dev)
    w = torch.randn(8, 8).to(dev)

    def ops() -> object:
        y = torch.relu(x * 2.0 + x) @ w
        y = y.sum(-1, keepdim=True) ** -2
        z = x.t().reshape(-1)[3:]
        return y, z.softmax(0)

    for _ in range(50):
        ops()
    flush_trace_metrics()
    metrics.clear_all()
    for _ in range(reps):
        ops()
    flush_trace_metrics()
    _, ns, _ = metrics.metric_data("TraceTime")  # type: ignore[misc]
    return ns / 1e3 / (metrics.counter_value("TracedOps") or 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=100_000, help="calls per identity measurement")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(args.reps):
        for k, v in identity_costs(args.n).items():
            rows.setdefault(k, []).append(v)
        rows.setdefault("dispatch/op", []).append(dispatch_cost(2000))
    for k, vals in rows.items():
        print(f"{k:12} {statistics.median(vals):7.2f} us  (min {min(vals):.2f})")


if __name__ == "__main__":
    main()
