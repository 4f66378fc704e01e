"""Cold compile vs warm load of SPMD-sharded GPT training on 8 CPU devices, in one process
and in a pod of 2 processes x 4 devices (one mesh over both).

python benchmarks/lazy_spmd.py [--reps 1] [--runs none,dp,tp,pod] [--layers 2 --dim 64 ...]

Each run is ``examples/spmd_gpt.py`` in fresh processes on an empty cache (cold), then again
on the same cache (warm). ``none``: one device; ``dp``: 8-way data parallel; ``tp``: 2-way
tensor x 4-way data parallel; ``pod``: ``tp`` over 2 processes (``--procs 2``, each feeding
half of every global batch; rank 0 compiles, rank 1 loads). Printed per run: graphs compiled
per process, loaded (and by alias), graphs lowered, XLA compile (or load) and lowering seconds,
time to the first step's loss and the whole training; then warm/cold of the time to first
step. Results also go to ``bench-results/lazy_spmd.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"none": ["--mesh", "none"], "dp": ["--mesh", "dp"], "tp": ["--mesh", "tp"]}
RUNS["pod"] = ["--mesh", "tp", "--procs", "2"]


def run(name: str, cache: str, extra: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "examples" / "spmd_gpt.py"), *RUNS[name]]
    out = subprocess.run(
        [*cmd, "--cache", cache, "--json", *extra],
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--runs", default="none,dp,tp,pod")
    args, extra = ap.parse_known_args()
    rows = []
    print(
        f"{'run':5} {'phase':5} {'compiled/rank':>13} {'loaded':>6} {'alias':>5} "
        f"{'lowered':>7} {'compile_s':>9} {'lowering_s':>10} {'first_step_s':>12} {'total_s':>7}"
    )
    for name in args.runs.split(","):
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory() as cache:
                phases = {}
                for phase in ("cold", "warm"):
                    r = phases[phase] = run(name, cache, extra)
                    r.pop("params", None)
                    rows.append({"run": name, "phase": phase, "rep": rep, **r})
                    per_rank = ",".join(str(c) for c in r["compiled_per_rank"])
                    print(
                        f"{name:5} {phase:5} {per_rank:>13} {r['loaded_from_cache']:6d} "
                        f"{r['loaded_by_alias']:5d} {r['lowered']:7d} {r['compile_s']:9.2f} "
                        f"{r['lowering_s']:10.2f} {r['first_step_s']:12.2f} {r['total_s']:7.2f}"
                    )
                ratio = phases["warm"]["first_step_s"] / phases["cold"]["first_step_s"]
                print(f"{name:5} warm/cold time to first step: {ratio:.2f}x")
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    (out / "lazy_spmd.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
