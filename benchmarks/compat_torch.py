"""The torch compatibility matrix: the lazy runtime and the Dynamo backend beside each torch.

For each version, in a throwaway virtual environment under /tmp built from the package
registry: ``pip install <the project's wheel> torch==X`` and the test tools (pip resolves the
declared range, so a release outside ``[torch]``'s fails here), ``pip check``, the lazy and
Dynamo test modules (run from a copy of ``tests/`` outside the repository, so the installed
package is what they import), and a small GPT trained three steps in two fresh processes
sharing a cache directory, lazily and through ``torch.compile(backend="xlacache")``: cold
(compiles) then warm (must compile nothing and give bit-identical losses). Prints a
Markdown table (docs/compat.md keeps it)::

    .venv/bin/python benchmarks/compat_torch.py                       # every tested release
    .venv/bin/python benchmarks/compat_torch.py --versions 2.9.1 2.14.1 --table out.md

Exits non-zero when any version fails. PyPI's Linux wheels are CUDA builds (they run on a
CPU): about 4.6 GB per venv, removed after its row unless ``--keep``. The JAX matrix is
``benchmarks/compat.py``, whose helpers this reuses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compat import ROOT, STEP_TIMEOUT, build_wheel, matrix_parser, run  # noqa: E402

VERSIONS = ("2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1")
TESTS = (
    "lazy/test_torch_internals.py",
    "lazy/test_precision.py",
    "lazy/test_runtime.py",
    "lazy/test_parity.py",
    "lazy/test_dynamo.py",
    "lazy/test_dynamo_layouts.py",
    "lazy/test_dynamo_draws.py",
    "lazy/test_device_checks.py",
    "lazy/test_draw_checks.py",
    "lazy/test_inference_mode.py",
    "lazy/test_antialias.py",
    "lazy/test_control_flow.py",
    "lazy/test_embedding_bag.py",
    "lazy/test_grid_sample.py",
    "lazy/test_grouped_mm.py",
    "lazy/test_histc.py",
    "lazy/test_masks.py",
    "lazy/test_packed.py",
    "lazy/test_norms.py",
    "test_torch_untouched.py",
)
# what the test modules import: tests/ and tests/lazy/ helpers (every non-test module)
HELPERS = tuple(
    sorted(
        str(p.relative_to(ROOT / "tests"))
        for folder in ("", "lazy")
        for p in (ROOT / "tests" / folder).glob("*.py")
        if not p.name.startswith("test_")
    )
)
TOOLS = ("pytest", "pytest-timeout", "pytest-xdist", "expecttest", "hypothesis")
# the tiny Hugging Face models of test_dynamo: transformers without its torch pin (as the
# Makefile installs it), and its pure-Python requirements
TRANSFORMERS = "transformers==5.23.0"
TRANSFORMERS_DEPS = ("safetensors", "huggingface_hub", "tokenizers", "regex", "tqdm", "pyyaml")

# A small GPT, three AdamW steps, lazily (argv[2] == "lazy") or compiled: losses and how many
# programs this process compiled (lazy graphs, compiled Dynamo graphs).
TRAIN = """
import json, sys
import torch
import xlacache
import xlacache.lazy as xl
from tests.lazy.models import GPT

xlacache.initialize_cache(sys.argv[1], min_compile_seconds=0)
torch.manual_seed(0)
dev = xl.device()
model = GPT(vocab=64, d=32, heads=4, layers=2, seq=16).to(dev)
step = model if sys.argv[2] == "lazy" else torch.compile(model, backend="xlacache")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
losses = []
for _ in range(3):
    x = torch.randint(0, 64, (4, 16), generator=g).to(dev)
    logits = step(x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), x.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    xl.sync()
    losses.append(loss.item().hex())
m = xl.metrics
compiled = (m.counter_value("UncachedCompile") or 0)
if sys.argv[2] != "lazy":
    import xlacache.lazy.dynamo as xc
    compiled += xc.report()["CompiledGraphCompile"]
print(json.dumps({"torch": torch.__version__, "losses": losses, "compiled": compiled}))
"""


@dataclass
class Row:
    version: str
    resolved: str = "-"
    tests: str = "-"
    lazy: str = "-"
    compiled: str = "-"
    seconds: float = 0.0
    phases: list[float] = field(default_factory=list)  # install, tests, train
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def markdown(self) -> str:
        cells = [self.version, self.resolved, self.tests, self.lazy, self.compiled]
        seconds = f"{self.seconds:.0f} ({' + '.join(f'{s:.0f}' for s in self.phases)})"
        cells += [seconds, "ok" if self.ok else "; ".join(self.problems)]
        return "| " + " | ".join(cells) + " |"


HEADER = (
    "| torch | pip resolves | lazy and Dynamo tests | lazy GPT: cold, warm compiles "
    "| compiled GPT: cold, warm compiles | seconds (install + tests + train) | status |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


def test_copy(into: Path) -> Path:
    """The torch-side tests and their helpers, outside the repository."""
    for name in TESTS + HELPERS:
        (into / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tests" / name, into / "tests" / name)
    (into / "pytest.ini").write_text(
        "[pytest]\ntimeout = 600\naddopts = -ra\n"
        "markers =\n    slow: takes more than about 2 s\n    fallback: exercises a fallback\n"
    )
    return into


def _train(py: str, tests: Path, cache: Path, how: str, row: Row) -> str:
    """Cold then warm: ``"cold, warm"`` compiles; problems go to ``row``."""
    env = {**os.environ, "PYTHONPATH": str(tests)}
    out = []
    for _ in ("cold", "warm"):
        done = subprocess.run(
            [py, "-c", TRAIN, str(cache), how], cwd=tests, env=env, capture_output=True,
            text=True, timeout=STEP_TIMEOUT, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            row.problems.append(f"{how} train failed: {done.stderr.strip()[-300:]}")
            return "failed"
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = out
    if not cold["torch"].startswith(row.version):
        row.problems.append(f"imported torch {cold['torch']}")
    if cold["compiled"] < 1 or warm["compiled"] != 0:
        row.problems.append(f"{how}: the warm process compiled")
    if cold["losses"] != warm["losses"]:
        row.problems.append(f"{how}: warm losses differ")
    return f"{cold['compiled']}, {warm['compiled']}"


def check_version(version: str, wheel: Path, work: Path, keep: bool, workers: int) -> Row:
    row = Row(version)
    start = time.perf_counter()
    venv = Path(tempfile.gettempdir()) / f"xlacache-compat-torch-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    py = str(venv / "bin" / "python")
    try:
        run([sys.executable, "-m", "venv", str(venv)])
        run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        try:
            run([py, "-m", "pip", "install", "-q", f"{wheel}[torch]", f"torch=={version}",
                 *TOOLS])  # fmt: skip
            run([py, "-m", "pip", "check"])
            run([py, "-m", "pip", "install", "-q", *TRANSFORMERS_DEPS])
            run([py, "-m", "pip", "install", "-q", "--no-deps", TRANSFORMERS])
        except subprocess.CalledProcessError as exc:
            row.resolved = "no"
            row.problems.append("pip: " + (exc.stderr or exc.stdout).strip().splitlines()[-1])
            return row
        row.resolved = "yes"
        row.phases.append(time.perf_counter() - start)
        tests = test_copy(work / version)
        done = subprocess.run(
            [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers),
             *[f"tests/{t}" for t in TESTS]],
            cwd=tests, capture_output=True, text=True, timeout=STEP_TIMEOUT * 2, check=False,
        )  # fmt: skip
        summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
        row.tests = summary.split(" in ")[0]
        if done.returncode != 0:
            row.problems.append("tests failed")
            print(done.stdout[-6000:], done.stderr[-2000:], file=sys.stderr)
        row.phases.append(time.perf_counter() - start - sum(row.phases))
        row.lazy = _train(py, tests, work / version / "cache-lazy", "lazy", row)
        row.compiled = _train(py, tests, work / version / "cache-compiled", "compiled", row)
        row.phases.append(time.perf_counter() - start - sum(row.phases))
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
    parser = matrix_parser(__doc__, VERSIONS)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="xlacache-compat-torch-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work / "wheel")
        print(HEADER, flush=True)
        for version in args.versions:
            rows.append(check_version(version, wheel, work, args.keep, args.workers))
            print(rows[-1].markdown(), flush=True)
    table = HEADER + "\n" + "\n".join(r.markdown() for r in rows) + "\n"
    if args.table:
        args.table.write_text(table)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
