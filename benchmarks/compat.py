"""The JAX compatibility matrix: the project installed as a user would, beside each JAX.

For each version, in a throwaway virtual environment under /tmp built from the package
registry: ``pip install <the project's wheel> jax==X jaxlib==X`` (pip resolves the declared
requirements, so a range that excludes X fails here; torch is an extra and is not
installed), ``pip check``, the JAX-side tests (run from a copy of ``tests/`` outside the
repository, so the installed package is what they import), and a JAX train step in two
fresh processes sharing a cache directory: cold (compiles) then warm (must compile
nothing and give bit-identical results). Prints a Markdown table (docs/compat.md keeps it)::

    .venv/bin/python benchmarks/compat.py                      # every supported version
    .venv/bin/python benchmarks/compat.py --versions 0.6.2 0.10.2 --table out.md

Exits non-zero when any version fails. Each venv downloads ~600 MB (pip's cache helps on
a second run); ``--keep`` leaves the venvs for inspection.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2")
TESTS = (
    "test_jax_internals.py",
    "test_jax_cache.py",
    "test_key.py",
    "test_load_rejected.py",
    "server/test_jax_remote.py",  # JAX programs through a real `xlacache serve`
)
# every helper module of tests/ and tests/server/ (what the tests import), and one test
# module the JAX-side tests import from
HELPERS = (
    *sorted(
        str(p.relative_to(ROOT / "tests"))
        for folder in ("", "server")
        for p in (ROOT / "tests" / folder).glob("*.py")
        if not p.name.startswith("test_")
    ),
    "test_local_store.py",
)
STEP_TIMEOUT = 900

# A small MLP trained for three steps: every loss and the final weights, exactly.
TRAIN_STEP = """
import hashlib, json, sys
import numpy as np
import jax, jax.numpy as jnp
import xlacache

xlacache.initialize_cache(sys.argv[1])

def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)

@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads), loss

rng = np.random.default_rng(0)
params = {
    "w1": jnp.asarray(rng.standard_normal((64, 128), dtype=np.float32) * 0.1),
    "b1": jnp.zeros((128,), jnp.float32),
    "w2": jnp.asarray(rng.standard_normal((128, 8), dtype=np.float32) * 0.1),
}
x = jnp.asarray(rng.standard_normal((32, 64), dtype=np.float32))
y = jnp.asarray(rng.standard_normal((32, 8), dtype=np.float32))
losses = []
for _ in range(3):
    params, loss = train_step(params, x, y)
    losses.append(float(loss).hex())
digest = hashlib.sha256()
for name in sorted(params):
    digest.update(np.asarray(params[name]).tobytes())
stats = xlacache.stats()
print(json.dumps({
    "jax": jax.__version__, "misses": stats["misses"], "hits": stats["hits"],
    "errors": stats["errors"], "losses": losses, "params": digest.hexdigest(),
}))
"""


@dataclass
class Row:
    version: str
    resolved: str = "-"
    tests: str = "-"
    cli: str = "-"
    cold: str = "-"
    warm: str = "-"
    equal: str = "-"
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def markdown(self) -> str:
        cells = [self.version, self.resolved, self.tests, self.cli, self.cold, self.warm]
        cells.append(self.equal)
        cells += [f"{self.seconds:.0f}", "ok" if self.ok else "; ".join(self.problems)]
        return "| " + " | ".join(cells) + " |"


HEADER = (
    "| jax, jaxlib | pip resolves | JAX-side tests | CLI | cold compiles | warm compiles "
    "| equal results | seconds | status |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def run(cmd: list[str], cwd: Path | None = None, timeout: float = STEP_TIMEOUT) -> str:
    """Run `cmd`; its output, or CalledProcessError/TimeoutExpired."""
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
    return done.stdout


def build_wheel(into: Path) -> Path:
    """The project's wheel, as a user gets it from the registry."""
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), str(ROOT)])
    return next(into.glob("xlacache-*.whl"))


def test_copy(into: Path) -> Path:
    """The JAX-side tests and their helpers, outside the repository."""
    for name in TESTS + HELPERS:
        (into / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tests" / name, into / "tests" / name)
    (into / "pytest.ini").write_text("[pytest]\ntimeout = 600\naddopts = -ra\n")
    return into


def check_version(version: str, wheel: Path, work: Path, keep: bool) -> Row:
    row = Row(version)
    start = time.perf_counter()
    venv = Path(tempfile.gettempdir()) / f"xlacache-compat-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    py = str(venv / "bin" / "python")
    try:
        run([sys.executable, "-m", "venv", str(venv)])
        run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        try:
            run([py, "-m", "pip", "install", "-q", str(wheel), f"jax=={version}",
                 f"jaxlib=={version}", "pytest", "pytest-timeout"])  # fmt: skip
            run([py, "-m", "pip", "check"])
        except subprocess.CalledProcessError as exc:
            row.resolved = "no"
            row.problems.append("pip: " + (exc.stderr or exc.stdout).strip().splitlines()[-1])
            return row
        row.resolved = "yes"
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            row.problems.append("torch was installed")
        tests = test_copy(work / version)
        done = subprocess.run(
            [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[f"tests/{t}" for t in TESTS]],
            cwd=tests, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False,
        )  # fmt: skip
        summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
        row.tests = summary.split(" in ")[0]
        if done.returncode != 0:
            row.problems.append("tests failed")
            print(done.stdout[-4000:], done.stderr[-2000:], file=sys.stderr)
        cache = work / version / "cache"
        cold = json.loads(run([py, "-c", TRAIN_STEP, str(cache)]).strip().splitlines()[-1])
        warm = json.loads(run([py, "-c", TRAIN_STEP, str(cache)]).strip().splitlines()[-1])
        row.cold, row.warm = str(cold["misses"]), str(warm["misses"])
        same = (cold["losses"], cold["params"]) == (warm["losses"], warm["params"])
        row.equal = "yes" if same else "no"
        if cold["jax"] != version:
            row.problems.append(f"imported jax {cold['jax']}")
        if cold["misses"] < 1 or warm["misses"] != 0 or warm["hits"] != cold["misses"]:
            row.problems.append("warm process compiled")
        if not same:
            row.problems.append("results differ")
        if cold["errors"] or warm["errors"]:
            row.problems.append(f"cache errors {cold['errors']} {warm['errors']}")
        cli = str(venv / "bin" / "xlacache")
        entries = json.loads(run([cli, "stats", str(cache), "--json"]))["entries"]
        run([cli, "verify", str(cache)])
        row.cli = f"stats, verify: {entries} entries"
    except subprocess.TimeoutExpired as exc:
        row.problems.append(f"timed out: {' '.join(map(str, exc.cmd))[:80]}")
    except subprocess.CalledProcessError as exc:
        row.problems.append(f"failed: {(exc.stderr or '').strip()[-200:]}")
    finally:
        row.seconds = time.perf_counter() - start
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS))
    parser.add_argument("--table", type=Path, help="also write the table to this file")
    parser.add_argument("--keep", action="store_true", help="keep the venvs under /tmp")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="xlacache-compat-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work / "wheel")
        print(HEADER, flush=True)
        for version in args.versions:
            rows.append(check_version(version, wheel, work, args.keep))
            print(rows[-1].markdown(), flush=True)
    table = HEADER + "\n" + "\n".join(r.markdown() for r in rows) + "\n"
    if args.table:
        args.table.write_text(table)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
