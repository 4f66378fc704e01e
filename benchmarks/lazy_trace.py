"""Tracing cost per IR node in ``xlacache.lazy``: node identity alone, and whole ops.

    python benchmarks/lazy_trace.py              # ~10 s
    python benchmarks/lazy_trace.py --reps 5
    python benchmarks/lazy_trace.py --step       # and a training step's phases (~30 s)

Reported (median of ``--reps``, microseconds):

* ``encode``: the canonical typed encoding of a typical attribute tuple (``identity.encode``),
  the meta-cache key and the input of the node prefix;
* ``digest``: a node's Merkle digest from its prefix and one input digest (computed only when
  asked for: graph keys hash the nodes' prefixes and wiring at the barrier);
* ``node``: building a ``graph.Node`` with a cached prefix (what recording pays per node);
* ``dispatch/op``: whole ops through ``__torch_dispatch__`` on small tensors in a steady loop
  (meta-kernel cache warm), from the runtime's own ``TraceTime`` / ``TracedOps`` metrics;
* ``wall/op``: the same loop's wall time per op, PyTorch's dispatch to the subclass included;
* ``torch floor/op``: what PyTorch alone spends per op on a wrapper subclass whose
  ``__torch_dispatch__`` returns at once (no recording, no new tensor), and ``wrapper``: one
  ``_make_wrapper_subclass`` (the output tensor each op needs): the floor under ``wall/op``;
* ``eager/op``: the same ops in eager PyTorch on CPU tensors, for scale.

``--step``: a training step of ``examples/gpt.py``'s model, small enough that tracing is all
there is (12 layers, d=64, seq 32, batch 4; AdamW, gradient clipping), split into its phases
(forward with the loss, backward, clipping, optimizer step): each phase's fastest time over
``--steps`` steps with the device idle, ops traced and time per op, lazy and eager CPU (one
thread; eager's time includes its small compute).
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
from xlacache.lazy.state import STATE
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


def _ops(x: torch.Tensor, w: torch.Tensor) -> object:
    y = torch.relu(x * 2.0 + x) @ w
    y = y.sum(-1, keepdim=True) ** -2
    z = x.t().reshape(-1)[3:]
    return y, z.softmax(0)


def dispatch_cost(reps: int) -> dict[str, float]:
    dev = xl.device()
    x = torch.randn(4, 8).to(dev)
    w = torch.randn(8, 8).to(dev)
    for _ in range(50):
        _ops(x, w)
    flush_trace_metrics()
    metrics.clear_all()
    start = timeit.default_timer()
    for _ in range(reps):
        _ops(x, w)
    wall = timeit.default_timer() - start
    flush_trace_metrics()
    _, ns, _ = metrics.metric_data("TraceTime")  # type: ignore[misc]
    n = metrics.counter_value("TracedOps") or 1
    xl.sync()
    cpu = (torch.randn(4, 8), torch.randn(8, 8))
    eager = _per_call_us(lambda: _ops(*cpu), reps) / (n / reps)
    return {"dispatch/op": ns / 1e3 / n, "wall/op": wall * 1e6 / n, "eager/op": eager}


class _Returns(torch.Tensor):
    """A wrapper subclass whose ``__torch_dispatch__`` records nothing and makes no tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    result: torch.Tensor | None = None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        return cls.result


def torch_floor(n: int) -> dict[str, float]:
    def make() -> torch.Tensor:
        return torch.Tensor._make_wrapper_subclass(_Returns, (4, 8), device="meta")

    x = make()
    _Returns.result = make()

    def ops() -> object:  # 6 ops (no views: a view of the shared result would be refused)
        y = torch.relu(x * 2.0 + x)
        return y.sum(-1, keepdim=True) ** -2, x.softmax(0)

    return {"torch floor/op": _per_call_us(ops, n) / 6, "wrapper": _per_call_us(make, n)}


PHASES = ("forward", "backward", "clip", "optimizer")


def step_phases(steps: int) -> dict[str, dict[str, float]]:
    """Per phase of a tiny GPT training step: ms, ops traced and us per op (lazy), and eager's
    ms, each the fastest of ``steps`` steps."""
    import sys
    from pathlib import Path

    import torch.nn.functional as F

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gpt import GPT

    vocab, seq = 128, 32
    data = torch.randint(0, vocab, (4, 4, seq + 1))
    out: dict[str, dict[str, float]] = {p: {} for p in PHASES}
    threads = torch.get_num_threads()
    for mode in ("lazy", "eager"):
        dev = xl.device() if mode == "lazy" else torch.device("cpu")
        torch.set_num_threads(threads if mode == "lazy" else 1)
        torch.manual_seed(0)
        model = GPT(vocab, 64, 4, 12, seq, 0.0).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        best = {p: float("inf") for p in PHASES}
        for i in range(steps + 3):
            if mode == "lazy":
                xl.wait_device_ops()
            batch = data[i % 4].to(dev)
            opt.zero_grad(set_to_none=True)
            marks = [(timeit.default_timer(), STATE.traced_ops)]
            logits = model(batch[:, :-1]).reshape(-1, vocab)
            loss = F.cross_entropy(logits, batch[:, 1:].reshape(-1))
            marks.append((timeit.default_timer(), STATE.traced_ops))
            loss.backward()
            marks.append((timeit.default_timer(), STATE.traced_ops))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            marks.append((timeit.default_timer(), STATE.traced_ops))
            opt.step()
            marks.append((timeit.default_timer(), STATE.traced_ops))
            if mode == "lazy":
                xl.sync()
            loss.item()
            for p, (t0, n0), (t1, n1) in zip(PHASES, marks, marks[1:], strict=False):
                if i >= 3:  # shapes inferred, programs compiled
                    best[p] = min(best[p], t1 - t0)
                    if mode == "lazy":
                        out[p]["ops"] = n1 - n0
        for p in PHASES:
            out[p][f"{mode} ms"] = best[p] * 1e3
    torch.set_num_threads(threads)
    for p in PHASES:
        out[p]["lazy us/op"] = out[p]["lazy ms"] * 1e3 / max(out[p]["ops"], 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=100_000, help="calls per identity measurement")
    ap.add_argument("--step", action="store_true", help="a training step's phases too")
    ap.add_argument("--steps", type=int, default=10, help="steps measured with --step")
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(args.reps):
        for k, v in identity_costs(args.n).items():
            rows.setdefault(k, []).append(v)
        for k, v in {**dispatch_cost(2000), **torch_floor(args.n // 10)}.items():
            rows.setdefault(k, []).append(v)
    for k, vals in rows.items():
        print(f"{k:12} {statistics.median(vals):7.2f} us  (min {min(vals):.2f})")
    if args.step:
        phases = step_phases(args.steps)
        print(f"\n{'step phase':12}{'ops':>7}{'lazy ms':>10}{'us/op':>8}{'eager ms':>10}")
        total = {k: sum(r[k] for r in phases.values()) for k in ("ops", "lazy ms", "eager ms")}
        total["lazy us/op"] = total["lazy ms"] * 1e3 / total["ops"]
        for p, r in [*phases.items(), ("step", total)]:
            lazy = f"{r['ops']:7.0f}{r['lazy ms']:10.2f}{r['lazy us/op']:8.1f}"
            print(f"{p:12}{lazy}{r['eager ms']:10.2f}")


if __name__ == "__main__":
    main()
