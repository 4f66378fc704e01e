"""torch.compile(backend="xlacache") against eager, lazy tracing and Inductor.

    python benchmarks/compile_gpt.py                 # 12-layer GPT (d=512, seq 128, batch 4) + HF
    python benchmarks/compile_gpt.py --small         # a quick check
    python benchmarks/compile_gpt.py --no-hf         # the GPT part only

GPT part: each mode trains ``examples/gpt.py``'s model (AdamW, gradient clipping) in a fresh
process: ``eager`` (CPU), ``lazy`` (xlacache.lazy tracing), ``xlacache``
(``torch.compile(backend="xlacache")`` of the forward and loss, and of the optimizer step with
gradient clipping as PyTorch's compiled-optimizer recipe does; backward compiled by
AOTAutograd), ``inductor`` (the same with ``torch.compile()`` on CPU, its own caches).
``cold`` runs on empty cache directories, ``warm`` is the next process on the same ones.
Reported: time from process start to the end of the first two steps, the steady step (median
after step 2; wall and process CPU time), losses, ops traced per steady step, and Dynamo's and
AOTAutograd's own seconds (what a warm process still pays).

HF part: ``benchmarks/hf_tiny.py`` (the seven tiny transformers models, eager against the
model and its optimizer step compiled).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from lazy_gpt import run_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIG = {"layers": 12, "d": 512, "heads": 8, "seq": 128, "batch": 4, "vocab": 1024}
SMALL = {"layers": 2, "d": 64, "heads": 4, "seq": 32, "batch": 4, "vocab": 128}


def gpt_child(
    mode: str, size: dict, steps: int, cache: str, device: str = "cpu", precision: str = "highest"
) -> dict:
    import warnings

    import torch
    import torch.nn.functional as F

    warnings.simplefilter("ignore")
    torch.set_float32_matmul_precision(precision)  # "high": TF32 on a GPU, for every mode
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

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    if mode in ("xlacache", "inductor"):  # PyTorch's recipe: the model and the optimizer step
        backend = "xlacache" if mode == "xlacache" else "inductor"
        loss_of = torch.compile(loss_of, backend=backend)
        update = torch.compile(update, backend=backend)
    losses, times, cpu, issued, traced, two = [], [], [], [], [], 0.0
    for step in range(steps):
        t, c = time.perf_counter(), time.process_time()
        n = xl.metrics.counter_value("TracedOps") or 0 if xl is not None else 0
        batch = data[step].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(batch[:, :-1], batch[:, 1:])
        loss.backward()
        update()
        if xl is not None:
            xl.sync()
            traced.append((xl.metrics.counter_value("TracedOps") or 0) - n)
        issued.append(time.perf_counter() - t)  # host time: the step's work handed over
        losses.append(loss.item())  # waits for the device
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        if step == 1:
            two = time.perf_counter() - T0
    out = {"mode": mode, "first_two_steps_s": two, "losses": losses}
    out["steady_step_s"] = statistics.median(times[2:])
    out["steady_cpu_s"] = statistics.median(cpu[2:])
    # the host's part of a steady step: near steady_step_s, the host bounds the step (tracing,
    # dispatch); well below it, the device does (on a GPU, whose work runs asynchronously)
    out["steady_host_s"] = statistics.median(issued[2:])
    if xl is not None:
        import xlacache.lazy.dynamo as xc

        out["traced_per_step"] = statistics.median(traced[2:])
        out["report"] = {k: v for k, v in xc.report().items() if not isinstance(v, list)}
        out["dynamo_s"] = _dynamo_seconds()
    return out


def _dynamo_seconds() -> dict:
    """Seconds spent by Dynamo (tracing, guards, bytecode) and AOTAutograd (tracing, or loading
    from its cache), from Dynamo's own timings."""
    from torch._dynamo.utils import compilation_time_metrics

    keys = {
        "dynamo": "_compile.compile_inner",
        "aot": "create_aot_dispatcher_function",
        "aot_cache_load": "AOTAutogradCache.inductor_load",
    }
    return {k: round(sum(compilation_time_metrics.get(v, [])), 3) for k, v in keys.items()}


def spawn(args: list[str], env: dict | None = None) -> dict:
    return run_json([sys.executable, __file__, *args], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-gpt", action="store_true")
    ap.add_argument(
        "--modes",
        nargs="*",
        default=["lazy", "xlacache", "inductor"],
        help="the GPT's modes beside eager (default: all)",
    )
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "compile_gpt.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="highest", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = SMALL if args.small else BIG
    if args.child:
        r = gpt_child(args.child, size, args.steps, args.cache, args.device, args.precision)
        print(json.dumps(r))
        return
    common = ["--steps", str(args.steps)] + (["--small"] if args.small else [])
    results: dict = {"uptime": os.popen("uptime").read().strip()}
    if not args.no_gpt:
        rows = {}
        with tempfile.TemporaryDirectory(prefix="xlacache-bench-") as tmp:
            rows["eager"] = {"cold": spawn(["--child", "eager", *common])}
            for mode in args.modes:
                cache = str(Path(tmp) / mode)
                env = {"TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / f"inductor-{mode}")}
                run = ["--child", mode, "--cache", cache, *common]
                rows[mode] = {"cold": spawn(run, env), "warm": spawn(run, env)}
                print(f"{mode}: done", file=sys.stderr)
        results["gpt"] = rows
        head = f"{'GPT':10}{'cold 2 steps':>14}{'warm 2 steps':>14}{'steady':>10}"
        print(head + f"{'warm steady':>13}{'loss':>10}")
        for mode, r in rows.items():
            warm = r.get("warm", {})
            two, steady = warm.get("first_two_steps_s"), warm.get("steady_step_s")
            print(
                f"{mode:10}{r['cold']['first_two_steps_s']:14.2f}"
                + (f"{two:14.2f}" if two else f"{'-':>14}")
                + f"{r['cold']['steady_step_s']:10.3f}"
                + (f"{steady:13.3f}" if steady else f"{'-':>13}")
                + f"{r['cold']['losses'][-1]:10.4f}"
            )
    if not args.no_hf:
        hf_out = Path(args.out).with_name("hf_tiny.json")
        script = str(Path(__file__).with_name("hf_tiny.py"))
        subprocess.run([sys.executable, script, "--repeat", "3", "--out", str(hf_out)], check=True)
        results["hf"] = json.loads(hf_out.read_text())
    print(results["uptime"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
