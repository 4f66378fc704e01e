"""The seven tiny Hugging Face models of ``tests/lazy/hf_models.py``: eager CPU against
``torch.compile(backend="xlacache")`` with PyTorch's recipe (the model compiled, and
``opt.step`` compiled alone in a function), AdamW, 10 steps, one fresh process per model.

    python benchmarks/hf_tiny.py                     # all seven
    python benchmarks/hf_tiny.py --models gpt2 t5    # some
    python benchmarks/hf_tiny.py --repeat 3          # 3 processes per model, medians

Reported per model: the steady step (median of steps 4-10; wall and process CPU time) eager
and compiled, their ratio, the largest relative loss difference over the 10 steps, the ops
traced per steady step (``TracedOps``; 0 when every step runs as compiled executables), the
graphs lowered or loaded after step 3 (0: nothing compiles once warm); then the median ratio
over the models; with ``--repeat N``, each figure is the median over N processes per model.
All figures in ``bench-results/hf_tiny.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lazy_gpt import run_json  # noqa: E402


def child(name: str, steps: int) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    import xlacache.lazy as xl
    from tests.lazy import hf_models as H
    from xlacache.lazy import metrics

    def count(n: str) -> int:
        return metrics.counter_value(n) or 0

    def graphs() -> int:
        return sum(count(n) for n in ("CompiledGraphLowering", "CompiledGraphAliasHit"))

    def run(device: torch.device, compiled: bool) -> dict:
        model = H.build(name).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fn = torch.compile(model, backend="xlacache") if compiled else model

        def update() -> None:
            opt.step()

        step_fn = torch.compile(update, backend="xlacache") if compiled else update
        losses, wall, cpu, traced, late = [], [], [], [], 0
        for step in range(steps):
            if step == 3:
                late = -graphs()
            t0, c0, n0 = time.perf_counter(), time.process_time(), count("TracedOps")
            inputs = {k: v.to(device) for k, v in H.batch(name, step).items()}
            opt.zero_grad()
            loss = fn(**inputs).loss
            loss.backward()
            step_fn()
            if device.type == "xla":
                xl.sync()
            losses.append(loss.item())
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            traced.append(count("TracedOps") - n0)
        return {
            "losses": losses,
            "wall_s": statistics.median(wall[3:]),
            "cpu_s": statistics.median(cpu[3:]),
            "traced_per_step": statistics.median(traced[3:]),
            "graphs_after_step_3": late + graphs(),
        }

    eager = run(torch.device("cpu"), False)
    comp = run(xl.device(), True)
    pairs = zip(eager["losses"], comp["losses"], strict=True)
    rel = max(abs(a - b) / max(abs(a), 1e-12) for a, b in pairs)
    return {"model": name, "eager": eager, "compiled": comp, "max_rel_loss_diff": rel}


def _median_run(runs: list[dict]) -> dict:
    """One row from repeated processes of a model: each figure's median over the runs (the
    largest loss difference and late graphs: their maximum)."""
    row = dict(runs[0], runs=runs)
    for mode in ("eager", "compiled"):
        row[mode] = dict(runs[0][mode])
        for k in ("wall_s", "cpu_s", "traced_per_step"):
            row[mode][k] = statistics.median(r[mode][k] for r in runs)
        row[mode]["graphs_after_step_3"] = max(r[mode]["graphs_after_step_3"] for r in runs)
    row["max_rel_loss_diff"] = max(r["max_rel_loss_diff"] for r in runs)
    return row


def main() -> None:
    from tests.lazy.hf_models import MODELS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="processes per model (medians)")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "hf_tiny.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    rows = []
    for m in args.models:
        cmd = [sys.executable, __file__, "--child", m, "--steps", str(args.steps)]
        rows.append(_median_run([run_json(cmd) for _ in range(args.repeat)]))
        print(f"{m}: done", file=sys.stderr)
    head = f"{'model':9}{'eager ms':>10}{'comp ms':>10}{'ratio':>7}{'cpu ratio':>10}"
    print(head + f"{'rel diff':>10}{'traced':>8}{'late':>6}")
    for r in rows:
        e, c = r["eager"], r["compiled"]
        r["ratio"] = c["wall_s"] / e["wall_s"]
        r["cpu_ratio"] = c["cpu_s"] / e["cpu_s"]
        print(
            f"{r['model']:9}{e['wall_s'] * 1e3:10.2f}{c['wall_s'] * 1e3:10.2f}{r['ratio']:7.2f}"
            f"{r['cpu_ratio']:10.2f}{r['max_rel_loss_diff']:10.1e}{c['traced_per_step']:8.0f}"
            f"{c['graphs_after_step_3']:6}"
        )
    med = statistics.median(r["ratio"] for r in rows)
    cpu_med = statistics.median(r["cpu_ratio"] for r in rows)
    print(f"median compiled/eager: {med:.2f} (CPU time: {cpu_med:.2f})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "median": med, "cpu_median": cpu_med}))


if __name__ == "__main__":
    main()
