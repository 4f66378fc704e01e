"""`compat.py --upgrade` and `--lazy`: how many programs survive a JAX upgrade through
`xlacache rewarm`, measured in the compat venvs.

For each pair OLD -> NEW: Flax and optax are installed into both venvs (pip's choice for OLD,
the same versions for NEW, as a user who upgrades only JAX keeps them); the JAX GPT and a
Flax NNX + optax LM (`compat_models.py`) train under OLD on one cache; under NEW, `xlacache
rewarm` compiles that cache's programs, then the first training process runs on it (with
XLACACHE_EXPLAIN=1, which names what it compiled and why); a cold NEW run on an empty
directory gives the programs the job needs and the results to equal bit for bit. ``--lazy
OLD:NEW`` does the same for the PyTorch lazy GPT (`examples/gpt.py`, torch installed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from compat import ROOT, last_json, make_venv, python, run, venv_path

MODELS = ("gpt", "flax")
TORCH = "torch==2.13.0"  # the torch `make venv` tests the lazy runtime with
_MISS = re.compile(r"xlacache: miss (\S+) ")


@dataclass
class Survival:
    """One model over one upgrade."""

    pair: str
    model: str
    needed: int = 0  # programs a cold NEW run compiles
    hits: int = 0  # programs the first NEW process after rewarm loaded
    compiled: int = 0  # programs it compiled
    equal: str = "-"
    missed: str = ""  # what it compiled, by label
    note: str = ""
    problems: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        share = f"{self.hits}/{self.needed} ({self.hits / self.needed:.0%})" if self.needed else "-"
        status = "ok" if not self.problems else "; ".join(self.problems)
        cells = [self.pair, self.model, share, str(self.compiled), self.equal, self.missed]
        return "| " + " | ".join([*cells, self.note, status]) + " |"


HEADER = (
    "| upgrade (rewarmed) | model | programs loaded / needed | compiled after rewarm "
    "| equal to a cold run | compiled, by label | versions | status |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- |"
)


def measure(
    pairs: list[tuple[str, str]],
    lazy: str | None,
    wheel: Path,
    work: Path,
    say: Callable[[str], None],
) -> tuple[list[str], bool]:
    """The rewarm tables for `pairs` (and the lazy pair), and whether nothing failed."""
    models = work / "models"
    models.mkdir(exist_ok=True)
    for name in ("compat_models.py", "jax_gpt.py"):
        shutil.copy(ROOT / "benchmarks" / name, models / name)
    rows: list[Survival] = []
    for old, new in pairs:
        rows += _pair(old, new, models, work, say)
    if lazy:
        old, new = lazy.split(":")
        rows.append(_lazy(old, new, wheel, work, say))
    table = HEADER + "\n" + "\n".join(r.markdown() for r in rows) + "\n"
    print("\n" + table, flush=True)
    return [table], all(not r.problems for r in rows)


def _pair(old: str, new: str, models: Path, work: Path, say) -> list[Survival]:
    pair = f"{old} -> {new}"
    try:
        versions = _install_flax(old, new, models, say)
    except subprocess.CalledProcessError as exc:
        return [Survival(pair, m, problems=[f"flax: {_tail(exc)}"]) for m in MODELS]
    cache, cold_dir = work / "rewarm" / f"{old}-{new}", work / "rewarm" / f"{old}-{new}-cold"
    rows = []
    try:
        say(f"{pair}: warming a cache with the GPT and the Flax LM under {old}")
        for model in MODELS:
            _train(old, model, cache, models)
        say(f"{pair}: xlacache rewarm under {new}")
        cli = str(venv_path(new) / "bin" / "xlacache")
        report = json.loads(run([cli, "rewarm", str(cache), "--json"]))
        say(f"{pair}: rewarm {report['counts']}; the first training process under {new}")
        for model in MODELS:
            cold = _train(new, model, cold_dir / model, models)
            first = _train(new, model, cache, models, explain=True)
            rows.append(_row(pair, model, cold, first, versions))
    except subprocess.CalledProcessError as exc:
        rows.append(Survival(pair, "-", problems=[_tail(exc)]))
    return rows


def _install_flax(old: str, new: str, models: Path, say) -> str:
    """Flax and optax in both venvs: pip's newest beside OLD; the same beside NEW, as a user
    who upgrades only JAX keeps them, unless that Flax cannot train the LM beside NEW (pip
    does not know Flax's upper bounds on JAX): then pip's newest there too. Returns the
    versions, for the table."""
    say(f"{old} -> {new}: pip install flax optax into both venvs")
    _pip(old, "--upgrade", "flax", "optax")
    pins = [f"{name}=={_version(old, name)}" for name in ("flax", "optax")]
    try:
        _pip(new, *pins)
        run([python(new), "compat_models.py", "flax", "-", "--steps", "1"], cwd=models)
    except subprocess.CalledProcessError:
        _pip(new, "--upgrade", "flax", "optax")
    return "flax " + " / ".join(_version(v, "flax") for v in (old, new))


def _pip(version: str, *packages: str) -> None:
    """pip install into the venv of `version`, its JAX held where it is."""
    run([python(version), "-m", "pip", "install", "-q", *packages, f"jax=={version}",
         f"jaxlib=={version}"])  # fmt: skip


def _version(jax_version: str, package: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return run([python(jax_version), "-c", code]).strip()


def _train(version: str, model: str, cache: Path, models: Path, explain: bool = False) -> dict:
    return _json(version, ["compat_models.py", model, str(cache)], models, explain)


def _json(version: str, args: list[str], cwd: Path, explain: bool = False) -> dict:
    """Run a script in the venv of `version`: its JSON line, with what it compiled (by
    label, from XLACACHE_EXPLAIN's lines) as "missed"."""
    env = {"XLACACHE_EXPLAIN": "1"} if explain else {}
    done = subprocess.run(
        [python(version), *args], cwd=cwd,
        capture_output=True, text=True, timeout=900, env=_env(env), check=False,
    )  # fmt: skip
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    result = last_json(done.stdout)
    result["missed"] = Counter(_MISS.findall(done.stderr))
    return result


def _row(pair: str, model: str, cold: dict, first: dict, versions: str) -> Survival:
    row = Survival(pair, model, cold["misses"], first["hits"], first["misses"], note=versions)
    same = (cold["losses"], cold["params"]) == (first["losses"], first["params"])
    row.equal = "yes" if same else "no"
    row.missed = ", ".join(f"{label} x{n}" for label, n in sorted(first["missed"].items()))
    if not same:
        row.problems.append("results differ from a cold run")
    if first["errors"]:
        row.problems.append(f"cache errors {first['errors']}")
    return row


def _lazy(old: str, new: str, wheel: Path, work: Path, say) -> Survival:
    """The PyTorch lazy GPT (examples/gpt.py): OLD warms, NEW rewarms, NEW trains."""
    pair = f"{old} -> {new}"
    row = Survival(pair, "lazy GPT (torch)")
    folder = work / "lazy"
    folder.mkdir(exist_ok=True)
    shutil.copy(ROOT / "examples" / "gpt.py", folder / "gpt.py")
    try:
        for version in (old, new):
            if not Path(python(version)).exists():
                make_venv(version, wheel, say)
            say(f"{version}: pip install {TORCH} (the [torch] extra, as the Makefile pins it)")
            _pip(version, f"{wheel}[torch]", TORCH)
        cache = folder / "cache"
        say(f"{pair}: the lazy GPT under {old}, xlacache rewarm and the GPT under {new}")
        gpt = ["gpt.py", "--steps", "3", "--json", "--cache"]
        _json(old, [*gpt, str(cache)], folder)
        run([str(venv_path(new) / "bin" / "xlacache"), "rewarm", str(cache)])
        cold = _json(new, [*gpt, str(folder / "cold")], folder)
        first = _json(new, [*gpt, str(cache)], folder, explain=True)
    except subprocess.CalledProcessError as exc:
        row.problems.append(_tail(exc))
        return row
    row.needed, row.compiled = cold["compiles"], first["compiles"]
    row.hits = first["persistent_hits"]
    row.equal = "yes" if cold["losses"] == first["losses"] else "no"
    row.missed = ", ".join(f"{label} x{n}" for label, n in sorted(first["missed"].items()))
    row.note = TORCH
    if row.equal != "yes":
        row.problems.append("results differ from a cold run")
    return row


def _env(extra: dict) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLACACHE_", "XLA_"))}
    return {**env, **extra}


def _tail(exc: subprocess.CalledProcessError) -> str:
    return " ".join(((exc.stderr or exc.stdout or "").strip()[-300:]).split())
