"""Pods of real JAX worker processes for the single-flight and role tests.

`WORKER` runs a small training-style program through xlacache and prints one JSON line:
the programs XLA compiled in it (counted by wrapping JAX's backend compile, not by
xlacache's own figures), xlacache.stats(), the loss and the cache's warnings. Its
settings (argv[1], JSON): path, options (initialize_cache keywords), ready and go
(files: say it is ready, wait for the start), hang_on/hanging (hang forever, saying so
in that file, when compiling a program whose name contains hang_on), waiting (a file
made when it first waits on another worker's compile), variant (another step program),
compile_seconds (each compile takes that much longer: workers started at once then overlap
in their compiles even on a loaded machine, as they do where compiles take minutes).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import child_env
from tests.waiting import wait_for

WORKER = r"""
import json, os, sys, time, warnings
settings = json.loads(sys.argv[1])
warnings.simplefilter("always")
import jax, jax.numpy as jnp
from jax._src import compiler
import xlacache
from xlacache import jax_bridge

compiles = []
backend_compile = compiler.backend_compile_and_load

def counted(backend, module, *args, **kw):
    name = jax_bridge.module_name(module)
    compiles.append([name, time.time()])
    if settings.get("hang_on") and settings["hang_on"] in name:
        open(settings["hanging"], "w").close()
        time.sleep(600)  # killed here: mid-compile, holding the lease
    time.sleep(settings.get("compile_seconds", 0))  # a slow compiler, as on an accelerator
    return backend_compile(backend, module, *args, **kw)

compiler.backend_compile_and_load = counted

if settings.get("waiting"):
    import logging
    class Announcing(logging.Handler):  # the waiter's first wait leaves a file behind
        def emit(self, record):
            if record.getMessage().startswith("xlacache: waiting for"):
                open(settings["waiting"], "a").close()
    logging.getLogger("xlacache").addHandler(Announcing())
    logging.getLogger("xlacache").setLevel(logging.DEBUG)

with warnings.catch_warnings(record=True) as caught:
    xlacache.initialize_cache(settings["path"], **settings.get("options", {}))
    if settings.get("ready"):
        open(settings["ready"], "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(settings["go"]) and time.monotonic() < deadline:
            time.sleep(0.01)
    rate = 0.1 * (1 + settings.get("variant", 0))

    def step(w, x):
        def loss(w):
            return jnp.mean(jnp.tanh(x @ w) ** 2)
        l, g = jax.value_and_grad(loss)(w)
        return w - rate * g, l

    w = jnp.full((32, 32), 0.01, jnp.float32)
    x = jnp.ones((8, 32), jnp.float32)
    w, l = jax.jit(step)(w, x)
    result = float(l)
cache_warnings = [str(w.message) for w in caught if "xlacache" in str(w.message)]
print(json.dumps({"compiles": compiles, "stats": xlacache.stats(), "loss": result,
                  "warnings": cache_warnings}))
"""


RANK_VARIABLES = ("RANK", "TPU_WORKER_ID", "CLOUD_TPU_TASK_ID")


def start_worker(settings: dict, env: dict | None = None) -> subprocess.Popen:
    """A worker; no rank variable reaches it unless `env` names one."""
    full_env = {k: v for k, v in child_env().items() if k not in RANK_VARIABLES}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(settings)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )


def result_of(proc: subprocess.Popen, timeout: float = 240) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def run_worker(settings: dict, env: dict | None = None) -> dict:
    return result_of(start_worker(settings, env))


def run_pod(workers: list[tuple[dict, dict | None]], tmp_path: Path) -> list[dict]:
    """Start every worker, let each get ready (JAX imported, cache open), then start them
    all at once; their results in order."""
    go = tmp_path / f"go-{time.monotonic_ns()}"
    procs = []
    try:
        for i, (settings, env) in enumerate(workers):
            ready = tmp_path / f"ready-{go.name}-{i}"
            procs.append((start_worker({**settings, "ready": str(ready), "go": str(go)}, env),
                          ready))  # fmt: skip
        wait_for(lambda: all(ready.exists() for _, ready in procs), 180,
                 "the workers to get ready", procs=[proc for proc, _ in procs])  # fmt: skip
        go.touch()
        return [result_of(proc) for proc, _ in procs]
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def compile_count(result: dict) -> int:
    return len(result["compiles"])
