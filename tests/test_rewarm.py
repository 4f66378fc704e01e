"""`xlacache rewarm` (issue 23): another jaxlib's stored programs compiled for this one.

The entries here are real ones of this jaxlib, copied as another jaxlib would have written
them (`tests.upgrades.foreign`: their key, jaxlib component and summary say 0.0.1). Rewarm
never loads their executables; it parses their stored program, rebuilds its options and
keys it as a live process of this version does, so a rewarmed entry of an unchanged
program has exactly the key this process's own compile had.
"""

from __future__ import annotations

import json
import logging

import jax
import jax.numpy as jnp
import pytest

import xlacache
from tests.cli_helpers import cli_json, run
from tests.conftest import forge_header, make_blob
from tests.upgrades import ARG, OTHER_JAXLIB, compile_into, foreign, program, read, store_only
from xlacache import counters, entry, rewarming
from xlacache.errors import ConfigError
from xlacache.key import program_component
from xlacache.stores.local import LocalStore


def upgraded(root, fn=program) -> tuple[str, str, float]:
    """A directory as a JAX upgrade leaves it: `fn`'s entry written by another jaxlib only.
    (the key this jaxlib gives `fn`, the foreign entry's key, `fn`'s result)."""
    live, result = compile_into(root, fn)
    old, blob = foreign(read(root, live))
    store_only(root, (old, blob), drop=(live,))
    return live, old, result


def entries(root) -> dict[str, entry.Header]:
    with LocalStore(root, readonly=True) as store:
        return {i.key: entry.decode(store.peek(i.key)).header for i in store.list()}


def test_rewarm_stores_the_key_a_live_process_computes_and_it_hits(tmp_path):
    root = tmp_path / "c"
    live, old, result = upgraded(root)
    report = xlacache.rewarm(str(root))
    assert report.counts()["rewarmed"] == 1 and report.ok
    (done,) = report.results
    assert (done.key, done.jaxlib, done.new_key) == (old, OTHER_JAXLIB, live)
    header = entries(root)[live]
    assert header.rewarmed_from == OTHER_JAXLIB
    stored = entry.decode(read(root, live))
    assert program_component(stored.program_text()) == header.components["hlo"]

    # The first process of the new version: a hit, no compile, the same result.
    got, stats = live_run(root)
    assert (stats["hits"], stats["misses"]) == (1, 0) and got == result


def live_run(root, fn=program, **settings) -> tuple[float, dict]:
    """`fn` run as a fresh process of this version would (in this one): result, stats."""
    from xlacache import api

    api._reset_for_tests()
    counters.reset()
    jax.clear_caches()
    xlacache.initialize_cache(str(root), **{"prefetch": 0, **settings})
    return float(jax.jit(fn)(ARG)), xlacache.stats()


def test_rewarm_is_idempotent_and_says_what_is_there(tmp_path):
    root = tmp_path / "c"
    upgraded(root)
    assert xlacache.rewarm(str(root)).counts()["rewarmed"] == 1
    before = entries(root)
    again = xlacache.rewarm(str(root))
    assert again.counts()["present"] == 1 and again.counts()["rewarmed"] == 0
    assert entries(root).keys() == before.keys()


def test_a_live_process_hits_only_a_program_its_own_lowering_gives(tmp_path):
    """The stored program says `x * 5.0` where the live one has `x * 3.0` (its key made
    to match, as a bug or a changed lowering would leave it): rewarm compiles what the
    text says, under that program's key; the live process of `x * 3.0` misses and
    computes its own result; a process that lowers `x * 5.0` hits it."""
    root = tmp_path / "c"
    live, old, result = upgraded(root)
    found = entry.decode(read(root, old))
    text = found.program_text().replace(b"3.000000e+00", b"5.000000e+00")
    assert text != found.program_text()
    changed, blob = _with_program(found, text)
    store_only(root, (changed, blob), drop=(old,))
    (done,) = xlacache.rewarm(str(root)).results
    assert done.status == "rewarmed" and done.new_key != live

    got, stats = live_run(root)
    assert got == result and stats["misses"] == 1  # never served the other program
    got, stats = live_run(root, _scaled(5.0))
    assert got != result and (stats["hits"], stats["misses"]) == (1, 0)


def _with_program(found: entry.Entry, text: bytes) -> tuple[str, bytes]:
    """The entry with another stored program, its hlo component and key made to match."""
    header = found.header
    components = {**header.components, "hlo": program_component(text)}
    blob = entry.encode(
        "0" * 64, found.payload(), compile_seconds=1.0, label=header.label,
        platform_name=header.platform, context=header.context, components=components,
        summary=header.summary, program_text=text, program=header.program,
    )  # fmt: skip
    from xlacache.key import key_from_components

    new_key = key_from_components(components)
    return new_key, forge_header(blob, key=new_key, producer=header.producer)


def test_what_cannot_be_rebuilt_is_reported_and_never_stored(tmp_path):
    root = tmp_path / "c"
    _, old, _ = upgraded(root)
    found = entry.decode(read(root, old))
    garbled, garbled_blob = _with_program(found, b"module { this is not MLIR }")
    other_text = found.program_text().replace(b"3.000000e+00", b"5.000000e+00")
    _, wrong_program = _with_program(found, other_text)
    wrong_program = forge_header(  # the old entry, its program not the one its key names
        wrong_program, key=found.header.key, components=found.header.components
    )
    recipe = {**found.header.program["options"], "num_partitions": 2}
    unbuildable, unbuildable_blob = foreign(
        read(root, old), jaxlib="0.0.2", program={**found.header.program, "options": recipe}
    )
    elsewhere, elsewhere_blob = foreign(
        read(root, old), jaxlib="0.0.3", context={**found.header.context, "device_ids": [77]}
    )
    bare_key, bare = make_blob(9, summary={"jaxlib": {"version": OTHER_JAXLIB}})
    store_only(root, (garbled, garbled_blob), (unbuildable, unbuildable_blob),
               (elsewhere, elsewhere_blob), (bare_key, bare), drop=(old,))  # fmt: skip
    with LocalStore(root) as store:
        store.put(old, wrong_program)
    before = set(entries(root))
    report = xlacache.rewarm(str(root))
    status = {r.key: (r.status, r.detail) for r in report.results}
    assert status[garbled][0] == "changed" and "does not parse" in status[garbled][1]
    assert status[unbuildable][0] == "changed" and "devices" in status[unbuildable][1]
    assert status[elsewhere][0] == "not_here" and "absent here" in status[elsewhere][1]
    assert status[bare_key][0] == "no_program"
    assert status[old][0] == "failed" and "not the one its key names" in status[old][1]
    assert set(entries(root)) == before and not report.ok


def test_explain_names_a_rewarmed_hit_and_stats_count_it(tmp_path, caplog):
    root = tmp_path / "c"
    upgraded(root)
    xlacache.rewarm(str(root))
    with caplog.at_level(logging.WARNING, logger="xlacache.explain"):
        live_run(root, explain=True)
    assert f"rewarmed from jaxlib {OTHER_JAXLIB}" in caplog.text
    by_jaxlib = {v["jaxlib"]: v for v in cli_json("stats", str(root))["by_jaxlib"]}
    assert by_jaxlib[OTHER_JAXLIB]["rewarmed"] == 0 and len(by_jaxlib) == 2
    assert [v["rewarmed"] for k, v in by_jaxlib.items() if k != OTHER_JAXLIB] == [1]


def test_the_command_prints_a_report_and_exits_1_on_failures(tmp_path):
    root = tmp_path / "c"
    upgraded(root)
    done = cli_json("rewarm", str(root), "--from-jaxlib", OTHER_JAXLIB)
    assert done["counts"]["rewarmed"] == 1 and done["results"][0]["jaxlib"] == OTHER_JAXLIB
    assert cli_json("rewarm", str(root), "--from-jaxlib", "9.9.9")["entries"] == 0
    table = run("rewarm", str(root))
    assert table.exit_code == 0 and "1 present" in table.stdout


def test_rewarm_refuses_a_read_only_cache_and_needs_a_store(tmp_path):
    with pytest.raises(ConfigError, match="initialize_cache"):
        xlacache.rewarm()
    cache = rewarming.cache_for(LocalStore(tmp_path / "c", readonly=False))
    cache.readonly = True
    with pytest.raises(ConfigError, match="read-only"):
        rewarming.rewarm_cache(cache)


# A worker that starts rewarming when the other is ready too (a barrier of files), so both
# reach the same programs at once.
TWO_WORKERS = """
import json, pathlib, sys, time
import jax, xlacache
root, meeting, me = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
(meeting / f"ready-{me}").touch()
deadline = time.monotonic() + 120
while len(list(meeting.glob("ready-*"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.001)
print(json.dumps(xlacache.rewarm(root, jobs=1).to_dict()))
"""


@pytest.mark.slow
def test_two_workers_rewarm_each_program_once(tmp_path):
    """Two rewarm processes on one directory at once: each program compiled by one."""
    import subprocess
    import sys

    from tests.conftest import child_env

    root = tmp_path / "c"
    lives = []
    for scale in (2.0, 3.0, 4.0):
        live, old, _ = upgraded(root, _scaled(scale))
        lives.append(live)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_WORKERS, str(root), str(tmp_path), str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )  # fmt: skip
        for n in range(2)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    rewarmed = [r["new_key"] for rep in reports for r in rep["results"]
                if r["status"] == "rewarmed"]  # fmt: skip
    assert sorted(rewarmed) == sorted(lives)  # each once, by one of them
    assert all(rep["counts"]["failed"] == 0 for rep in reports)


def _scaled(scale: float):
    """`program` with another scale (lowered under the same name: jit_program)."""

    def program(x):
        return jnp.where(x > 0, jax.nn.log_softmax(x * scale), 0.0).sum()

    return program


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["serve", "gs"])
def test_rewarm_a_shared_store_then_a_new_worker_hits_it(tmp_path, request, where):
    """Over a real `xlacache serve` and a bucket (fake-gcs-server): the CLI rewarms the shared
    store; a worker with an empty local directory then loads the program from it."""
    import signal

    from tests.server.srvutil import start_server
    from xlacache.stores import open_store

    live, old, result = upgraded(tmp_path / "src")
    blob = read(tmp_path / "src", old)
    server = None
    if where == "serve":
        server = start_server(tmp_path)
        url = server.url
    else:
        url = request.getfixturevalue("gcs").url()
    try:
        with open_store(url) as shared:
            shared.put(old, blob)
        done = cli_json("rewarm", url)
        assert done["counts"]["rewarmed"] == 1 and done["results"][0]["new_key"] == live
        got, stats = live_run(tmp_path / "fresh", remote=url)
        assert got == result and (stats["hits"], stats["misses"]) == (1, 0)
        assert stats["remote_hits"] == 1
        assert cli_json("rewarm", url)["counts"]["present"] == 1
    finally:
        if server is not None:
            server.stop(signal.SIGKILL)


def test_a_format_2_entry_is_still_read_and_stored_again_under_the_new_key(tmp_path):
    """A cache written before entry format 3 (its keys digested the module's bytecode): a
    process of this version finds the old entry by its old key, and stores it under the
    new one; a read-only process reads it and writes nothing."""
    root = tmp_path / "c"
    captured: list = []
    live, result = compile_into(root, captured=captured)
    found = entry.decode(read(root, live))
    old_key, components = captured[0][0].legacy()
    legacy = entry.encode(
        old_key, found.payload(), compile_seconds=2.0, label=found.header.label,
        platform_name="cpu", context=found.header.context,
    )  # fmt: skip
    legacy = forge_header(legacy, format_version=2, components=components)
    store_only(root, (old_key, legacy), drop=(live,))

    got, stats = live_run(root, readonly=True)
    assert got == result and (stats["hits"], stats["misses"]) == (1, 0)
    assert set(entries(root)) == {old_key}  # a reader writes nothing
    got, stats = live_run(root)
    assert got == result and (stats["hits"], stats["misses"]) == (1, 0)
    assert entries(root)[live].format_version == entry.FORMAT_VERSION  # migrated
    would_load = cli_json("inspect", str(root), "--would-load")["entries"]
    assert [e["key"] for e in would_load] == [live]  # prefetched by its new key from now on
    assert cli_json("prune", str(root), "--stale")["count"] == 1  # the old one is stale


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_lazy_pytorch_process_after_an_upgrade_compiles_nothing(tmp_path):
    """The lazy GPT after an upgrade: its alias entries name the old JAX (they miss), so it
    lowers its graphs again; rewarmed, their keys are stored: 0 XLA compiles."""
    import subprocess
    import sys

    from tests.conftest import REPO, child_env

    root = tmp_path / "c"
    script = [sys.executable, str(REPO / "examples" / "gpt.py"), "--steps", "3", "--json"]

    def gpt() -> dict:
        done = subprocess.run([*script, "--cache", str(root)], capture_output=True, text=True,
                              timeout=240, env=child_env({"PYTHONPATH": str(REPO)}))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = gpt()
    assert cold["compiles"] == 2
    with LocalStore(root) as store:  # as another JAX left it: foreign programs, no aliases
        infos = list(store.list())
        for info in infos:
            if not info.label.startswith(entry.ALIAS_LABEL_PREFIX):
                store.put(*foreign(store.peek(info.key)))
            store.delete(info.key)
    assert xlacache.rewarm(str(root)).counts()["rewarmed"] == 2
    first = gpt()
    assert (first["compiles"], first["persistent_hits"]) == (0, 2)
    assert first["losses"] == cold["losses"]


def test_the_status_page_shows_rewarmed_entries_per_jaxlib():
    from xlacache.server.status_html import _versions
    from xlacache.stores.base import VersionSummary

    rows = [
        VersionSummary("0.10.2", 5, 1000, 3).to_dict(),
        VersionSummary("0.9.2", 5, 900).to_dict(),
    ]
    html = _versions(rows)
    assert "jaxlib 0.10.2: 5 entries, 1000 B, 3 rewarmed" in html
    assert "0.9.2: 5 entries, 900 B</div>" in html
