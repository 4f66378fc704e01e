"""Programs that reach no barrier, with and without the cap on the pending graph
(``XLA_TRIM_GRAPH_SIZE``, ``lazy/trim.py``), each in a fresh process, against eager CPU.

    python benchmarks/lazy_trim.py                       # ~3 min
    python benchmarks/lazy_trim.py --cap 100000 --every 5000 --chain 30000   # torch_xla's

Two workloads: ``chain``, ``x = x * 0.999 + 0.001`` repeated (two ops an iteration), and
``eval``, an MLP's evaluation loop that sums its accuracy and loss on the device. Neither
calls ``sync()`` nor reads a value until its end. Reported per run: wall seconds (tracing,
lowering, compiling and running; no persistent cache), the graphs compiled and their largest
op count, the trims (``TrimIrGraph``), and the largest difference from eager's result (XLA
contracts the chain's multiply-add into one rounding where eager rounds twice: docs/lazy.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lazy_gpt import run_json  # noqa: E402

OFF = 10**12  # a cap no program reaches


def chain(dev: object, n: int) -> object:
    """``x = x * 0.999 + 0.001`` ``n`` times from a ramp; the result on the CPU."""
    import torch

    x = torch.linspace(0, 1, 64).to(dev)
    for _ in range(n):
        x = x * 0.999 + 0.001
    return x.cpu()


def evaluate(dev: object, batches: int) -> object:
    """An MLP's evaluation loop summing accuracy and loss on the device, no barrier; the
    two sums on the CPU (``tests/lazy/test_trim.py`` runs it too)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    ).to(dev)
    g = torch.Generator().manual_seed(1)
    correct = torch.zeros((), dtype=torch.long).to(dev)
    total = torch.zeros(()).to(dev)
    for _ in range(batches):
        x = torch.randn(16, 32, generator=g).to(dev)
        y = torch.randint(0, 10, (16,), generator=g).to(dev)
        with torch.no_grad():
            out = model(x)
        correct += (out.argmax(1) == y).sum()
        total += F.cross_entropy(out, y, reduction="sum")
    return torch.stack([correct.cpu().double(), total.cpu().double()])


def child(workload: str, size: int) -> dict:
    import xlacache.lazy as xl
    from xlacache.lazy import metrics

    fn = chain if workload == "chain" else evaluate
    eager = fn("cpu", size)
    metrics.clear_all()
    t0 = time.perf_counter()
    lazy = fn(xl.device(), size)
    secs = time.perf_counter() - t0
    sizes = (metrics.metric_data("GraphOps") or (0, 0, [0]))[2]
    return {
        "seconds": round(secs, 2),
        "graphs_compiled": metrics.counter_value("UncachedCompile") or 0,
        "largest_graph_ops": max(sizes),
        "trims": metrics.counter_value("TrimIrGraph") or 0,
        "max_abs_diff_eager": float((lazy - eager).abs().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", type=int, default=5000, help="XLA_TRIM_GRAPH_SIZE, capped runs")
    ap.add_argument("--every", type=int, default=500, help="XLA_TRIM_GRAPH_CHECK_FREQUENCY")
    ap.add_argument("--chain", type=int, default=10_000, help="iterations of the chain")
    ap.add_argument("--batches", type=int, default=1000, help="batches of the evaluation loop")
    ap.add_argument("--child", nargs=2, metavar=("WORKLOAD", "SIZE"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    for workload, size in (("chain", args.chain), ("eval", args.batches)):
        for cap in (args.cap, OFF):
            cmd = [sys.executable, __file__, "--child", workload, str(size)]
            env = {
                "XLA_TRIM_GRAPH_SIZE": str(cap),
                "XLA_TRIM_GRAPH_CHECK_FREQUENCY": str(args.every),
            }
            row = run_json(cmd, env)
            print(json.dumps({"workload": workload, "size": size, "cap": cap, **row}), flush=True)


if __name__ == "__main__":
    main()
