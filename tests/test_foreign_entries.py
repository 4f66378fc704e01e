"""Nothing foreign is ever deserialized (issue 23).

A cache kept across a JAX upgrade, or shared by machines of other platforms, holds entries
another jaxlib's loader wrote; XLA's C++ can abort on one (jax 0.10.2 on a 0.9.2 entry:
SIGABRT in hlo_casting_utils.h). Every load path checks the header's environment (entry
format, jaxlib, platform, devices and topology, XLA flags) before a byte reaches XLA:
prefetch chooses only this jaxlib's entries and skips, silently, any other environment;
an alias whose target is foreign is a counted miss; an entry under a request's own key that
records other components is never handed to the loader.
"""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import cli_json
from tests.conftest import JAX_PROGRAM, make_blob, make_key, run_json
from tests.upgrades import OTHER_JAXLIB, compile_into, foreign, read, store_only
from xlacache import counters, entry, jax_bridge
from xlacache.cache import CompilationCache
from xlacache.errors import ForeignEntryError
from xlacache.prefetch import prefetch_choice
from xlacache.stores.base import EntryInfo, current_jaxlib
from xlacache.stores.local import LocalStore

CRASH = b"\x00" * 64  # no loader must ever see this payload


def never(*_):
    raise AssertionError("a foreign entry reached a loader")


def info(n: int, jaxlib: str, format_version: int = entry.FORMAT_VERSION) -> EntryInfo:
    return EntryInfo(make_key(n), 10, 10, float(n), float(n), 0, 1.0, f"jit_{n}",
                     format_version, jaxlib, "cpu")  # fmt: skip


def test_prefetch_chooses_only_entries_this_jaxlib_can_load():
    here = current_jaxlib()
    infos = [info(1, here), info(2, OTHER_JAXLIB), info(3, here, 2), info(4, ""), info(5, here)]
    assert [i.key for i in prefetch_choice(infos, 10)] == [make_key(1), make_key(5)]
    assert [i.key for i in prefetch_choice(infos, 10, jaxlib=OTHER_JAXLIB)] == [make_key(2)]


def _mixed(root) -> None:
    """Two entries of this jaxlib, three newer ones of another, whose payload would crash."""
    with LocalStore(root) as store:
        for n in (1, 2):
            store.put(*make_blob(n, created=100.0 + n))
        for n in (3, 4, 5):
            store.put(*make_blob(n, CRASH, created=200.0 + n,
                                 summary={"jaxlib": {"version": OTHER_JAXLIB}}))  # fmt: skip


def test_would_load_agrees_with_what_prefetch_loads(tmp_path):
    root = tmp_path / "c"
    _mixed(root)
    shown = cli_json("inspect", str(root), "--would-load", "--prefetch", "4")
    loaded = []
    cache = CompilationCache(LocalStore(root))
    cache.prefetch(lambda e: loaded.append(e.header.key) or b"x", ready=lambda: True,
                   limit=4).join(30)  # fmt: skip
    assert [e["key"] for e in shown["entries"]] == loaded == [make_key(1), make_key(2)]
    cache.close()


def test_load_entry_checks_the_environment_before_deserializing(tmp_path):
    """A real executable whose header says another jaxlib (or platform, or devices) is
    refused before XLA sees it; the same entry, honest, loads."""
    key, _ = compile_into(tmp_path / "c")
    blob = read(tmp_path / "c", key)
    assert jax_bridge.load_entry(entry.decode(blob)) is not None  # the control
    _, other_jaxlib = foreign(blob)
    with pytest.raises(ForeignEntryError, match=f"jaxlib {OTHER_JAXLIB}.*jaxlib"):
        jax_bridge.load_entry(entry.decode(other_jaxlib))
    gpu = {**entry.decode(blob).header.components}
    _, on_gpu = foreign(blob, jaxlib=current_jaxlib(), platform="cuda", components=gpu)
    with pytest.raises(ForeignEntryError, match="cuda"):  # a GPU entry, a CPU process
        jax_bridge.load_entry(entry.decode(on_gpu))
    context = {**entry.decode(blob).header.context, "device_ids": [4096]}
    _, elsewhere = foreign(blob, jaxlib=current_jaxlib(), context=context)
    with pytest.raises(ForeignEntryError, match="absent here"):
        jax_bridge.load_entry(entry.decode(elsewhere))


@pytest.mark.fallback  # a counted miss on purpose (errors['foreign'])
def test_an_alias_to_a_foreign_target_is_a_counted_miss_that_keeps_the_target(tmp_path):
    root = tmp_path / "c"
    key, _ = compile_into(root)
    target, blob = foreign(read(root, key))
    store_only(root, (target, blob))
    cache = CompilationCache(LocalStore(root))
    alias = make_key("alias")
    assert cache.save_alias(alias, {"target": target})
    got = cache.resolve_alias(alias, lambda record, header: None, jax_bridge.load_entry, never)
    assert got is None
    assert counters.snapshot()["errors"] == {"foreign": 1}
    assert cache.store.contains(target)  # another jaxlib's processes still use it
    cache.close()


@pytest.mark.fallback  # a counted miss on purpose (errors['foreign'])
def test_an_entry_recording_other_components_under_a_requests_key_is_never_loaded(tmp_path):
    root = tmp_path / "c"
    captured: list = []
    key, _ = compile_into(root, captured=captured)
    _, blob = foreign(read(root, key))
    with LocalStore(root) as store:  # the foreign entry's bytes under this process's key
        store.delete(key)
        store.put(key, json_forge(blob, key))
    cache = CompilationCache(LocalStore(root))

    identity = captured[0][0]  # the request's own key and components
    got = cache.get_or_compile(key, compile=lambda: b"compiled", load=never,
                               serialize=lambda v: v, identity=identity)  # fmt: skip
    assert got == b"compiled"
    assert counters.snapshot()["errors"] == {"foreign": 1}
    cache.close()


def json_forge(blob: bytes, new_key: str) -> bytes:
    from tests.conftest import forge_header

    return forge_header(blob, key=new_key)


# JAX_PROGRAM, with every payload XLA's loader is handed counted (an observer, not a mock).
OBSERVED = """
import xlacache.jax_bridge as bridge
handed = []
real = bridge._deserialize
bridge._deserialize = lambda backend, payload, *a: handed.append(bytes(payload)) or real(
    backend, payload, *a)
""" + JAX_PROGRAM.replace(
    "print(json.dumps({",
    "import threading\n[t.join(60) for t in threading.enumerate() if t.name == "
    "'xlacache-prefetch']\nprint(json.dumps({'crash': "
    f"sum(p == {CRASH!r} for p in handed), 'handed': len(handed), ",
)


@pytest.mark.slow
def test_a_process_starts_on_a_cache_whose_newest_entries_are_another_jaxlibs(tmp_path):
    """The crash of issue 23, in one process: the newest entries of the directory claim
    another jaxlib and hold a payload XLA would choke on; prefetch is on (the default)."""
    root = tmp_path / "c"
    cold = run_json(JAX_PROGRAM, str(root))
    with LocalStore(root) as store:
        context = entry.decode(store.peek(next(store.list()).key)).header.context
        for n in range(3):
            store.put(*make_blob(n, CRASH, summary={"jaxlib": {"version": OTHER_JAXLIB}},
                                 created=4e9 + n, context=context))  # fmt: skip
    warm = run_json(OBSERVED, str(root), json.dumps({"prefetch": 32}))
    assert warm["crash"] == 0 and warm["handed"] == cold["stats"]["misses"]
    assert warm["loss"] == cold["loss"] and warm["stats"]["misses"] == 0
    assert warm["stats"]["prefetch_hits"] == warm["stats"]["hits"] == cold["stats"]["misses"]
    assert warm["stats"]["errors"] == {} and warm["warnings"] == []
