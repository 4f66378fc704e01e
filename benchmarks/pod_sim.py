"""A pod on one machine: N worker processes start at once against an empty shared store and
run the same JAX GPT-style training step; with and without single-flight.

    .venv/bin/python benchmarks/pod_sim.py                       # 16 workers, server + gcs
    .venv/bin/python benchmarks/pod_sim.py --workers 4 --size tiny   # smoke test
    .venv/bin/python benchmarks/pod_sim.py --backends server --reps 2

Every worker is its own process with its own empty local cache directory, as a pod's
hosts are, in front of one shared store: an `xlacache serve` daemon on loopback
(``server``) or a fake-gcs-server bucket (``gcs``). Worker i gets RANK=i, so by default
rank 0 writes and the others read (docs/pods.md). Each imports JAX, opens the cache,
builds the model of benchmarks/jax_gpt.py (size: ``--size``) and says it is ready; the
driver starts every worker's first step at once (a file they wait on) and each reports
when its first step was done.

Per configuration it reports:

- XLA compiles across the pod: calls into JAX's backend compile
  (`jax._src.compiler.backend_compile_and_load`, wrapped in every worker: xlacache's own
  counters are not used), and the CPU seconds spent in them (process CPU time);
- pod wall: from the common start until the last worker finished its first step, and
  from spawning the workers (imports included);
- alone: one worker by itself on an empty store (cold), then another with an empty local
  directory in front of that store (warm): the first-step times the goal is stated in
  (pod wall <= 1.3 x (cold + warm)).

``single-flight`` is the default; ``off`` sets XLACACHE_SINGLE_FLIGHT=0 (every worker
that misses compiles; only rank 0 stores). The machine load (`uptime`) before and after
each pod is recorded: on a shared 2-core machine 16 workers queue for the cores.
Results: a markdown table on stdout, JSON in bench-results/pod_sim.json.
"""

from __future__ import annotations

import time

_T_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
READY_SECONDS = 600.0
STEP_SECONDS = 900.0

# Model sizes (benchmarks/jax_gpt.Config fields). "full" is jax_gpt's default.
SIZES = {
    "tiny": dict(layers=2, d_model=64, heads=2, seq=32, batch=2, vocab=128),
    "small": dict(layers=4, d_model=256, heads=4, seq=64, batch=4, vocab=512),
    "full": {},
}


# -- the worker ------------------------------------------------------------------------


def worker_main(args) -> None:
    import jax
    from jax._src import compiler

    sys.path.insert(0, str(ROOT))
    import xlacache
    from benchmarks.jax_gpt import Config, init_state, make_batch, make_train_step

    record: dict = {"rank": int(os.environ.get("RANK", "0")), "compiles": 0}
    record["compile_cpu_s"] = record["compile_wall_s"] = 0.0
    inner = compiler.backend_compile_and_load

    def counted(*a, **kw):
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            record["compiles"] += 1
            record["compile_cpu_s"] += time.process_time() - cpu
            record["compile_wall_s"] += time.perf_counter() - wall

    compiler.backend_compile_and_load = counted
    options = {"remote": args.remote} if args.remote else {}
    xlacache.initialize_cache(args.cache_dir, **options)
    cfg = Config(**SIZES[args.size])
    params, opt_state = init_state(cfg)
    batch = make_batch(cfg)
    step = make_train_step(cfg)
    record["ready"] = time.time()
    if args.ready:
        Path(args.ready).touch()
        deadline = time.monotonic() + READY_SECONDS
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                raise SystemExit("no start signal")
            time.sleep(0.005)
    start, cpu = time.time(), time.process_time()
    params, opt_state, loss = step(params, opt_state, batch)
    jax.block_until_ready((params, opt_state, loss))
    record.update(start=start, done=time.time(), loss=float(loss))
    record["first_step_s"] = record["done"] - start
    record["first_step_cpu_s"] = time.process_time() - cpu
    record["stats"] = xlacache.stats()
    Path(args.result).write_text(json.dumps(record))


# -- stores ----------------------------------------------------------------------------


class SharedStore:
    """A fresh shared store per run: a server on an empty directory, or an empty bucket."""

    def __init__(self, kind: str, work: Path, emulator=None) -> None:
        self.kind = kind
        self.env: dict[str, str] = {}
        self.server = None
        if kind == "server":
            sys.path.insert(0, str(ROOT / "tests" / "server"))
            from srvutil import start_server

            self.server = start_server(work, store=work / "server-store")
            self.url = self.server.url
        else:
            self.url = f"gs://{emulator.create_bucket()}/cache"
            self.env = {"STORAGE_EMULATOR_HOST": emulator.url}

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(signal.SIGTERM)


def load() -> str:
    """The load averages (1, 5, 15 min), as `uptime` shows them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_workers(args, store: SharedStore, work: Path, n: int, single_flight: bool) -> dict:
    """n workers on the store, started together; their records and the pod's figures."""
    tag = f"{time.monotonic_ns()}"
    go = work / f"go-{tag}"
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", **store.env)
    env = {k: v for k, v in env.items() if not k.startswith(("XLACACHE_", "XLA_FLAGS"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if not single_flight:
        env["XLACACHE_SINGLE_FLIGHT"] = "0"
    procs = []
    load_before = load()
    spawned = time.time()
    for i in range(n):
        result = work / f"result-{tag}-{i}.json"
        ready = work / f"ready-{tag}-{i}"
        cmd = [
            sys.executable, __file__, "--worker", "--size", args.size,
            "--cache-dir", str(work / f"local-{tag}-{i}"), "--remote", store.url,
            "--result", str(result),
        ]  # fmt: skip
        if n > 1:
            cmd += ["--ready", str(ready), "--go", str(go)]
        worker_env = dict(env, RANK=str(i)) if n > 1 else env
        proc = subprocess.Popen(cmd, env=worker_env, stderr=subprocess.PIPE, text=True)
        procs.append((proc, ready, result))
    try:
        if n > 1:
            deadline = time.monotonic() + READY_SECONDS
            while not all(r.exists() for _, r, _ in procs):
                for proc, _, _ in procs:
                    if proc.poll() is not None:
                        raise SystemExit(f"worker failed: {proc.stderr.read()[-3000:]}")
                if time.monotonic() > deadline:
                    raise SystemExit("workers did not get ready")
                time.sleep(0.01)
            go.touch()
        started = time.time()
        records = []
        for proc, _, result in procs:
            _, err = proc.communicate(timeout=STEP_SECONDS)
            if proc.returncode != 0:
                raise SystemExit(f"worker failed ({proc.returncode}): {err[-3000:]}")
            records.append(json.loads(result.read_text()))
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
    done = max(r["done"] for r in records)
    return {
        "workers": n,
        "single_flight": single_flight,
        "compiles": sum(r["compiles"] for r in records),
        "compile_cpu_s": sum(r["compile_cpu_s"] for r in records),
        "first_step_cpu_s": sum(r["first_step_cpu_s"] for r in records),
        "wall_from_start_s": done - (started if n > 1 else records[0]["start"]),
        "wall_from_spawn_s": done - spawned,
        "first_step_s": [r["first_step_s"] for r in records],
        "compiles_by_rank": [r["compiles"] for r in records],
        "compiles_avoided": sum(r["stats"]["compiles_avoided"] for r in records),
        "wait_seconds": sum(r["stats"]["wait_seconds"] for r in records),
        "errors": [r["stats"]["errors"] for r in records if r["stats"]["errors"]],
        "losses": sorted({r["loss"] for r in records}),
        "load_before": load_before,
        "load_after": load(),
    }


# -- the driver ------------------------------------------------------------------------


def driver(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="pod_sim_"))
    emulator = None
    results: dict = {"size": args.size, "model": SIZES[args.size] or "jax_gpt default",
                     "workers": args.workers, "runs": []}  # fmt: skip
    try:
        if "gcs" in args.backends:
            sys.path.insert(0, str(ROOT))
            from tests.gcsutil import Emulator

            emulator = Emulator.start(work)
        for rep in range(args.reps):
            for kind in args.backends:
                (work / f"{kind}-{rep}").mkdir(parents=True)
                runs = {}
                store = SharedStore(kind, work / f"{kind}-{rep}", emulator)
                try:
                    runs["cold"] = run_workers(args, store, work, 1, True)
                    runs["warm"] = run_workers(args, store, work, 1, True)
                finally:
                    store.close()
                for mode, single_flight in (("single-flight", True), ("off", False)):
                    path = work / f"{kind}-{rep}-{mode}"
                    path.mkdir()
                    store = SharedStore(kind, path, emulator)
                    try:
                        runs[mode] = run_workers(args, store, work, args.workers, single_flight)
                    finally:
                        store.close()
                for name, run in runs.items():
                    results["runs"].append({"rep": rep, "backend": kind, "config": name, **run})
                    shown = {k: (round(v, 2) if isinstance(v, float) else v)
                             for k, v in run.items() if k in ("compiles", "compile_cpu_s",
                             "wall_from_start_s", "wall_from_spawn_s", "load_after")}  # fmt: skip
                    print(f"[rep {rep}] {kind:6s} {name:13s} {shown}", file=sys.stderr)
    finally:
        if emulator is not None:
            emulator.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def summarize(results: dict) -> list[str]:
    lines = [
        f"Pod of {results['workers']} workers, model {results['size']} "
        f"({results['model']}); medians over repetitions.",
        "",
        "| store | config | XLA compiles (rank 0 / others) | compile CPU s | first-step CPU s "
        "(ideal: cold + (N-1) warm) | pod wall from start s | from spawn s | "
        "goal 1.3x(cold+warm) s | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in dict.fromkeys(r["backend"] for r in results["runs"]):
        runs = [r for r in results["runs"] if r["backend"] == kind]

        def med(config, field, runs=runs):
            values = [r[field] for r in runs if r["config"] == config]
            return statistics.median(values) if values else float("nan")

        goal = 1.3 * (med("cold", "wall_from_start_s") + med("warm", "wall_from_start_s"))
        ideal = med("cold", "first_step_cpu_s") + (results["workers"] - 1) * med(
            "warm", "first_step_cpu_s"
        )
        for config in ("cold", "warm", "single-flight", "off"):
            chosen = [r for r in runs if r["config"] == config]
            if not chosen:
                continue
            by_rank = chosen[-1]["compiles_by_rank"]
            split = f"{by_rank[0]} / {sum(by_rank[1:])}" if len(by_rank) > 1 else str(by_rank[0])
            cpu = f"{med(config, 'first_step_cpu_s'):.1f}"
            if config in ("single-flight", "off"):
                cpu += f" ({ideal:.1f})"
            lines.append(
                f"| {kind} | {config} | {med(config, 'compiles'):.0f} ({split}) | "
                f"{med(config, 'compile_cpu_s'):.1f} | {cpu} | "
                f"{med(config, 'wall_from_start_s'):.1f} | "
                f"{med(config, 'wall_from_spawn_s'):.1f} | "
                f"{goal:.1f} | {chosen[-1]['load_before']} -> {chosen[-1]['load_after']} |"
            )
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--backends", nargs="+", default=["server", "gcs"], choices=["server", "gcs"])
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default=str(RESULTS / "pod_sim.json"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--cache-dir", "--remote", "--result", "--ready", "--go"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker_main(args)
        return
    results = driver(args)
    lines = summarize(results)
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**results, "table": lines}, indent=1))


if __name__ == "__main__":
    main()
