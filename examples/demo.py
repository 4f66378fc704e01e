"""`make demo`: train cold, then warm, each in a fresh process, and show the cache.

1. A GPT-style JAX training step (examples/jax_train_step.py).
2. A PyTorch GPT-style model through xlacache.lazy (examples/gpt.py).
Each runs twice against one cache directory; the second run loads every compiled
program instead of compiling it. Then `xlacache inspect` shows what the cache holds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_json(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"demo: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cold_then_warm(title: str, cmd: list[str], first_key: str) -> None:
    print(f"\n== {title} ==")
    cold = run_json(cmd)
    warm = run_json(cmd)
    for name, run in (("cold", cold), ("warm", warm)):
        s = run["stats"]
        print(
            f"{name}: first step {run[first_key]:6.2f} s | compiled {s['misses']}, "
            f"loaded {s['hits']} ({s['prefetch_hits']} prefetched) | "
            f"compile {s['compile_seconds']:.2f} s, waited on loads {s['load_seconds']:.2f} s | "
            f"loss {run['loss']:.5f}"
        )
    saved = cold[first_key] - warm[first_key]
    print(f"time saved on the first step: {saved:.2f} s ({cold[first_key] / warm[first_key]:.1f}x)")


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="xlacache-demo-"))
    try:
        jax_cache = root / "jax"
        cold_then_warm(
            "JAX GPT-style training step (4 layers, d=256)",
            [sys.executable, str(HERE / "jax_train_step.py"), str(jax_cache)],
            "first_step_s",
        )
        torch_example = HERE / "gpt.py"
        if torch_example.exists():
            torch_cache = root / "torch"
            cold_then_warm(
                "PyTorch GPT-style model on xlacache.lazy",
                [sys.executable, str(torch_example), "--cache-dir", str(torch_cache), "--json"],
                "time_to_first_step_s",
            )
        print(f"\n== xlacache inspect {jax_cache} ==", flush=True)
        xlacache_cli = [sys.executable, "-m", "xlacache.cli.main"]
        subprocess.run([*xlacache_cli, "inspect", str(jax_cache)], check=True)
        subprocess.run([*xlacache_cli, "stats", str(jax_cache)], check=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
