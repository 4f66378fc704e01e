"""torch.compile(backend="xlacache") against eager, lazy tracing and Inductor.

    python benchmarks/compile_gpt.py                 # 12-layer GPT (d=512, seq 128, batch 4) + HF
    python benchmarks/compile_gpt.py --small         # a quick check
    python benchmarks/compile_gpt.py --no-hf         # the GPT part only

GPT part: each mode trains ``examples/gpt.py``'s model (AdamW, gradient clipping) in a fresh
process: ``eager`` (CPU), ``lazy`` (xlacache.lazy tracing), ``xlacache``
(``torch.compile(backend="xlacache")`` of the forward and loss; backward compiled by
AOTAutograd; the optimizer step traced lazily), ``inductor`` (``torch.compile()`` on CPU, its
own FX graph cache). ``cold`` runs on empty cache directories, ``warm`` is the next process on
the same ones. Reported: time from process start to the end of the first two steps, the
steady step (median after step 2), losses.

HF part: the seven tiny transformers models of ``tests/lazy/hf_models.py`` (AdamW, 10 steps)
eagerly and through ``torch.compile(backend="xlacache")`` in one process each: steady step
(median of steps 4-10) of both, the largest relative loss difference, and graphs lowered or
loaded after step 3 (0: nothing compiles once warm).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from lazy_gpt import run_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIG = {"layers": 12, "d": 512, "heads": 8, "seq": 128, "batch": 4, "vocab": 1024}
SMALL = {"layers": 2, "d": 64, "heads": 4, "seq": 32, "batch": 4, "vocab": 128}


def gpt_child(mode: str, size: dict, steps: int, cache: str, device: str = "cpu") -> dict:
    import warnings

    import torch
    import torch.nn.functional as F

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    from examples.gpt import GPT

    xl = None
    if mode in ("lazy", "xlacache"):
        import xlacache
        import xlacache.lazy as xl

        xlacache.initialize_cache(cache, min_compile_seconds=0)
        dev = xl.device()
    else:
        dev = torch.device(device)  # eager and inductor: cpu here, cuda in benchmarks/gpu.py
    torch.manual_seed(0)
    v = size["vocab"]
    model = GPT(v, size["d"], size["heads"], size["layers"], size["seq"], 0.0).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.randint(0, v, (steps, size["batch"], size["seq"] + 1))

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x).reshape(-1, v), y.reshape(-1))

    if mode == "xlacache":
        loss_of = torch.compile(loss_of, backend="xlacache")
    elif mode == "inductor":
        loss_of = torch.compile(loss_of)
    losses, times, two = [], [], 0.0
    for step in range(steps):
        t = time.perf_counter()
        batch = data[step].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if xl is not None:
            xl.sync()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
        if step == 1:
            two = time.perf_counter() - T0
    out = {"mode": mode, "first_two_steps_s": two, "losses": losses}
    out["steady_step_s"] = statistics.median(times[2:])
    if xl is not None:
        import xlacache.lazy.dynamo as xc

        out["report"] = {k: v for k, v in xc.report().items() if not isinstance(v, list)}
    return out


def hf_child(name: str, steps: int) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    import xlacache.lazy as xl
    from tests.lazy import hf_models as H
    from xlacache.lazy import metrics

    def run(device: torch.device, compiled: bool) -> tuple[list, list, int]:
        model = H.build(name).to(device)
        fn = torch.compile(model, backend="xlacache") if compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses, secs, late = [], [], 0
        for step in range(steps):
            if step == 3:
                late = -_graphs(metrics)
            t0 = time.perf_counter()
            inputs = {k: v.to(device) for k, v in H.batch(name, step).items()}
            opt.zero_grad()
            loss = fn(**inputs).loss
            loss.backward()
            opt.step()
            if device.type == "xla":
                xl.sync()
            losses.append(loss.item())
            secs.append(time.perf_counter() - t0)
        return losses, secs, late + _graphs(metrics)

    eager, eager_s, _ = run(torch.device("cpu"), False)
    comp, comp_s, late = run(xl.device(), True)
    rel = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(eager, comp, strict=True))
    return {
        "model": name,
        "eager_step_s": statistics.median(eager_s[3:]),
        "compiled_step_s": statistics.median(comp_s[3:]),
        "max_rel_loss_diff": rel,
        "graphs_after_step_3": late,
    }


def _graphs(metrics: object) -> int:
    names = ("CompiledGraphLowering", "CompiledGraphAliasHit", "UncachedCompile")
    return sum(metrics.counter_value(n) or 0 for n in names)  # type: ignore[attr-defined]


def spawn(args: list[str], env: dict | None = None) -> dict:
    return run_json([sys.executable, __file__, *args], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-gpt", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "compile_gpt.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = SMALL if args.small else BIG
    if args.child == "hf":
        print(json.dumps(hf_child(args.model, 10)))
        return
    if args.child:
        print(json.dumps(gpt_child(args.child, size, args.steps, args.cache, args.device)))
        return
    common = ["--steps", str(args.steps)] + (["--small"] if args.small else [])
    results: dict = {"uptime": os.popen("uptime").read().strip()}
    if not args.no_gpt:
        rows = {}
        with tempfile.TemporaryDirectory(prefix="xlacache-bench-") as tmp:
            rows["eager"] = {"cold": spawn(["--child", "eager", *common])}
            for mode in ("lazy", "xlacache", "inductor"):
                cache = str(Path(tmp) / mode)
                env = {"TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / f"inductor-{mode}")}
                run = ["--child", mode, "--cache", cache, *common]
                rows[mode] = {"cold": spawn(run, env), "warm": spawn(run, env)}
                print(f"{mode}: done", file=sys.stderr)
        results["gpt"] = rows
        print(f"{'GPT':10}{'cold 2 steps':>14}{'warm 2 steps':>14}{'steady':>10}{'loss':>10}")
        for mode, r in rows.items():
            warm = r.get("warm", {}).get("first_two_steps_s")
            print(
                f"{mode:10}{r['cold']['first_two_steps_s']:14.2f}"
                + (f"{warm:14.2f}" if warm else f"{'-':>14}")
                + f"{r['cold']['steady_step_s']:10.3f}{r['cold']['losses'][-1]:10.4f}"
            )
    if not args.no_hf:
        from tests.lazy.hf_models import MODELS

        hf = [spawn(["--child", "hf", "--model", m]) for m in MODELS]
        results["hf"] = hf
        print(f"{'model':10}{'eager':>10}{'compiled':>10}{'ratio':>8}{'rel diff':>10}{'late':>6}")
        for r in hf:
            ratio = r["compiled_step_s"] / r["eager_step_s"]
            print(
                f"{r['model']:10}{r['eager_step_s']:10.4f}{r['compiled_step_s']:10.4f}"
                f"{ratio:8.2f}{r['max_rel_loss_diff']:10.1e}{r['graphs_after_step_3']:6}"
            )
    print(results["uptime"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
