"""The JAX compatibility matrix: the project installed as a user would, beside each JAX.

For each version, in a throwaway virtual environment under /tmp built from the package
registry: ``pip install <the project's wheel> jax==X jaxlib==X`` (pip resolves the declared
requirements, so a range that excludes X fails here; torch is an extra and is not
installed), ``pip check``, the JAX-side tests (run from a copy of ``tests/`` outside the
repository, so the installed package is what they import), and a JAX train step in two
fresh processes sharing a cache directory: cold (compiles) then warm (must compile
nothing and give bit-identical results). Then upgrades on a warm cache, default settings:
for each adjacent pair of the versions and the oldest -> newest, the newer JAX runs the
step on a copy of the older one's warm cache and must run (a foreign executable must never
reach its loader) and equal its own cold run. Prints Markdown tables (docs/compat.md keeps
them) and progress lines on stderr::

    .venv/bin/python benchmarks/compat.py                      # every supported version
    .venv/bin/python benchmarks/compat.py --versions 0.6.2 0.10.2 --table out.md

``--upgrade`` also measures `xlacache rewarm` (`compat_upgrade.py`): for each pair, a cache
warmed by the JAX GPT and a Flax NNX + optax LM under the older JAX, rewarmed and trained
under the newer; ``--lazy 0.10.1:0.10.2`` does the same for the PyTorch lazy GPT.

Exits non-zero when any version or upgrade fails. Each venv downloads ~600 MB (pip's cache
helps on a second run); ``--keep`` leaves the venvs for inspection.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

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
# the fake-gcs-server binary, as the project's dev extra pins it
EMULATOR = next(
    d.strip()
    for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["dev"]
    if d.startswith("fake-gcs-server")
)
_START = time.monotonic()

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


def say(message: str) -> None:
    """A progress line on stderr: `make compat` is minutes per version."""
    print(f"compat [{time.monotonic() - _START:5.0f} s] {message}", file=sys.stderr, flush=True)


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
    cold_result: dict | None = None  # the cold train step's output (upgrades compare with it)

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


@dataclass
class UpgradeRow:
    """The newer JAX on a copy of the older one's warm cache, default settings."""

    old: str
    new: str
    ran: str = "-"
    compiles: str = "-"
    equal: str = "-"
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def markdown(self) -> str:
        cells = [f"{self.old} -> {self.new}", self.ran, self.compiles, self.equal]
        return "| " + " | ".join([*cells, "ok" if self.ok else "; ".join(self.problems)]) + " |"


UPGRADE_HEADER = (
    "| upgrade, warm cache, default settings | newer process ran | its compiles "
    "| equal to its cold run | status |\n| --- | --- | --- | --- | --- |"
)


def run(cmd: list[str], cwd: Path | None = None, timeout: float = STEP_TIMEOUT) -> str:
    """Run `cmd`; its output, or CalledProcessError/TimeoutExpired."""
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
    return done.stdout


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


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


def venv_path(version: str) -> Path:
    return Path(tempfile.gettempdir()) / f"xlacache-compat-{version}"


def python(version: str) -> str:
    return str(venv_path(version) / "bin" / "python")


def make_venv(version: str, wheel: Path, say: Callable[[str], None] = say) -> None:
    """A fresh venv with the wheel, jax==version, jaxlib==version and pytest (`say` tells
    the progress: the caller's, whose clock started with the run)."""
    venv = venv_path(version)
    shutil.rmtree(venv, ignore_errors=True)
    say(f"{version}: creating a venv in {venv}")
    run([sys.executable, "-m", "venv", str(venv)])
    run([python(version), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    say(f"{version}: pip install xlacache[gcs] jax=={version} jaxlib=={version} (about a minute)")
    # [gcs] and the emulator: test_load_rejected replaces a rejected entry in a bucket too
    run([python(version), "-m", "pip", "install", "-q", f"{wheel}[gcs]", f"jax=={version}",
         f"jaxlib=={version}", "pytest", "pytest-timeout", EMULATOR])  # fmt: skip
    run([python(version), "-m", "pip", "check"])


def check_version(version: str, wheel: Path, work: Path) -> Row:
    row = Row(version)
    start = time.perf_counter()
    py = python(version)
    try:
        try:
            make_venv(version, wheel)
        except subprocess.CalledProcessError as exc:
            row.resolved = "no"
            row.problems.append("pip: " + (exc.stderr or exc.stdout).strip().splitlines()[-1])
            return row
        row.resolved = "yes"
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            row.problems.append("torch was installed")
        tests = test_copy(work / version)
        say(f"{version}: the JAX-side tests (a few minutes)")
        done = subprocess.run(
            [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[f"tests/{t}" for t in TESTS]],
            cwd=tests, capture_output=True, text=True, timeout=STEP_TIMEOUT, check=False,
        )  # fmt: skip
        summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
        row.tests = summary.split(" in ")[0]
        if done.returncode != 0:
            row.problems.append("tests failed")
            print(done.stdout[-4000:], done.stderr[-2000:], file=sys.stderr)
        say(f"{version}: {row.tests}; the train step, cold then warm")
        cache = work / version / "cache"
        cold = last_json(run([py, "-c", TRAIN_STEP, str(cache)]))
        warm = last_json(run([py, "-c", TRAIN_STEP, str(cache)]))
        row.cold_result = cold
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
        cli = str(venv_path(version) / "bin" / "xlacache")
        entries = json.loads(run([cli, "stats", str(cache), "--json"]))["entries"]
        run([cli, "verify", str(cache)])
        row.cli = f"stats, verify: {entries} entries"
    except subprocess.TimeoutExpired as exc:
        row.problems.append(f"timed out: {' '.join(map(str, exc.cmd))[:80]}")
    except subprocess.CalledProcessError as exc:
        row.problems.append(f"failed: {(exc.stderr or '').strip()[-200:]}")
    finally:
        row.seconds = time.perf_counter() - start
        say(f"{version}: done in {row.seconds:.0f} s: {'ok' if row.ok else row.problems}")
    return row


def pairs(versions: list[str]) -> list[tuple[str, str]]:
    """Each adjacent pair, then the oldest -> newest (CI's)."""
    found = list(zip(versions[:-1], versions[1:], strict=True))
    if len(versions) > 2:
        found.append((versions[0], versions[-1]))
    return found


def check_upgrade(old: Row, new: Row, work: Path) -> UpgradeRow:
    """The newer JAX's train step on a copy of the older one's warm cache (its entries are
    of another jaxlib: prefetch must not hand them to XLA), default settings."""
    row = UpgradeRow(old.version, new.version)
    if not (old.ok and new.ok) or new.cold_result is None:
        row.problems.append("a version failed its own checks")
        return row
    say(f"{old.version} -> {new.version}: the newer JAX on the older one's warm cache")
    cache = work / "upgrades" / f"{old.version}-{new.version}"
    shutil.copytree(work / old.version / "cache", cache)
    try:
        got = last_json(run([python(new.version), "-c", TRAIN_STEP, str(cache)]))
    except subprocess.CalledProcessError as exc:
        row.ran = f"no (exit {exc.returncode})"
        row.problems.append(f"the newer process failed: {(exc.stderr or '').strip()[-200:]}")
        return row
    except subprocess.TimeoutExpired:
        row.ran = "no (timed out)"
        row.problems.append("the newer process timed out")
        return row
    row.ran = "yes"
    row.compiles = str(got["misses"])
    cold = new.cold_result
    same = (got["losses"], got["params"]) == (cold["losses"], cold["params"])
    row.equal = "yes" if same else "no"
    if not same:
        row.problems.append("results differ from a cold run")
    if got["errors"]:
        row.problems.append(f"cache errors {got['errors']}")
    return row


def matrix_parser(doc: str, versions: Sequence[str]) -> argparse.ArgumentParser:
    """The options every version matrix takes: ``--versions``, ``--table``, ``--keep``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(versions))
    parser.add_argument("--table", type=Path, help="also write the table(s) to this file")
    parser.add_argument("--keep", action="store_true", help="keep the venvs under /tmp")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = matrix_parser(__doc__, VERSIONS)
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="also measure xlacache rewarm for each pair (compat_upgrade.py)",
    )
    parser.add_argument("--lazy", metavar="OLD:NEW",
                        help="also the PyTorch lazy GPT from OLD to NEW (jax >= 0.10)")  # fmt: skip
    args = parser.parse_args(argv)
    rows: list[Row] = []
    upgrades: list[UpgradeRow] = []
    extra: list[str] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="xlacache-compat-") as tmp:
        work = Path(tmp)
        say("building the project's wheel")
        wheel = build_wheel(work / "wheel")
        try:
            print(HEADER, flush=True)
            for version in args.versions:
                rows.append(check_version(version, wheel, work))
                print(rows[-1].markdown(), flush=True)
            by_version = {r.version: r for r in rows}
            print("\n" + UPGRADE_HEADER, flush=True)
            for old, new in pairs(args.versions):
                upgrades.append(check_upgrade(by_version[old], by_version[new], work))
                print(upgrades[-1].markdown(), flush=True)
            if args.upgrade or args.lazy:
                import compat_upgrade  # beside this file

                tables, fine = compat_upgrade.measure(
                    pairs(args.versions) if args.upgrade else [], args.lazy, wheel, work, say
                )
                extra += tables
                ok = ok and fine
        finally:
            if not args.keep:
                for version in {*args.versions, *(args.lazy or "").split(":")} - {""}:
                    shutil.rmtree(venv_path(version), ignore_errors=True)
    table = HEADER + "\n" + "\n".join(r.markdown() for r in rows) + "\n"
    table += "\n" + UPGRADE_HEADER + "\n" + "\n".join(u.markdown() for u in upgrades) + "\n"
    table += "".join("\n" + t for t in extra)
    if args.table:
        args.table.write_text(table)
    ok = ok and all(r.ok for r in rows) and all(u.ok for u in upgrades)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
