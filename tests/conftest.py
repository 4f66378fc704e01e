"""Shared fixtures: a clean xlacache state per test, entries, and child Python processes."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xlacache import api, counters, entry

REPO = Path(__file__).resolve().parents[1]

# The suite runs in strict mode (this process and the Python processes it starts): a
# fallback that would hide an exception raises StrictModeError instead. A test that
# exercises a fallback on purpose says so with @pytest.mark.fallback (strict mode off).
os.environ.setdefault("XLACACHE_STRICT", "1")

# The suite compiles for compile speed (this process and every Python process it starts):
# XLA:CPU's loop emitter with LLVM at -O0 compiles the tests' small programs about 3x faster
# than its default (MLIR fusion emitters, -O2), and no test checks code speed. These are
# codegen flags like any, in every key the suite computes; a test that sets XLA_FLAGS for a
# child keeps them with `xla_flags`. Users, benchmarks and docs keep XLA's defaults.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
os.environ.setdefault("XLA_FLAGS", SUITE_XLA_FLAGS)


def xla_flags(*flags: str) -> str:
    """XLA_FLAGS for a child: the suite's flags and `flags`."""
    return " ".join([os.environ["XLA_FLAGS"], *flags])


def pytest_collection_modifyitems(config, items):
    """The tests marked slow run first: with several workers (make test) the long ones start
    early and the short ones fill the end, so no worker is left alone with a long tail."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """One fake-gcs-server (in memory, loopback) for the whole test session."""
    from tests.gcsutil import Emulator

    emulator = Emulator.start(tmp_path_factory.mktemp("gcs-emulator"))
    yield emulator
    emulator.stop()


@pytest.fixture
def gcs(gcs_emulator, monkeypatch):
    """A fresh bucket behind a fault-injecting proxy; STORAGE_EMULATOR_HOST names the proxy."""
    from tests.gcsutil import FaultProxy, GCSEnv

    proxy = FaultProxy(gcs_emulator.url)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    yield GCSEnv(gcs_emulator, proxy, gcs_emulator.create_bucket())
    proxy.close()


@pytest.fixture(autouse=True)
def clean_xlacache_state(request, monkeypatch):
    """Each test starts with no initialized cache and zeroed figures; a test marked
    `fallback` runs without strict mode, any other fails if a background thread hid an
    exception (`counters.take_deferred`)."""
    fallback = request.node.get_closest_marker("fallback") is not None
    if fallback:
        monkeypatch.setenv("XLACACHE_STRICT", "0")
    api._reset_for_tests()
    counters.reset()
    counters.take_deferred()
    yield
    api._reset_for_tests()
    counters.reset()
    deferred = counters.take_deferred()
    if deferred and not fallback:
        pytest.fail(f"strict mode: a background thread hid {deferred[0]!r}", pytrace=False)


def make_key(name: int | str) -> str:
    """A valid cache key: an int as 64 hex digits, a string by its SHA-256."""
    if isinstance(name, int):
        return f"{name:064x}"
    return hashlib.sha256(name.encode()).hexdigest()


def make_blob(n: int = 1, payload: bytes | None = None, **header) -> tuple[str, bytes]:
    """A valid encoded entry under make_key(n)."""
    key = make_key(n)
    payload = payload if payload is not None else os.urandom(64) * 100 + bytes([n % 256])
    header.setdefault("compile_seconds", 1.5)
    header.setdefault("label", f"jit_test_{n}")
    return key, entry.encode(key, payload, **header)


def forge_header(blob: bytes, drop: tuple[str, ...] = (), **fields) -> bytes:
    """`blob` with header fields replaced (or dropped) and every checksum made to match."""
    size = entry.header_length(blob[: entry.PRELUDE_SIZE])
    header = json.loads(blob[entry.PRELUDE_SIZE : size])
    header.update(fields)
    for name in drop:
        del header[name]
    data = json.dumps(header, sort_keys=True).encode()
    version = header.get("format_version")  # a readable one says so in the prelude too
    version = version if version in entry.READABLE_FORMATS else entry.FORMAT_VERSION
    prelude = struct.pack(">4sHI32s", entry.MAGIC, version, len(data),
                          hashlib.sha256(data).digest())  # fmt: skip
    return prelude + data + blob[size:]


def run_python(
    code: str,
    *args: str,
    env: dict | None = None,
    timeout: float = 300,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (optionally under a command prefix such as unshare)."""
    cmd = [*(prefix or []), sys.executable, "-c", textwrap.dedent(code), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=child_env(env), timeout=timeout)


def child_env(env: dict | None = None) -> dict:
    """This environment without xlacache/XLA settings (strict mode and the suite's XLA_FLAGS
    kept), plus `env`."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("XLACACHE_", "XLA_"))}
    full_env["XLACACHE_STRICT"] = os.environ.get("XLACACHE_STRICT", "1")
    full_env["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    full_env.update(env or {})
    return full_env


def run_json(code: str, *args: str, **kw) -> dict:
    """Run `code`, which prints one JSON object on its last stdout line, and parse it."""
    proc = run_python(code, *args, **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_module_json(module: str, *args: str, env: dict | None = None, timeout: float = 300) -> dict:
    """Run ``python -m module args`` from the repository in a clean environment (`child_env`,
    plus `env`); it prints one JSON object on its last stdout line, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=child_env({"PYTHONPATH": str(REPO), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# A small JAX training-style program used by the end-to-end tests. It prints a JSON
# line with xlacache.stats(), the result, and the warnings the cache raised.
JAX_PROGRAM = """
import json, sys, warnings
warnings.simplefilter("always")
import jax, jax.numpy as jnp
import xlacache

def step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(x @ w) ** 2)
    l, g = jax.value_and_grad(loss)(w)
    return w - 0.1 * g, l

with warnings.catch_warnings(record=True) as caught:
    xlacache.initialize_cache(sys.argv[1], **json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}"))
    w = jnp.full((32, 32), 0.01, jnp.float32)
    x = jnp.ones((8, 32), jnp.float32)
    w, l = jax.jit(step)(w, x)
    result = float(l)
cache_warnings = [str(w.message) for w in caught if "xlacache" in str(w.message)]
print(json.dumps({"stats": xlacache.stats(), "loss": result, "warnings": cache_warnings}))
"""
