"""Why did I miss: each kind of change is named, with values, against real stored entries."""

import dataclasses
import json

import pytest

from tests.cli_helpers import run as run_cli
from tests.conftest import JAX_PROGRAM, run_python, xla_flags
from xlacache import api, counters, explain
from xlacache.cache import CompilationCache
from xlacache.key import Identity, KeyInputs
from xlacache.stores.local import LocalStore

BASE = KeyInputs(
    hlo=b"module @jit_step { stablehlo.add }",
    compile_options=b"\x08\x01",
    jaxlib_version="0.10.1",
    platform="cpu",
    platform_version="cpu",
    device_kinds=("cpu",) * 8,
    topology='{"processes":1}',
    xla_flags=(),
)
TEXT = "module @jit_step {\n  %0 = stablehlo.add %a, %b\n  return %0\n}\n"


def never(*_):
    raise AssertionError("must not be called")


def ident(inputs=BASE, label="jit_step", text=None) -> Identity:
    return Identity(inputs, label=label, module_text=(lambda: text) if text else None)


def stored(cache: CompilationCache, identity: Identity) -> None:
    cache.get_or_compile(identity.key, compile=lambda: b"exe", load=never, serialize=bytes,
                         label=identity.label, identity=identity)  # fmt: skip


@pytest.fixture
def cache(tmp_path):
    store = LocalStore(tmp_path / "c")
    log = tmp_path / "c" / explain.MISS_LOG
    return CompilationCache(store, explainer=explain.Explainer(store, log), keep_module_text=True)


def miss(cache, identity) -> explain.Explanation:
    return cache.explainer.on_miss(identity)


def test_flag_change_is_named_with_the_flag(cache):
    stored(cache, ident())
    found = miss(
        cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_cpu_enable_fast_math=true",)))
    )
    assert found.reason == "flags"
    assert [d.component for d in found.differences] == ["xla_flags"]
    assert "`--xla_cpu_enable_fast_math=true` added" in found.line()
    changed = miss(cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_a=1",))))
    stored(cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_a=1",))))
    again = miss(cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_a=2",))))
    assert changed.reason == again.reason == "flags"
    assert "`--xla_a=1` -> `--xla_a=2`" in again.line()


def test_jaxlib_version_change_is_named_with_both_versions(cache):
    stored(cache, ident())
    found = miss(cache, ident(dataclasses.replace(BASE, jaxlib_version="0.10.2")))
    assert found.reason == "versions"
    assert [d.component for d in found.differences] == ["jaxlib"]
    assert "jaxlib 0.10.1 -> 0.10.2" in found.line()


def test_device_count_change_is_named_with_both_counts(cache):
    stored(cache, ident())
    found = miss(cache, ident(dataclasses.replace(BASE, device_kinds=("cpu",) * 4)))
    assert found.reason == "devices"
    assert [d.component for d in found.differences] == ["devices"]
    assert "device count 8 -> 4" in found.line()
    assert "device kinds 8 x cpu -> 4 x cpu" in found.line()


def test_hlo_change_shows_the_differing_lines_when_kept(cache):
    stored(cache, ident(text=TEXT))
    changed = TEXT.replace("stablehlo.add", "stablehlo.multiply")
    found = miss(
        cache, ident(dataclasses.replace(BASE, hlo=b"module @jit_step { mul }"), text=changed)
    )
    assert found.reason == "new_program"
    assert [d.component for d in found.differences] == ["hlo"]
    (diff,) = found.differences
    assert diff.details[0] == "HLO differs: 1 line changed, first at line 2"
    assert "- %0 = stablehlo.add %a, %b" in diff.details
    assert "+ %0 = stablehlo.multiply %a, %b" in diff.details


def test_hlo_change_without_kept_text_still_names_hlo(tmp_path):
    store = LocalStore(tmp_path / "c")
    cache = CompilationCache(store, explainer=explain.Explainer(store))  # text not kept
    stored(cache, ident(text=TEXT))
    found = miss(cache, ident(dataclasses.replace(BASE, hlo=b"other"), text=TEXT + "x"))
    assert found.reason == "new_program" and found.differences[0].component == "hlo"
    assert "keeps no program" in found.line()


def test_hlo_change_shows_the_lines_of_the_programs_every_entry_keeps(tmp_path):
    """Entry format 3 keeps each program's canonical text: the differing lines are named
    without XLACACHE_KEEP_HLO."""
    store = LocalStore(tmp_path / "c")
    cache = CompilationCache(store, explainer=explain.Explainer(store))  # text not kept

    def with_program(inputs, text):
        return dataclasses.replace(
            ident(inputs), program=lambda: (text.encode(), {"form": "mlir-generic/1"})
        )

    stored(cache, with_program(BASE, TEXT))
    changed = TEXT.replace("add", "multiply")
    found = miss(cache, with_program(dataclasses.replace(BASE, hlo=b"other"), changed))
    assert "HLO differs: 1 line changed" in found.line() and "stablehlo.multiply" in found.line()


def test_several_changes_the_reason_is_the_cause_not_the_consequence(cache):
    stored(cache, ident())
    upgraded = dataclasses.replace(BASE, jaxlib_version="0.10.2", hlo=b"relowered")
    found = miss(cache, ident(upgraded))
    assert found.reason == "versions"
    assert {d.component for d in found.differences} == {"jaxlib", "hlo"}


def test_nearest_of_many_candidates_is_the_one_with_fewest_differences(cache):
    stored(cache, ident(dataclasses.replace(BASE, jaxlib_version="0.9.0", device_kinds=("tpu",))))
    stored(cache, ident())
    stored(cache, ident(dataclasses.replace(BASE, hlo=b"x", platform_version="cpu 2")))
    found = miss(cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_b=1",))))
    assert found.reason == "flags" and found.compared == 3
    assert found.nearest == ident().key


def test_new_program_and_empty_cache(cache):
    assert miss(cache, ident()).reason == "new_program"
    assert "nothing stored" in miss(cache, ident()).line()
    stored(cache, ident())
    other = miss(cache, ident(dataclasses.replace(BASE, hlo=b"g"), label="jit_other"))
    assert other.reason == "new_program"
    assert "no entry labelled jit_other; nearest is jit_step" in other.line()


def test_misses_are_counted_by_reason_and_recorded_newest_first(cache, tmp_path):
    stored(cache, ident())
    stored(cache, ident(dataclasses.replace(BASE, xla_flags=("--xla_x=1",))))
    stored(cache, ident(dataclasses.replace(BASE, device_kinds=("cpu",))))
    assert counters.snapshot()["misses_by_reason"] == {"new_program": 1, "flags": 1, "devices": 1}
    records = explain.recent_misses(tmp_path / "c" / explain.MISS_LOG)
    assert [r["reason"] for r in records] == ["devices", "flags", "new_program"]
    assert records[0]["differences"][0]["component"] == "devices"
    assert records[0]["nearest"] is not None and records[0]["pid"] > 0


def test_miss_log_stays_bounded_and_keeps_the_newest(tmp_path):
    store = LocalStore(tmp_path / "c")
    log = tmp_path / "c" / explain.MISS_LOG
    explainer = explain.Explainer(store, log, max_log_bytes=4000)
    for i in range(60):
        explainer.on_miss(ident(dataclasses.replace(BASE, hlo=str(i).encode())))
    assert log.stat().st_size <= 4000
    records = explain.recent_misses(log)
    assert 3 <= len(records) < 60
    assert records[0]["key"] == ident(dataclasses.replace(BASE, hlo=b"59")).key


def test_torn_lines_in_the_log_are_skipped(tmp_path):
    log = tmp_path / explain.MISS_LOG
    log.write_text('{"time": 1, "key": "a"}\n{"time": 2, "ke\nnot json\n[1]\n')
    assert [r["key"] for r in explain.recent_misses(log)] == ["a"]


@pytest.mark.fallback
def test_explaining_never_costs_the_compile(tmp_path):
    class BrokenStore(LocalStore):
        def list(self):
            raise OSError(5, "Input/output error")

    store = BrokenStore(tmp_path / "c")
    cache = CompilationCache(store, explainer=explain.Explainer(store))
    with pytest.warns(counters.CacheWarning, match="explain error"):
        stored(cache, ident())
    assert counters.snapshot()["errors"] == {"explain": 1}
    assert counters.snapshot()["writes"] == 1


def test_off_by_default_no_explainer_no_reasons_no_log(tmp_path):
    api.initialize_cache(tmp_path / "c")
    cache = api.get_cache()
    assert cache.explainer is None and not cache.keep_module_text
    stored(cache, ident())
    assert counters.snapshot()["misses_by_reason"] == {}
    assert not (tmp_path / "c" / explain.MISS_LOG).exists()


def test_a_read_only_process_records_nothing(tmp_path):
    LocalStore(tmp_path / "c").close()
    before = sorted(p.name for p in (tmp_path / "c").iterdir())
    api.initialize_cache(tmp_path / "c", readonly=True, explain=True)
    cache = api.get_cache()
    assert cache.explainer is not None and cache.explainer.log_path is None
    cache.get_or_compile(ident().key, compile=lambda: b"exe", load=never, serialize=never,
                         identity=ident())  # fmt: skip
    assert counters.snapshot()["misses_by_reason"] == {"new_program": 1}
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == before


def test_explain_and_keep_hlo_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XLACACHE_EXPLAIN", "1")
    monkeypatch.setenv("XLACACHE_KEEP_HLO", "true")
    api.initialize_cache(tmp_path / "c")
    cache = api.get_cache()
    assert cache.explainer.log_path == tmp_path / "c" / explain.MISS_LOG
    assert cache.keep_module_text


# --- real JAX programs, each run in a fresh process ----------------------------------


def run(cache_dir, env=None, program=JAX_PROGRAM):
    return run_python(program, str(cache_dir), env={"XLACACHE_EXPLAIN": "1", **(env or {})})


@pytest.mark.slow
def test_real_flag_change_is_explained_and_shown_by_the_cli(tmp_path):
    cold = run(tmp_path / "c")
    assert cold.returncode == 0, cold.stderr
    flags = run(tmp_path / "c", env={"XLA_FLAGS": xla_flags("--xla_cpu_enable_fast_math=true")})
    assert flags.returncode == 0, flags.stderr
    stats = json.loads(flags.stdout.splitlines()[-1])["stats"]
    assert stats["misses_by_reason"] == {"flags": stats["misses"]} and stats["misses"] >= 1
    lines = [ln for ln in flags.stderr.splitlines() if ln.startswith("xlacache: miss jit_step")]
    assert len(lines) == 1 and "`--xla_cpu_enable_fast_math=true` added" in lines[0]
    result = run_cli("explain", tmp_path / "c", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["misses"][0]["reason"] == "flags"  # newest first
    assert {m["reason"] for m in shown["misses"]} == {"new_program", "flags"}
    table = run_cli("explain", tmp_path / "c", "--limit", "1")
    assert "--xla_cpu_enable_fast_math=true" in table.stdout


@pytest.mark.slow
def test_real_device_count_change_is_explained(tmp_path):
    assert run(tmp_path / "c").returncode == 0
    two = run(
        tmp_path / "c", env={"XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=2")}
    )
    assert two.returncode == 0, two.stderr
    stats = json.loads(two.stdout.splitlines()[-1])["stats"]
    assert stats["misses_by_reason"]["devices"] >= 1  # and programs new with 2 devices
    assert set(stats["misses_by_reason"]) <= {"devices", "new_program"}
    line = next(ln for ln in two.stderr.splitlines() if "miss jit_step" in ln)
    assert "devices in the job 1 -> 2" in line


@pytest.mark.slow
def test_diff_of_two_real_programs(tmp_path):
    env = {"XLACACHE_KEEP_HLO": "1"}
    assert run(tmp_path / "c", env=env).returncode == 0
    changed = JAX_PROGRAM.replace("w - 0.1 * g", "w - 0.2 * g")
    assert run(tmp_path / "c", env=env, program=changed).returncode == 0
    with LocalStore(tmp_path / "c") as store:
        old, new = sorted(
            (i for i in store.list() if i.label == "jit_step"), key=lambda i: i.created
        )
    result = run_cli("diff", tmp_path / "c", old.key[:12], new.key, "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["keys"] == [old.key, new.key] and not shown["same"]
    rows = {r["component"]: r for r in shown["components"]}
    assert [c for c, r in rows.items() if not r["same"]] == ["hlo"]
    details = rows["hlo"]["details"]
    assert details[0].startswith("HLO differs: 1 line changed")
    assert any("1.000000e-01" in d for d in details) and any("2.000000e-01" in d for d in details)
    same = run_cli("diff", tmp_path / "c", old.key, old.key, "--json")
    assert json.loads(same.stdout)["same"] is True
    table = run_cli("diff", tmp_path / "c", old.key, new.key)
    assert "HLO" in table.stdout and "differs" in table.stdout


def test_explain_on_a_cache_without_records(tmp_path):
    LocalStore(tmp_path / "c").close()
    result = run_cli("explain", tmp_path / "c")
    assert result.exit_code == 0 and "no recorded misses" in result.stdout
