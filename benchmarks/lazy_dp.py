"""Data-parallel GPT-style training with xlacache.lazy over 1, 2 and 4 processes.

    python benchmarks/lazy_dp.py                  # layers 4, d 256, seq 64, batch 4 per process
    python benchmarks/lazy_dp.py --nprocs 1 2 --steps 8 --out dp.json

Each configuration is ``xl.launch`` in a new process (``--job``), run twice over one xlacache
directory: ``cold`` (empty) and ``warm``. Per process the batch is fixed (weak scaling), so
``n`` processes train ``n`` times the samples per step. Reported per run: steady step (median
after step 2, rank 0), samples/s, scaling efficiency (``t_1 / t_n``: 1.0 is perfect), the
pod's compiles (real XLA compiles summed over the processes) and cache hits, and the cost of
one all-reduce of the whole gradient (a separate program; inside the step it is the same
collective). The machine's cores bound it: on 2 cores 4 processes share 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _worker(index: int, args: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F

    import xlacache
    import xlacache.lazy as xl

    sys.path.insert(0, str(ROOT / "examples"))
    from gpt import GPT

    xlacache.initialize_cache(args.cache)
    dev = xl.device()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d, args.heads, args.layers, args.seq, 0.0).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(1 + xl.global_ordinal())  # each rank its own data
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=g)
    times, losses = [], []
    for step in range(args.steps):
        t = time.perf_counter()
        batch = data[step].to(dev)
        opt.zero_grad(set_to_none=True)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        xl.optimizer_step(opt)
        xl.sync()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
    flat = torch.ones(sum(p.numel() for p in model.parameters())).to(dev)  # data, not a constant
    reduce_s = []
    for _ in range(6 if xl.world_size() > 1 else 0):
        t = time.perf_counter()
        xl.all_reduce("sum", flat).sum().item()
        reduce_s.append(time.perf_counter() - t)
    m = xl.metrics
    return {
        "first_step_s": times[0],
        "steady_step_s": statistics.median(times[2:]) if len(times) > 3 else times[-1],
        "loss": losses[-1],
        "compiles": m.counter_value("UncachedCompile") or 0,
        "cache_hits": m.counter_value("PersistentCacheHit") or 0,
        "all_reduce_s": statistics.median(reduce_s[2:]) if reduce_s else 0.0,
        "gradient_mb": flat.numel() * 4 / 2**20,
    }


def _job(args: argparse.Namespace) -> None:
    import xlacache.lazy as xl

    t0 = time.perf_counter()
    ranks = xl.launch(_worker, args=(args,), nprocs=args.nprocs)
    ranks = ranks if isinstance(ranks, list) else [ranks]
    r0 = ranks[0]
    print(
        json.dumps(
            {
                "nprocs": args.nprocs,
                "wall_s": time.perf_counter() - t0,
                "first_step_s": r0["first_step_s"],
                "steady_step_s": r0["steady_step_s"],
                "pod_compiles": sum(r["compiles"] for r in ranks),
                "compiles_per_rank": [r["compiles"] for r in ranks],
                "pod_cache_hits": sum(r["cache_hits"] for r in ranks),
                "all_reduce_s": r0["all_reduce_s"],
                "gradient_mb": r0["gradient_mb"],
                "same_loss_on_every_rank": len({r["loss"] for r in ranks}) == 1,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nprocs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="per process")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        args.nprocs = args.nprocs[0]
        return _job(args)
    model = [f"--{k}={getattr(args, k)}" for k in ("layers", "d", "heads", "seq", "batch")]
    model += [f"--vocab={args.vocab}", f"--steps={args.steps}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for n in args.nprocs:
        with tempfile.TemporaryDirectory() as cache:
            for run in ("cold", "warm"):
                cmd = [sys.executable, __file__, "--job", f"--nprocs={n}", f"--cache={cache}"]
                out = subprocess.run(
                    cmd + model, capture_output=True, text=True, env=env, timeout=1800
                )
                if out.returncode != 0:
                    sys.exit(f"lazy_dp: {n} processes, {run}: failed\n{out.stderr[-3000:]}")
                rows.append({"run": run, **json.loads(out.stdout.strip().splitlines()[-1])})
    base = {r["run"]: r["steady_step_s"] for r in rows if r["nprocs"] == 1}
    print(f"model: {' '.join(model)}")
    print(
        "procs run   step(ms) samples/s efficiency first(s) wall(s) compiles/pod hits/pod "
        "allreduce(ms)"
    )
    for r in rows:
        n, t = r["nprocs"], r["steady_step_s"]
        r["samples_per_s"] = n * args.batch / t
        r["efficiency"] = base[r["run"]] / t if r["run"] in base else None
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        print(
            f"{n:5d} {r['run']:5s} {t * 1000:9.1f} {r['samples_per_s']:9.1f} {eff:>10s} "
            f"{r['first_step_s']:8.1f} {r['wall_s']:7.1f} {r['pod_compiles']:12d} "
            f"{r['pod_cache_hits']:8d} {r['all_reduce_s'] * 1000:13.1f}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"model": model, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
