"""A pod on one machine: worker processes run the same JAX GPT training step against one
shared store, cold and warm; what single-flight costs beyond one compile, how fast a dead
compiler is replaced, and how fast a new worker with an empty directory starts.

    .venv/bin/python benchmarks/pod_sim.py                            # 8 workers: dir, server, gcs
    .venv/bin/python benchmarks/pod_sim.py --backends server --workers 4 --size tiny  # smoke
    .venv/bin/python benchmarks/pod_sim.py --phases pod --reps 3

Stores: ``dir`` (every worker on one cache directory), ``server`` (an `xlacache serve`
on loopback; each worker its own local directory in front of it) and ``gcs`` (the
fake-gcs-server emulator behind a recording proxy, `tests/gcsutil.py`; each worker its own
local directory). Worker i gets RANK=i (rank 0 writes, the others read: docs/pods.md)
and XLACACHE_JOB=pod-sim. Each imports JAX, opens the cache and says it is ready; when
the driver says go it starts training the model of benchmarks/jax_gpt.py (``--size``)
as a JAX script does: parameters made on the device (random-normal, ones and zeros
programs by shape), the optimizer state (one program), the train step, an evaluation:
about 10-20 programs. Its *first step* is timed from go until the evaluation is ready.

Phases, each on a fresh store:

- ``solo``: one worker on an empty store (cold), then one with an empty local directory
  on the filled store (warm). One *solo compile* = cold first step - warm first step:
  what compiling costs one worker alone.
- ``pod``: N workers start together on an empty store (cold), then the same pod again
  (warm). Goal: cold pod wall - warm pod wall <= 1.3 solo compiles (dir, server), 1.6
  (gcs); the pod's wall runs from the common start to the last worker's first step.
- ``new``: on the pod's filled store (its writer recorded the job's keys), a worker with
  an empty local directory against one whose directory is warm (the pod writer's).
  Goal: first step <= 1.05x (server, gcs; a dir store is the local directory).
- ``kill``: worker A compiles and is SIGKILLed in the train step's compile, while worker
  B waits for it. Overhead = B's time from the kill to its first step's end minus the
  compiling B then did itself (what A never finished). Goal: <= 2 s (dir, server),
  <= lease ttl + 2 s clock skew (gcs: no store can see a dead client there).

Figures also: XLA compiles across the pod (JAX's backend compile wrapped in every worker,
independently of xlacache's counters), compiles avoided, lease wakes and polls, mean
wake latency, requests the pod made to the bucket (per worker per second), the machine
load before and after. Results: a markdown table on stdout, JSON in
bench-results/pod_sim.json.
"""

from __future__ import annotations

import time

_T_START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
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
JOB = "pod-sim"
KILL_TTL = 5.0  # lease ttl in the kill phase (a dead GCS client is replaced after it)
GOALS = {"dir": 1.3, "server": 1.3, "gcs": 1.6}

# Model sizes (benchmarks/jax_gpt.Config fields). "full" is jax_gpt's default.
SIZES = {
    "tiny": dict(layers=2, d_model=64, heads=2, seq=32, batch=2, vocab=128),
    "small": dict(layers=4, d_model=256, heads=4, seq=64, batch=4, vocab=512),
    "full": {},
}


# -- the worker ------------------------------------------------------------------------


def worker_main(args) -> None:
    import functools

    import jax
    from jax._src import compiler

    sys.path.insert(0, str(ROOT))
    import xlacache
    from benchmarks.jax_gpt import Config, loss_fn, make_batch, make_train_step

    record: dict = {"rank": int(os.environ.get("RANK", "0")), "compiles": []}
    inner = compiler.backend_compile_and_load

    def counted(backend, module, *a, **kw):
        from xlacache import jax_bridge

        name = jax_bridge.module_name(module)
        started = time.time()
        if args.hang_on and args.hang_on in name:
            Path(args.hanging).touch()
            time.sleep(READY_SECONDS)  # SIGKILLed here, mid-compile, holding the lease
        try:
            return inner(backend, module, *a, **kw)
        finally:
            record["compiles"].append([name, started, time.time()])

    compiler.backend_compile_and_load = counted
    if args.waiting:

        class Announcing(logging.Handler):  # the first wait on another's compile
            def emit(self, rec):
                if rec.getMessage().startswith("xlacache: waiting for"):
                    Path(args.waiting).touch()

        logging.getLogger("xlacache").addHandler(Announcing())
        logging.getLogger("xlacache").setLevel(logging.DEBUG)
    options = {"remote": args.remote} if args.remote else {}
    xlacache.initialize_cache(args.cache_dir, **options)
    cfg = Config(**SIZES[args.size])
    batch = make_batch(cfg)
    step = make_train_step(cfg)
    evaluate = jax.jit(functools.partial(loss_fn, cfg))
    record["ready"] = time.time()
    if args.ready:
        Path(args.ready).touch()
        deadline = time.monotonic() + READY_SECONDS
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                raise SystemExit("no start signal")
            time.sleep(0.002)
    start = time.time()
    params, opt_state = init_on_device(cfg)
    params, opt_state, loss = step(params, opt_state, batch)
    loss = evaluate(params, batch)
    jax.block_until_ready((params, opt_state, loss))
    record.update(start=start, done=time.time(), loss=float(loss))
    record["first_step_s"] = record["done"] - start
    record["stats"] = xlacache.stats()
    Path(args.result).write_text(json.dumps(record))


def init_on_device(cfg):
    """Parameters and optimizer state made on the device, as a JAX training script makes
    them: a random-normal, ones or zeros program per distinct shape, one for the state."""
    import jax
    import jax.numpy as jnp

    from benchmarks.jax_gpt import init_params

    shapes = init_params(cfg)  # numpy, for the shapes and which are gains
    keys = iter(jax.random.split(jax.random.key(0), 1000))

    def make(path, leaf):
        name = str(path[-1])
        if leaf.ndim >= 2:
            return jax.random.normal(next(keys), leaf.shape, jnp.float32) * 0.02
        return (jnp.ones if "_g" in name else jnp.zeros)(leaf.shape, jnp.float32)

    params = jax.tree_util.tree_map_with_path(make, shapes)
    zeros = jax.jit(lambda p: jax.tree_util.tree_map(jnp.zeros_like, p))
    return params, (jnp.zeros((), jnp.int32), zeros(params), zeros(params))


# -- stores ----------------------------------------------------------------------------


class SharedStore:
    """A fresh shared store: a directory, a server on an empty directory, or a bucket."""

    def __init__(self, kind: str, work: Path, emulator=None) -> None:
        self.kind = kind
        self.work = work
        self.env: dict[str, str] = {}
        self.server = None
        self.proxy = None
        self.url = None
        if kind == "server":
            sys.path.insert(0, str(ROOT / "tests" / "server"))
            from srvutil import start_server

            self.server = start_server(work, store=work / "server-store")
            self.url = self.server.url
        elif kind == "gcs":
            from tests.gcsutil import FaultProxy

            self.proxy = FaultProxy(emulator.url)  # counts the pod's requests
            self.url = f"gs://{emulator.create_bucket()}/cache"
            self.env = {"STORAGE_EMULATOR_HOST": self.proxy.url}

    def local_dir(self, name: str) -> Path:
        """A worker's cache directory: the shared one (dir), else its own."""
        return self.work / ("shared" if self.kind == "dir" else f"local-{name}")

    def requests(self) -> int:
        return len(self.proxy.requests) if self.proxy is not None else 0

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(signal.SIGTERM)
        if self.proxy is not None:
            self.proxy.close()


def load() -> str:
    """The load averages (1, 5, 15 min), as `uptime` shows them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Worker:
    """One worker process (see worker_main)."""

    def __init__(self, args, store: SharedStore, name: str, env: dict, **flags) -> None:
        self.result = store.work / f"result-{name}.json"
        self.flags = {k: str(v) for k, v in flags.items() if v}
        cmd = [
            sys.executable, __file__, "--worker", "--size", args.size,
            "--cache-dir", str(store.local_dir(name)), "--result", str(self.result),
        ]  # fmt: skip
        if store.url:
            cmd += ["--remote", store.url]
        for flag, value in self.flags.items():
            cmd += [f"--{flag.replace('_', '-')}", value]
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)

    def wait_file(self, path: Path) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while not path.exists():
            if self.proc.poll() is not None:
                raise SystemExit(f"worker failed: {self.proc.stderr.read()[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"worker never made {path.name}")
            time.sleep(0.005)

    def finish(self) -> dict:
        _, err = self.proc.communicate(timeout=STEP_SECONDS)
        if self.proc.returncode != 0:
            raise SystemExit(f"worker failed ({self.proc.returncode}): {err[-3000:]}")
        return json.loads(self.result.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def worker_env(store: SharedStore, **extra: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", **store.env)
    env = {k: v for k, v in env.items() if not k.startswith(("XLACACHE_", "XLA_FLAGS", "RANK"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["XLACACHE_JOB"] = JOB
    env.update(extra)
    return env


def run_pod(args, store: SharedStore, names: list[str], ranked: bool) -> dict:
    """Workers `names` on the store, started together; their records and the pod's figures."""
    tag = f"{time.monotonic_ns()}"
    go = store.work / f"go-{tag}"
    load_before = load()
    requests_before = store.requests()
    workers = []
    try:
        for i, name in enumerate(names):
            env = worker_env(store, **({"RANK": str(i)} if ranked else {}))
            ready = store.work / f"ready-{tag}-{i}"
            workers.append(
                (Worker(args, store, name, env, ready=ready, go=go), ready)
            )  # fmt: skip
        for worker, ready in workers:
            worker.wait_file(ready)
        go.touch()
        started = time.time()
        records = [worker.finish() for worker, _ in workers]
    finally:
        for worker, _ in workers:
            worker.kill()
    wall = max(r["done"] for r in records) - started
    stats = [r["stats"] for r in records]
    avoided = sum(s["compiles_avoided"] for s in stats)
    requests = store.requests() - requests_before
    return {
        "workers": len(names),
        "wall_s": wall,
        "first_step_s": [r["first_step_s"] for r in records],
        "compiles": sum(len(r["compiles"]) for r in records),
        "compiles_by_rank": [len(r["compiles"]) for r in records],
        "compiles_avoided": avoided,
        "lease_wakes": sum(s["lease_wakes"] for s in stats),
        "lease_polls": sum(s["lease_polls"] for s in stats),
        "wait_seconds": sum(s["wait_seconds"] for s in stats),
        "mean_wake_s": sum(s["wake_seconds"] for s in stats) / avoided if avoided else 0.0,
        "prefetch_hits": sum(s["prefetch_hits"] for s in stats),
        "bucket_requests": requests,
        "bucket_requests_per_worker_s": requests / len(names) / wall if store.proxy else 0.0,
        "errors": [s["errors"] for s in stats if s["errors"]],
        "losses": sorted({r["loss"] for r in records}),
        "load_before": load_before,
        "load_after": load(),
    }


# -- phases ----------------------------------------------------------------------------


def phase_solo(args, kind: str, work: Path, emulator) -> dict:
    store = SharedStore(kind, work, emulator)
    try:
        cold = run_pod(args, store, ["solo-cold"], ranked=False)
        warm = run_pod(args, store, ["solo-warm"], ranked=False)
    finally:
        store.close()
    return {"cold": cold, "warm": warm,
            "solo_compile_s": cold["first_step_s"][0] - warm["first_step_s"][0]}  # fmt: skip


def phase_pod(args, kind: str, work: Path, emulator) -> dict:
    store = SharedStore(kind, work, emulator)
    names = [f"w{i}" for i in range(args.workers)]
    try:
        cold = run_pod(args, store, names, ranked=True)
        warm = run_pod(args, store, names, ranked=True)
        new = None
        if kind != "dir" and "new" in args.phases:
            # The pod's writer (w0) has a warm local directory; a new worker has none.
            local = run_pod(args, store, ["w0"], ranked=False)
            fresh = run_pod(args, store, [f"new-{time.monotonic_ns()}"], ranked=False)
            new = {"local_warm": local, "new_worker": fresh,
                   "ratio": fresh["first_step_s"][0] / local["first_step_s"][0]}  # fmt: skip
    finally:
        store.close()
    return {"cold": cold, "warm": warm, "new": new, "pod_extra_s": cold["wall_s"] - warm["wall_s"]}


def phase_kill(args, kind: str, work: Path, emulator) -> dict:
    store = SharedStore(kind, work, emulator)
    env = worker_env(store, XLACACHE_ROLE="writer", XLACACHE_LEASE_TTL=str(KILL_TTL))
    hanging, waiting = work / "hanging", work / "waiting"
    a = b = None
    try:
        a = Worker(args, store, "a", env, hang_on="train_step", hanging=hanging)
        a.wait_file(hanging)  # A holds the step's lease and "compiles" for ever
        b = Worker(args, store, "b", env, waiting=waiting)
        b.wait_file(waiting)  # B waits on A
        time.sleep(1.0)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        killed = time.time()
        record = b.finish()
    finally:
        for worker in (a, b):
            if worker is not None:
                worker.kill()
        store.close()
    after = [c for c in record["compiles"] if c[1] >= killed - 0.05]
    compiling = sum(end - start for _, start, end in after)
    ready = record["done"] - killed
    return {
        "ready_after_kill_s": ready,
        "compiles_after_kill": len(after),
        "compile_after_kill_s": compiling,
        "overhead_s": ready - compiling,
        "leases_taken_over": record["stats"]["leases_taken_over"],
        "ttl_s": KILL_TTL,
        "load": load(),
    }


PHASES = {"solo": phase_solo, "pod": phase_pod, "kill": phase_kill}


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
                for phase in (p for p in ("solo", "pod", "kill") if p in args.phases or
                              (p == "pod" and "new" in args.phases)):  # fmt: skip
                    path = work / f"{kind}-{rep}-{phase}"
                    path.mkdir(parents=True)
                    run = PHASES[phase](args, kind, path, emulator)
                    results["runs"].append({"rep": rep, "backend": kind, "phase": phase, **run})
                    print(f"[rep {rep}] {kind:6s} {phase:5s} {_brief(run)}", file=sys.stderr)
    finally:
        if emulator is not None:
            emulator.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def _brief(run: dict) -> dict:
    keys = ("solo_compile_s", "pod_extra_s", "overhead_s", "ready_after_kill_s")
    brief = {k: round(run[k], 2) for k in keys if k in run}
    for name in ("cold", "warm"):
        if name in run:
            brief[f"{name}_wall_s"] = round(run[name]["wall_s"], 2)
    if run.get("new"):
        brief["new_ratio"] = round(run["new"]["ratio"], 3)
    return brief


def summarize(results: dict) -> list[str]:
    n = results["workers"]
    lines = [
        f"Pod of {n} workers, model {results['size']} ({results['model']}); medians over "
        "repetitions.",
        "",
        "| store | solo compile s | cold pod wall s | warm pod wall s | extra s | extra / solo "
        "compile (goal) | XLA compiles cold (rank 0 / others) | wakes / polls | mean wake s "
        "| bucket req per worker s | load (1 min) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    kill_lines, new_lines = [], []
    for kind in dict.fromkeys(r["backend"] for r in results["runs"]):
        runs = [r for r in results["runs"] if r["backend"] == kind]

        def med(phase, fn, runs=runs):
            values = [fn(r) for r in runs if r["phase"] == phase and fn(r) is not None]
            return statistics.median(values) if values else float("nan")

        solo = med("solo", lambda r: r["solo_compile_s"])
        pods = [r for r in runs if r["phase"] == "pod"]
        if pods:
            extra = med("pod", lambda r: r["pod_extra_s"])
            last = pods[-1]["cold"]
            by_rank = last["compiles_by_rank"]
            lines.append(
                f"| {kind} | {solo:.2f} | {med('pod', lambda r: r['cold']['wall_s']):.2f} | "
                f"{med('pod', lambda r: r['warm']['wall_s']):.2f} | {extra:.2f} | "
                f"{extra / solo:.2f} (<= {GOALS[kind]}) | {last['compiles']} ({by_rank[0]} / "
                f"{sum(by_rank[1:])}) | {last['lease_wakes']} / {last['lease_polls']} | "
                f"{last['mean_wake_s']:.3f} | {last['bucket_requests_per_worker_s']:.1f} | "
                f"{last['load_before']} -> {last['load_after']} |"
            )
        news = [r["new"] for r in pods if r.get("new")]
        if news:
            local = statistics.median(x["local_warm"]["first_step_s"][0] for x in news)
            fresh = statistics.median(x["new_worker"]["first_step_s"][0] for x in news)
            new_lines.append(
                f"| {kind} | {local:.2f} | {fresh:.2f} | "
                f"{statistics.median(x['ratio'] for x in news):.3f} (<= 1.05) | "
                f"{news[-1]['new_worker']['prefetch_hits']} |"
            )
        kills = [r for r in runs if r["phase"] == "kill"]
        if kills:
            goal = "2" if kind != "gcs" else f"{KILL_TTL + 2:.0f} (ttl + skew)"
            kill_lines.append(
                f"| {kind} | {med('kill', lambda r: r['ready_after_kill_s']):.2f} | "
                f"{med('kill', lambda r: r['compile_after_kill_s']):.2f} | "
                f"{med('kill', lambda r: r['overhead_s']):.2f} (<= {goal}) | "
                f"{kills[-1]['leases_taken_over']} | {kills[-1]['load']} |"
            )
    if new_lines:
        lines += ["", "| store | local-warm worker first step s | new worker (empty directory) "
                  "first step s | ratio (goal) | its prefetch hits |", "|---|---|---|---|---|",
                  *new_lines]  # fmt: skip
    if kill_lines:
        lines += ["", "| store | waiter ready after kill s | its own compiles after kill s | "
                  "overhead s (goal) | takeovers | load |", "|---|---|---|---|---|---|",
                  *kill_lines]  # fmt: skip
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--backends", nargs="+", default=["dir", "server", "gcs"],
                   choices=["dir", "server", "gcs"])  # fmt: skip
    p.add_argument("--phases", nargs="+", default=["solo", "pod", "new", "kill"],
                   choices=["solo", "pod", "new", "kill"])  # fmt: skip
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default=str(RESULTS / "pod_sim.json"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--cache-dir", "--remote", "--result", "--ready", "--go", "--hang-on",
                   "--hanging", "--waiting"):  # fmt: skip
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
