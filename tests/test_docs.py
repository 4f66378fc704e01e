"""The README and docs run as written: Python snippets, CLI examples, recipes, tables.

Each Python snippet of the README runs in a fresh process (twice where a warm start is
the point), with only what it leaves to the reader defined first (a model, a loader)
and its `/tmp/xla_cache` pointed at a temporary directory. Every `xlacache` command line
in a shell block of the README, docs/ and deploy/README.md must name a real command and
real options. Recipes run against real parts: a cache cleared by `prune --max-size 0`,
a bucket created in the emulator as docs/gcs.md says, two processes under torchrun, the
server command of the README. (docs/trust.md's openssl recipe: tests/server/test_tls.py.)
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from tests.cli_helpers import cli_json, make_cache, run
from tests.conftest import REPO, child_env, run_python
from tests.docsutil import blocks, commands, section_block
from xlacache.cli.main import app

pytestmark = pytest.mark.timeout(600)

DOCS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")),
        "deploy/README.md"]  # fmt: skip
JSON_STATS = "\nimport json as _j, xlacache as _x\nprint(_j.dumps(_x.stats()))\n"

# What each README snippet leaves to the reader, defined before it runs.
PRELUDES = {
    "Use": "",
    "Executables by alias (`xlacache.executables`)": """
import jax, jax.numpy as jnp, xlacache
xlacache.initialize_cache("/tmp/xla_cache")
def f(x):
    return jnp.sin(x) * 2.0
args = (jnp.ones((4,), jnp.float32),)
exact_digest = b"a program the caller names exactly"
code_fingerprint = "docs-example-lowering-v1"
signature = {"inputs": [[[4], "float32"]], "outputs": [[[4], "float32"]]}
""",
    "PyTorch: `xlacache.lazy`": """
import torch
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 2)
    def forward(self, x):
        return self.fc(x)
loss_fn = torch.nn.functional.cross_entropy
torch.manual_seed(0)
loader = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(3)]
""",
    "Google Cloud Storage": "import xlacache\n",
}
EPILOGUES = {
    "Use": "\nimport jax, jax.numpy as jnp\njax.jit(lambda x: x * 3 + 1)(jnp.ones(8)).block_until_ready()\n",  # noqa: E501
    "PyTorch: `xlacache.lazy`": "\nprint(xl.metrics.counter_value('UncachedCompile') or 0)\n",
}


def _snippet(section: str, cache: Path, path: str = "README.md") -> str:
    code = PRELUDES[section] + section_block(path, section, "python").text
    return code.replace("/tmp/xla_cache", str(cache)) + EPILOGUES.get(section, "") + JSON_STATS


def _last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_readme_python_snippet_is_run_here():
    assert {b.section for b in blocks("README.md", "python")} == set(PRELUDES)


@pytest.mark.slow
def test_readme_use_snippet_caches_across_processes(tmp_path):
    code = _snippet("Use", tmp_path / "c")
    cold, warm = (_last_json(run_python(code)) for _ in range(2))
    assert cold["initialized"] and cold["writes"] >= 1 and cold["hits"] == 0
    assert warm["hits"] == cold["writes"] and warm["misses"] == 0


@pytest.mark.slow
def test_readme_alias_snippet_loads_without_lowering_when_warm(tmp_path):
    code = _snippet("Executables by alias (`xlacache.executables`)", tmp_path / "c")
    cold, warm = (_last_json(run_python(code)) for _ in range(2))
    assert cold["alias_writes"] == 1 and cold["alias_hits"] == 0
    assert warm["alias_hits"] == 1 and warm["misses"] == 0


@pytest.mark.slow
def test_readme_lazy_snippet_trains_and_is_warm_the_second_time(tmp_path):
    code = _snippet("PyTorch: `xlacache.lazy`", tmp_path / "c")
    outputs = [run_python(code) for _ in range(2)]
    cold, warm = (_last_json(p) for p in outputs)
    compiles = [int(p.stdout.strip().splitlines()[-2]) for p in outputs]
    assert "UncachedCompile" in outputs[0].stdout  # metrics_report() printed
    assert compiles[0] >= 1 and compiles[1] == 0 and cold["writes"] >= 1
    assert warm["misses"] == 0


@pytest.mark.slow
def test_gcs_emulator_recipe_then_the_readme_and_gcs_snippets(gcs_emulator, tmp_path):
    """docs/gcs.md: STORAGE_EMULATOR_HOST and the bucket made as it says (curl), then
    the README's and docs/gcs.md's `gs://my-bucket/xla-cache` snippets run as written."""
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    recipe = section_block("docs/gcs.md", "Trying it without Google Cloud: an emulator", "sh")
    lines = [line for line in recipe.text.replace("\\\n", " ").splitlines()
             if line.strip() and not line.startswith(("docker ", "export "))]  # fmt: skip
    host = re.search(r"export STORAGE_EMULATOR_HOST=(\S+)", recipe.text).group(1)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", host)  # the documented form
    env = {"STORAGE_EMULATOR_HOST": gcs_emulator.url}
    for line in lines:
        subprocess.run(["bash", "-e", "-c", line], env=child_env(env), check=True, timeout=60)
    for n, (path, section) in enumerate(
        [
            ("README.md", "Google Cloud Storage"),
            ("docs/gcs.md", "Google Cloud Storage as the shared store"),
        ]  # fmt: skip
    ):
        block = section_block(path, section, "python").text
        code = "import xlacache\n" + block.replace("/tmp/xla_cache", str(tmp_path / f"c{n}"))
        code += EPILOGUES["Use"] + "xlacache.get_cache().close()\n" + JSON_STATS
        out = _last_json(run_python(code, env=env))
        assert out["errors"] == {}, out
        if n == 0:
            assert out["writes"] >= 1 and out["uploads"] == out["writes"], out
        else:  # a fresh directory: what the first process uploaded comes from the bucket
            assert out["remote_hits"] >= 1 and out["misses"] == 0, out
    stats = json.loads(
        subprocess.run(
            [sys.executable, "-m", "xlacache", "stats", "gs://my-bucket/xla-cache", "--json"],
            capture_output=True,
            text=True,
            env=child_env(env),
            check=True,
            timeout=60,
        ).stdout  # fmt: skip
    )
    assert stats["entries"] >= 1  # what the snippets uploaded


def test_clearing_a_cache_as_docs_cli_says(tmp_path):
    root = tmp_path / "c"
    make_cache(root, ["a", "b", "c"])
    for argv in commands(section_block("docs/cli.md", "Clearing a cache", "sh")):
        args = [str(root) if a == "PATH" else a for a in argv[1:]]
        result = run(*args)
        assert result.exit_code == 0, result.output
    assert cli_json("stats", root)["entries"] == 0


@pytest.mark.slow
def test_torchrun_recipe_of_docs_distributed(tmp_path):
    (argv,) = [line for line in section_block("docs/distributed.md", "Launching", "sh").text
               .splitlines() if line.startswith("torchrun ")]  # fmt: skip
    words = argv.replace("/tmp/mp_cache", str(tmp_path / "mp_cache")).split()
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), *words[1:], "--samples", "128"]
    outputs = [
        subprocess.run(
            cmd,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=400,
            env=child_env({"PYTHONPATH": str(REPO)}),
        )  # fmt: skip
        for _ in range(2)
    ]
    for proc in outputs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiles per rank [0, 0]" in outputs[1].stdout, outputs[1].stdout


@pytest.mark.slow
def test_the_readme_server_command_starts_with_the_page_on_loopback(tmp_path):
    from tests.server.srvutil import start_server, write_tokens

    (argv,) = commands(section_block("README.md", "The shared cache server", "sh"))
    tokens = write_tokens(tmp_path / "tokens")
    args = [
        {"/var/lib/xlacache": str(tmp_path / "store"), "/etc/xlacache/tokens": str(tokens),
         "0.0.0.0:7070": "127.0.0.1:0", "127.0.0.1:9090": "127.0.0.1:0"}.get(a, a)
        for a in argv[2:]
    ]  # fmt: skip
    store = args[args.index("--store") + 1]
    listen = args[args.index("--listen") + 1]
    srv = start_server(tmp_path, *args, store=store, listen=listen)
    try:
        assert srv.http_port and "metrics on http://127.0.0.1:" in srv.log_text()
    finally:
        srv.stop(signal.SIGKILL)


# -- CLI examples -----------------------------------------------------------------------


def _options(command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}


def _example_lines() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for block in blocks(path):
            if block.lang not in ("sh", ""):
                continue
            text = block.text.replace("\\\n", " ").replace(";", "\n")
            for raw in text.splitlines():
                words = raw.split("#", 1)[0].split()
                if words and words[0] == "xlacache":
                    found.append((block.where(), words))
    return found


def test_every_cli_example_names_a_real_command_and_real_options():
    group = typer.main.get_command(app)
    examples = _example_lines()
    assert len(examples) > 30
    for where, words in examples:
        first = words[1] if len(words) > 1 else ""
        if first.startswith("-"):
            command, rest = group, words[1:]
        else:
            assert first in group.commands, f"{where}: no command {first!r}: {words}"
            command, rest = group.commands[first], words[2:]
        known = _options(command)
        for word in rest:
            option = word.strip("[]").split("=", 1)[0]
            if option.startswith("--"):
                assert option in known, f"{where}: {first} has no option {option}: {words}"


def _example_script_options() -> set[str]:
    """The options of examples/*.py and benchmarks/*.py (their argparse calls, as written)."""
    import ast

    found = set()
    for path in [*(REPO / "examples").glob("*.py"), *(REPO / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                found |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return {o for o in found if isinstance(o, str) and o.startswith("--")}


def _torchrun_options() -> set[str]:
    from torch.distributed.run import get_args_parser

    return {o for o in get_args_parser()._option_string_actions if o.startswith("--")}


_SPAN_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*[a-z0-9])(?![\w*-])")


# pip's options that docs/gpu.md's offline install quotes
PIP_OPTIONS = {
    "--no-deps",
    "--no-index",
    "--only-binary",
    "--platform",
    "--python-version",
    "--target",
}


def test_every_flag_the_docs_quote_exists():
    """A `--flag` in a code span of README/docs is an option of an xlacache command (of that
    command, where the span names it), of an example script or benchmark, of torchrun, pytest
    or pip; XLA's own flags (--xla_...) are key inputs, not options (issue 27, 8)."""
    group = typer.main.get_command(app)
    every = _options(group).union(*(_options(c) for c in group.commands.values()))
    others = _example_script_options() | _torchrun_options() | PIP_OPTIONS
    others |= {"--durations", "--help"}
    checked = 0
    for doc in DOCS:
        for span in re.findall(r"`([^`\n]+)`", (REPO / doc).read_text()):
            words = span.split()
            known = every | others
            if len(words) > 1 and words[0] == "xlacache" and words[1] in group.commands:
                known = _options(group.commands[words[1]]) | {"--help"}
            for flag in _SPAN_FLAG.findall(span):
                if flag.startswith("--xla_"):
                    continue
                checked += 1
                assert flag in known, f"{doc}: `{span}` quotes {flag}, which no command has"
    assert checked > 50


# Misspellings the docs quote on purpose (what the unknown-variable warning catches).
MISSPELLED = {"XLACACHE_LAZY_FALBACK", "XLACACHE_MAXSIZE", "XLACACHE_SERVE_MAXSIZE"}


def test_every_xlacache_variable_the_docs_quote_exists():
    """Every XLACACHE_* name in README/docs is a variable of a settings table (or strict
    mode's), so a reader who sets it is heard; the misspelled examples are not (issue 27, 8)."""
    from xlacache import variables

    known = variables.known_variables() | {"XLACACHE_STRICT"}
    quoted = set()
    for doc in [*DOCS, "benchmarks/README.md"]:
        text = (REPO / doc).read_text()
        quoted |= {(doc, n) for n in re.findall(r"XLACACHE_[A-Z_]*[A-Z](?![A-Z_<*])", text)}
    assert len(quoted) > 40
    assert [(doc, n) for doc, n in sorted(quoted) if n not in known | MISSPELLED] == []
    assert not MISSPELLED & known and {n for _, n in quoted} >= MISSPELLED


def _benchmark_module(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def test_compat_md_names_the_tests_make_compat_runs():
    """compat.md names exactly the test files `make compat` and `make compat-torch` run."""
    sys.path.insert(0, str(REPO / "benchmarks"))  # compat_torch imports compat
    try:
        tests = {*_benchmark_module("compat").TESTS, *_benchmark_module("compat_torch").TESTS}
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    text = (REPO / "docs" / "compat.md").read_text()
    assert set(re.findall(r"`((?:server/|lazy/)?test_\w+\.py)`", text)) == tests


def test_make_venv_says_what_each_step_does():
    """`make venv` is no silent minute: each install is announced first (issue 27, 9)."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0].splitlines()
    installs = [i for i, line in enumerate(recipe) if "pip install" in line]
    assert len(installs) >= 3
    for i in installs:
        assert recipe[i - 1].strip().startswith('@echo "make venv: ['), recipe[i - 1]
    assert "ready" in recipe[-1]


def test_every_make_command_the_docs_name_is_a_makefile_target():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    named = set()
    for doc in [*DOCS, "benchmarks/README.md"]:
        text = (REPO / doc).read_text()
        named |= {(doc, t) for t in re.findall(r"`make ([\w-]+)", text)}
        for block in blocks(doc, "sh"):
            named |= {(doc, w[1]) for w in commands(block, "make") if len(w) > 1}
    assert {t for _, t in named} >= {"demo", "test", "test-fast"}
    assert [(doc, t) for doc, t in sorted(named) if t not in targets] == []


def test_generated_tables_are_fresh():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "doctables.py"), "--check"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_the_docs_state_the_token_minimum_the_server_enforces():
    from xlacache.server.auth import MIN_TOKEN_LENGTH

    for path in ("docs/trust.md", "deploy/README.md"):
        assert f"at least {MIN_TOKEN_LENGTH} characters" in " ".join(
            (REPO / path).read_text().split()
        ), path


@pytest.mark.slow
def test_stats_has_every_key_before_and_after_initializing(tmp_path):
    code = """
import json, xlacache
before = xlacache.stats()
xlacache.initialize_cache(__import__("sys").argv[1])
print(json.dumps([before, xlacache.stats()]))
"""
    proc = run_python(code, str(tmp_path / "c"))
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before["initialized"] is False and after["initialized"] is True
    from xlacache.counters import FIELDS

    for figures in (before, after):
        assert set(FIELDS) <= set(figures)
        assert figures["miss_reports_dropped"] == figures["alias_hits"] == 0
        assert figures["gcs_retries"] == 0 and figures["errors"] == {}


def test_every_counter_the_code_adds_is_a_documented_stats_key():
    from xlacache.counters import FIELDS

    added = set()
    for path in (REPO / "xlacache").rglob("*.py"):
        added |= set(re.findall(r'counters\.add\(\s*"(\w+)"', path.read_text()))
    assert added and added <= set(FIELDS), sorted(added - set(FIELDS))


def test_cli_help_shows_no_bool_and_version_prints(monkeypatch):
    for args in (["--help"], ["serve", "--help"], ["stats", "--help"], ["prune", "--help"]):
        result = run(*args, env={"COLUMNS": "120"})
        assert result.exit_code == 0 and "<bool>" not in result.stdout, args
    version = run("--version")
    from xlacache import __version__

    assert version.exit_code == 0 and version.stdout.strip() == f"xlacache {__version__}"


@pytest.mark.slow
def test_examples_gpt_prints_json_only_when_asked():
    script = [sys.executable, str(REPO / "examples" / "gpt.py"), "--eager", "--steps", "4"]
    env = child_env({"PYTHONPATH": str(REPO)})
    plain = subprocess.run(script, capture_output=True, text=True, timeout=300, env=env)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert not any(line.lstrip().startswith(("{", '"')) for line in plain.stdout.splitlines())
    assert "final loss" in plain.stdout
    as_json = subprocess.run([*script, "--json"], capture_output=True, text=True, timeout=300,
                             env=env)  # fmt: skip
    assert json.loads(as_json.stdout.strip().splitlines()[-1])["mode"] == "eager"


def test_the_emulator_binary_of_docs_gcs_starts_as_written():
    """docs/gcs.md's way without Docker: the binary of the dev dependency, from the
    repository (its port made free for the test)."""
    import socket
    import urllib.request

    from tests.waiting import wait_for

    block = section_block("docs/gcs.md", "Trying it without Google Cloud: an emulator", "sh", 1)
    line = block.text.replace("\\\n", " ").strip()
    assert line.startswith(".venv/") and line.endswith("-port 4443 &")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = line.removesuffix("&").replace("-port 4443", f"-port {port}")
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}/storage/v1/b"

    def answers() -> bool:
        try:
            return urllib.request.urlopen(url, timeout=2).status == 200
        except OSError:
            return False

    try:
        wait_for(answers, 60, "the emulator to answer", procs=[proc])
    finally:
        proc.kill()
        proc.wait(30)


def test_examples_gpt_says_what_it_compiled_and_what_it_loaded():
    """A warm run says it loaded its programs, not that it compiled 0 (issue 27, 9)."""
    sys.path.insert(0, str(REPO / "examples"))
    try:
        from gpt import summary
    finally:
        sys.path.remove(str(REPO / "examples"))
    base = {"mode": "lazy", "loss": 4.9, "first_step_s": 1.0, "steady_step_s": 0.1,
            "time_to_first_step_s": 2.0, "compile_s": 0.07}  # fmt: skip
    warm = summary({**base, "compiles": 0, "persistent_hits": 2}).splitlines()[1]
    assert warm == "loaded 2 from the persistent cache (0.07 s getting programs ready)"
    cold = summary({**base, "compiles": 1, "persistent_hits": 0}).splitlines()[1]
    assert cold.startswith("compiled 1 program (")
    assert "compiled nothing and loaded nothing" in summary(
        {**base, "compiles": 0, "persistent_hits": 0}
    )


def test_docs_name_no_missing_environment_variable():
    """Every XLACACHE_ variable the README names is one the code reads."""
    code = "\n".join(p.read_text() for p in (REPO / "xlacache").rglob("*.py"))
    for name in set(re.findall(r"XLACACHE_[A-Z_]+[A-Z]", (REPO / "README.md").read_text())):
        if name.startswith("XLACACHE_SERVE_"):
            continue
        assert name in code, name


def test_the_index_recipe_queries_an_index_read_only(tmp_path):
    """docs/index.md's sqlite-utils recipe runs as written against a real cache's index,
    beside a writer that keeps the store open, and writes nothing to it."""
    from tests.conftest import make_blob
    from xlacache.stores.local import LocalStore

    cache = tmp_path / "xla_cache"
    code = section_block("docs/index.md", "Querying it read-only", "python").text
    with LocalStore(cache) as store:
        for n in range(3):
            store.put(*make_blob(n, summary={"jaxlib": {"version": "0.6.2"}}, platform_name="cpu"))
        store.flush_hits()
        before = (cache / "index.sqlite").read_bytes()
        proc = run_python(code.replace("/tmp/xla_cache", str(cache)))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (cache / "index.sqlite").read_bytes() == before
    out = proc.stdout
    assert "'jaxlib': <class 'str'>" in out and "'entries': 3" in out
    assert "'jaxlib': '0.6.2', 'platform': 'cpu', 'entries': 3" in out
