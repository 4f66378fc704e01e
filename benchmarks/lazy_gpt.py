"""GPT-style training with xlacache.lazy: cold and warm runs in fresh processes, and eager CPU.

    python benchmarks/lazy_gpt.py                      # 12 layers, d=512, 8 heads, seq 128, ...
    python benchmarks/lazy_gpt.py --small              # a quick check
    python benchmarks/lazy_gpt.py --out results.json

Each run is ``examples/gpt.py --json`` in a new process. ``cold`` uses an empty xlacache
directory, ``warm`` the same directory again, ``eager`` plain PyTorch on CPU. Reported: time to
first step (process start to first loss), steady step (median after step 2), compiles (real XLA
compiles), persistent-cache hits, tracing time per step and per op (overlapped with the previous
step's asynchronous execution, and alone with the device idle), and its share of the step.
Reference (torch_xla 2.9, PJRT CPU, same model): steady step 1.1-1.2 s, 8.8 s compiling; its
cache fails to load on CPU, so warm equals cold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIG = ["--layers", "12", "--d", "512", "--heads", "8", "--seq", "128", "--batch", "4"]
BIG += ["--vocab", "1024"]
SMALL = ["--layers", "2", "--d", "64", "--heads", "4", "--seq", "32", "--batch", "4"]
SMALL += ["--vocab", "128"]


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    """Run one measuring process (the project on its path); its last stdout line is JSON."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    out = subprocess.run(cmd, capture_output=True, text=True, env=full, check=False)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(extra: list[str]) -> dict:
    return run_json([sys.executable, str(ROOT / "examples" / "gpt.py"), "--json", *extra])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "lazy_gpt.json"))
    ap.add_argument("--no-eager", action="store_true")
    args = ap.parse_args()
    size = (SMALL if args.small else BIG) + ["--steps", str(args.steps)]
    with tempfile.TemporaryDirectory(prefix="xlacache-bench-") as tmp:
        cache = str(Path(tmp) / "cache")
        results = {"cold": run([*size, "--cache", cache]), "warm": run([*size, "--cache", cache])}
    if not args.no_eager:
        results["eager"] = run([*size, "--eager"])
    results["same_losses_cold_warm"] = results["cold"]["losses"] == results["warm"]["losses"]

    rows = [
        ("time to first step (s)", "time_to_first_step_s", "{:.2f}"),
        ("first step (s)", "first_step_s", "{:.2f}"),
        ("steady step (s)", "steady_step_s", "{:.3f}"),
        ("XLA compiles", "compiles", "{}"),
        ("persistent cache hits", "persistent_hits", "{}"),
        ("compile/load time (s)", "compile_s", "{:.2f}"),
        ("lowering to HLO (s)", "lowering_s", "{:.2f}"),
        ("tracing/step, overlapped (s)", "trace_per_step_s", "{:.3f}"),
        ("ops traced per step", "traced_ops_per_step", "{:.0f}"),
        ("tracing/op, overlapped (us)", "trace_per_op_us", "{:.1f}"),
        ("tracing, device idle (s)", "trace_idle_device_s", "{:.3f}"),
        ("tracing/op, idle (us)", "trace_per_op_idle_us", "{:.1f}"),
        ("tracing/op, idle CPU (us)", "trace_per_op_idle_cpu_us", "{:.1f}"),
        ("tracing share of step", "trace_share_of_steady_step", "{:.1%}"),
        ("total (s)", "total_s", "{:.2f}"),
    ]
    modes = [m for m in ("cold", "warm", "eager") if m in results]
    print(f"{'':28}" + "".join(f"{m:>12}" for m in modes))
    for label, key, fmt in rows:
        cells = [fmt.format(results[m][key]) if key in results[m] else "-" for m in modes]
        print(f"{label:28}" + "".join(f"{c:>12}" for c in cells))
    cold, warm = results["cold"], results["warm"]
    ratio = warm["time_to_first_step_s"] / cold["time_to_first_step_s"]
    print(f"warm/cold time to first step: {ratio:.2f}")
    print(f"same losses cold and warm: {results['same_losses_cold_warm']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
