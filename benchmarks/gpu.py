"""The GPU benchmark: JAX and PyTorch GPT cold and warm, float32 precision, OpInfo on the device.

    python benchmarks/gpu.py                         # one GPU (about 6-8 minutes on an H100)
    python benchmarks/gpu.py --device cpu --quick    # this CPU, small sizes (a test runs it)

Every figure comes from a fresh process (``compile_gpt.py``'s and ``jax_gpt.py``'s children,
``opinfo_conformance.py``), so cold means empty cache directories and warm the next process
on the same ones:

- **JAX GPT** (12 layers, d=512, batch 4x128, AdamW): first-step time cold and warm, with
  JAX's own persistent cache and with xlacache.
- **PyTorch GPT** (the same sizes, ``examples/gpt.py``): time from process start to the end
  of the first two steps, cold and warm, and the steady step, for eager on the device's
  PyTorch backend (CUDA), Inductor (``torch.compile()``, its caches in a temporary
  directory), the lazy device and ``torch.compile(backend="xlacache")``.
- **float32 precision**: the largest error of a 1024x1024 float32 matmul against float64,
  relative to the largest float64 value (``max|c - c64| / max|c64|``), on the lazy device
  under ``torch.set_float32_matmul_precision("highest")`` and ``"high"``, and eagerly.
- **moving a module**: ``.to(<eager device>)``, ``.to(xl.device())`` and back (with and
  without ``torch.__future__.set_swap_module_params_on_conversion``).
- **OpInfo** on the device, one float32 sample per op: native, fallback, wrong, error, skip.

Prints one table and writes JSON (``--out``). ``--skip jax torch precision moves opinfo``
leaves parts out. docs/gpu.md says how to run it on a GPU machine that reaches no registry.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

# quick correctness parts first, the timed ones next, the longest last: on a machine lent for
# minutes, what finished is written before the next part starts
PARTS = ("precision", "moves", "torch", "jax", "opinfo")
TORCH_MODES = ("eager", "inductor", "lazy", "xlacache")
JAX_MODES = ("jax", "xlacache")  # JAX's own persistent cache, then xlacache's
# the OpInfo ops of --quick: the float32 products and pooling that XLA:GPU's TF32 got wrong
QUICK_OPS = ("mm", "bmm", "nn.functional.adaptive_avg_pool2d")


def _env(device: str) -> dict:
    """The children's environment: JAX on the device, the GPU not preallocated (several
    processes share it), the project importable."""
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}  # carried wheels too
    env["JAX_PLATFORMS"] = "cpu" if device == "cpu" else "cuda,cpu"
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def _json_child(cmd: list[str], env: dict, timeout: float) -> dict:
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:3])} failed: {done.stderr.strip()[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def jax_part(args: argparse.Namespace, tmp: Path) -> dict:
    """First step cold and warm, JAX's own cache against xlacache (``jax_gpt.py``'s child)."""
    import jax_gpt

    ns = SimpleNamespace(steps=args.steps, small=args.quick)
    keys = ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE", "PYTHONPATH")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: _env(args.device)[k] for k in old})
    try:
        out = {}
        for mode in args.jax_modes:
            cache = str(tmp / f"jax-{mode}")
            cold, warm = (jax_gpt.run_child(mode, ns, cache) for _ in range(2))
            out[mode] = {
                "cold_first_step_s": cold["first_step_s"],
                "warm_first_step_s": warm["first_step_s"],
                "steady_step_s": cold["steady_step_s"],
                "warm_loss_equal": cold["loss"] == warm["loss"],
            }
            if mode == "xlacache":  # what the warm process compiled: nothing, if it loaded
                out[mode]["cold_misses"] = cold["xlacache_stats"]["misses"]
                out[mode]["warm_misses"] = warm["xlacache_stats"]["misses"]
        return out
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def torch_part(args: argparse.Namespace, tmp: Path) -> dict:
    """The first two steps cold and warm (eager: once, it has no cache) and the steady step of
    each mode (``compile_gpt.py``'s GPT child)."""
    eager = "cpu" if args.device == "cpu" else "cuda"
    out: dict = {}
    for mode in args.torch_modes:
        try:
            out[mode] = _torch_mode(mode, eager, args, tmp)
        except Exception as e:  # noqa: BLE001 - one mode's failure keeps the others' figures
            out[mode] = {"error": f"{type(e).__name__}: {e}"}
    failed = [m for m, r in out.items() if "error" in r]
    if failed:
        out["error"] = [f"{m}: {out[m]['error']}" for m in failed]  # the part failed
    return out


def _torch_mode(mode: str, eager: str, args: argparse.Namespace, tmp: Path) -> dict:
    """One mode: a cold process, then (but for eager) a warm one on the same caches."""
    cmd = [sys.executable, str(HERE / "compile_gpt.py"), "--child", mode, "--device", eager]
    cmd += ["--cache", str(tmp / f"torch-{mode}"), "--steps", str(args.steps)]
    cmd += ["--small"] if args.quick else []
    cmd += ["--precision", args.matmul_precision]
    env = {**_env(args.device), "TORCHINDUCTOR_CACHE_DIR": str(tmp / f"inductor-{mode}")}
    cold = _json_child(cmd, env, args.timeout)
    out = {
        "cold_first_two_steps_s": cold["first_two_steps_s"],
        "steady_step_s": cold["steady_step_s"],
        "steady_host_s": cold["steady_host_s"],  # the host's part: issuing the step's work
        "steady_cpu_s": cold["steady_cpu_s"],
        "last_loss": cold["losses"][-1],
    }
    if "traced_per_step" in cold:  # lazy and xlacache: ops the tracer saw per steady step
        out["traced_per_step"] = cold["traced_per_step"]
    if mode == "eager":  # no cache to warm: one run
        return out
    warm = _json_child(cmd, env, args.timeout)
    out["warm_first_two_steps_s"] = warm["first_two_steps_s"]
    out["warm_steady_step_s"] = warm["steady_step_s"]  # executables loaded, not compiled
    out["warm_losses_equal"] = cold["losses"] == warm["losses"]
    if "dynamo_s" in warm:  # what a warm process still pays in Dynamo and AOTAutograd
        out["warm_dynamo_s"] = warm["dynamo_s"]["dynamo"]
    return out


PROBE = """
import json, sys
import torch
import xlacache.lazy as xl

n, eager = int(sys.argv[1]), sys.argv[2]
g = torch.Generator().manual_seed(0)
a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
ref = a.double() @ b.double()

def err(c):
    return float((c.double().cpu() - ref).abs().max() / ref.abs().max())

dev = xl.device()
out = {}
for setting in ("highest", "high"):
    torch.set_float32_matmul_precision(setting)
    out[f"lazy_{setting}"] = err(a.to(dev) @ b.to(dev))
torch.set_float32_matmul_precision("highest")
out["eager_" + eager] = err(a.to(eager) @ b.to(eager))
import jax
out["platform"] = jax.devices()[0].platform
print(json.dumps(out))
"""


def precision_part(args: argparse.Namespace, tmp: Path) -> dict:
    n = 256 if args.quick else 1024
    eager = "cpu" if args.device == "cpu" else "cuda"
    cmd = [sys.executable, "-c", PROBE, str(n), eager]
    return {"n": n, **_json_child(cmd, _env(args.device), args.timeout)}


MOVES = """
import json, sys
import torch
import xlacache.lazy as xl

eager, out = sys.argv[1], {}
dev = xl.device()
for swap in (False, True):
    for graph in ("freed", "alive"):
        torch.__future__.set_swap_module_params_on_conversion(swap)
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        x = torch.randn(4, 8)
        with torch.no_grad():
            want = m(x)
        try:
            m.to(eager)
            m(x.to(eager)).sum().backward()
            # "alive": an output whose autograd graph holds the parameters (torch then
            # refuses to swap them for a tensor subclass's, as docs/lazy.md says)
            held = m(x.to(eager)) if graph == "alive" else None
            m.to(dev)
            got = m(x.to(dev)).detach().cpu()
            m.to(eager)
            ok = bool(torch.allclose(got, want, atol=1e-5)) and m[0].weight.device.type == eager
            out[f"swap={swap}, graph {graph}"] = "ok" if ok else "wrong values"
        except Exception as e:
            out[f"swap={swap}, graph {graph}"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
"""


def moves_part(args: argparse.Namespace, tmp: Path) -> dict:
    eager = "cpu" if args.device == "cpu" else "cuda"
    return _json_child([sys.executable, "-c", MOVES, eager], _env(args.device), args.timeout)


def opinfo_part(args: argparse.Namespace, tmp: Path) -> dict:
    """``opinfo_conformance.py``, float32, one sample per op, on the device."""
    out = tmp / "opinfo"
    cmd = [sys.executable, str(HERE / "opinfo_conformance.py"), "--modes", "float32"]
    cmd += ["--samples", "1", "-j", str(args.jobs), "--out", str(out)]
    cmd += ["--ops", *QUICK_OPS] if args.quick else []
    done = subprocess.run(
        cmd, env=_env(args.device), capture_output=True, text=True, timeout=args.timeout * 3,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"opinfo_conformance failed: {done.stderr.strip()[-1500:]}")
    ops = json.loads(out.with_suffix(".json").read_text())["results"]["float32"]
    counts = {s: sum(1 for v in ops.values() if v[0] == s) for s in _STATUSES}
    bad = {o: v[1][:200] for o, v in sorted(ops.items()) if v[0] in ("wrong", "error")}
    return {"ops": len(ops), **counts, "wrong_or_error": bad}


_STATUSES = ("native", "fallback", "wrong", "error", "skip")
RUNNERS = {
    "jax": jax_part,
    "torch": torch_part,
    "precision": precision_part,
    "moves": moves_part,
    "opinfo": opinfo_part,
}


def _failed(part: dict) -> bool:
    """Did the part fail (its exception, or its failed modes)? OpInfo's ``error`` is a count
    of ops, not a failure of the part."""
    return isinstance(part.get("error"), (str, list))


def _seconds(v: float) -> str:
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"


def table(results: dict) -> str:
    """One Markdown table of every figure."""
    rows = ["| part | what | figure |", "| --- | --- | --- |"]
    for part, value in results["parts"].items():
        if isinstance(value.get("error"), str):
            rows.append(f"| {part} | failed | {value['error'][:200]} |")
            continue
        if part in ("jax", "torch"):
            for mode, r in value.items():
                if mode == "error":  # the list of the modes that failed, each in its row
                    continue
                if "error" in r:
                    why = r["error"].strip().splitlines()[-1][:300]  # the exception's own line
                    rows.append(f"| {part} GPT | {mode} | failed: {why} |")
                    continue
                figures = ", ".join(f"{k.removesuffix('_s')} {_seconds(v)}" if k.endswith("_s")
                                    else f"{k} {v}" for k, v in r.items())  # fmt: skip
                rows.append(f"| {part} GPT | {mode} | {figures} |")
        elif part == "precision":
            for k, v in value.items():
                if k not in ("n", "platform"):
                    rows.append(f"| f32 matmul {value['n']}x{value['n']} | {k} | {v:.2e} |")
        elif part == "moves":
            for k, v in value.items():
                rows.append(f"| module moves | {k} | {v} |")
        else:
            counts = ", ".join(f"{s} {value[s]}" for s in _STATUSES)
            rows.append(f"| OpInfo float32, 1 sample | {value['ops']} ops | {counts} |")
            for op, why in value["wrong_or_error"].items():
                rows.append(f"| OpInfo | {op} | {why.splitlines()[0][:150] if why else ''} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--quick", action="store_true", help="small sizes (CPU smoke test)")
    ap.add_argument("--skip", nargs="*", default=[], choices=PARTS)
    ap.add_argument("--torch-modes", nargs="+", default=list(TORCH_MODES), choices=TORCH_MODES)
    ap.add_argument("--jax-modes", nargs="+", default=list(JAX_MODES), choices=JAX_MODES)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument(
        "--matmul-precision",
        default="highest",
        choices=("highest", "high"),
        help="torch.set_float32_matmul_precision for the PyTorch GPT (high: TF32 on a GPU)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=3, help="OpInfo worker processes")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per child process")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "gpu.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict = {"device": args.device, "quick": args.quick, "parts": {}, "seconds": 0.0}
    failed = False
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xlacache-gpu-bench-") as tmp:
        for part in PARTS:
            if part in args.skip:
                continue
            t0 = time.perf_counter()
            try:
                results["parts"][part] = RUNNERS[part](args, Path(tmp))
            except Exception as e:  # noqa: BLE001 - reported in the table, and the exit code
                results["parts"][part] = {"error": f"{type(e).__name__}: {e}"}
            failed = failed or _failed(results["parts"][part])
            print(f"{part}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            results["seconds"] = round(time.perf_counter() - started, 1)
            args.out.write_text(json.dumps(results, indent=2) + "\n")  # what finished so far
    print(table(results))
    print(f"\n{results['seconds']:.0f} s in all; JSON: {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
