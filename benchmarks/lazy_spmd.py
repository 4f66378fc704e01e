"""Cold compile vs warm load of SPMD-sharded GPT training on 8 CPU devices.

python benchmarks/lazy_spmd.py [--reps 1] [--layers 2 --d 64 ...]

For each mesh (``none``: one device, ``dp``: 8-way data parallel, ``tp``: 2-way tensor x
4-way data parallel), runs ``examples/spmd_gpt.py`` in a fresh process on an empty cache
(cold), then again on the same cache (warm), and prints per run: graphs compiled and loaded,
XLA compile (or load) seconds, lowering seconds and the whole run. Results also go to
``bench-results/lazy_spmd.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(mesh: str, cache: str, extra: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "examples" / "spmd_gpt.py"), "--mesh", mesh]
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
    args, extra = ap.parse_known_args()
    rows = []
    print(
        f"{'mesh':5} {'run':5} {'compiled':>8} {'loaded':>6} {'compile_s':>9} "
        f"{'lowering_s':>10} {'total_s':>7}"
    )
    for mesh in ("none", "dp", "tp"):
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory() as cache:
                for phase in ("cold", "warm"):
                    r = run(mesh, cache, extra)
                    rows.append({"mesh": mesh, "run": phase, "rep": rep, **r})
                    print(
                        f"{mesh:5} {phase:5} {r['compiled']:8d} {r['loaded_from_cache']:6d} "
                        f"{r['compile_s']:9.2f} {r['lowering_s']:10.2f} {r['total_s']:7.2f}"
                    )
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    (out / "lazy_spmd.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
