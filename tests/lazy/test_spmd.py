"""SPMD sharding: Mesh / mark_sharding on 8 CPU devices, exact keys in memory and on disk.

Each test runs ``tests/lazy/_spmd_child.py`` in fresh processes (JAX's device count is fixed
when its backend starts), so "a fresh process" below is a real one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_module_json

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spmd")]


def child(scenario: str, cache: str = "-", **env: str) -> dict:
    environ = {"JAX_PLATFORMS": "cpu", **env}
    return run_module_json("tests.lazy._spmd_child", scenario, cache, env=environ, timeout=600)


def runs(result: dict) -> dict[str, dict]:
    return {r["name"]: r for r in result["runs"]}


def test_api_names_errors_and_constraints():
    r = child("api")
    assert r["is_spmd_before"] is False and r["is_spmd"] is True
    assert r["devices"] == 8
    assert r["mesh"] == [8, [["x", 2], ["y", 4]], [[0, 1, 2, 3], [4, 5, 6, 7]]]
    errors = r["errors"]
    assert all(errors.values()), errors  # every bad annotation raised
    assert "1 entries for a tensor of rank 2" in errors["rank"]
    assert "'z' names no axis" in errors["axis"] and "out of range" in errors["index"]
    assert "used twice" in errors["twice"] and "xla tensor" in errors["cpu"]
    assert "do not fill mesh (3, 3)" in errors["size"] and "no device with id" in errors["ids"]
    assert r["data_spec"] == "{devices=[2,4]<=[8]}"  # device data placed with its sharding
    assert r["constraint_spec"] == "{devices=[1,8]<=[8]}"  # a tuple entry: both axes on dim 1
    b, c, want = (np.array(v) for v in r["values"])
    np.testing.assert_array_equal(b, want)  # .cpu() gathers the shards
    np.testing.assert_array_equal(c, want + 1)
    assert r["cleared_spec"] == "{replicated}"
    assert r["loader"] == ["{devices=[2,1,4]<=[8] last_tile_dim_replicate}", "", True]


def test_sharded_graphs_get_their_own_executables_in_memory():
    result = child("programs:unsharded,mesh8,mesh8,mesh2x4,mesh2x4_joint,unsharded")
    first, again = result["runs"][1:3]
    assert first["counters"]["UncachedCompile"] == 1
    assert again["counters"]["CachedCompile"] == 1 and again["counters"]["UncachedCompile"] == 0
    # neither the LRU nor a compile for another placement is reused (the last unsharded run
    # has SPMD on: its key covers its inputs' placements, so it is a new graph too)
    r = runs(result)
    for run in result["runs"][3:]:
        assert run["counters"]["UncachedCompile"] == 1, (run["name"], run["counters"])
        assert run["counters"]["CachedCompile"] == 0
    assert r["unsharded"]["specs"] == ["", "", ""]
    assert r["mesh8"]["specs"][:2] == ["{devices=[8,1]<=[8]}"] * 2
    assert r["mesh2x4"]["specs"][1] == "{devices=[2,4]<=[8]}"
    # x is placed as mesh8 places it; the constraint on h differs, so the graph does
    assert r["mesh2x4_joint"]["specs"][0] == r["mesh8"]["specs"][0]
    assert r["mesh2x4_joint"]["specs"][1] == "{devices=[2,4]<=[8]}"
    for run in result["runs"]:
        np.testing.assert_allclose(run["y"], result["expected"], rtol=1e-5, atol=1e-5)


def test_sharded_entries_reload_in_a_fresh_process_and_other_meshes_miss(tmp_path):
    cache = str(tmp_path / "cache")
    cold = runs(child("programs:mesh8", cache))
    assert cold["mesh8"]["counters"]["PersistentCacheMiss"] == 1
    assert cold["mesh8"]["counters"]["UncachedCompile"] == 1

    # a fresh process: the 8-device program loads by alias (no lowering, no compile); the
    # unsharded program and the 2x4 one do not load the 8-device entry
    warm = child("programs:mesh8,unsharded,mesh2x4", cache)
    w = runs(warm)
    assert w["mesh8"]["counters"]["UncachedCompile"] == 0
    assert w["mesh8"]["counters"]["PersistentCacheHit"] == 1
    assert w["mesh8"]["counters"]["PersistentCacheAliasHit"] == 1
    assert w["mesh8"]["lowered"] == 0
    assert w["mesh8"]["specs"] == cold["mesh8"]["specs"]
    assert w["mesh8"]["y"] == cold["mesh8"]["y"]  # bit-identical
    for name in ("unsharded", "mesh2x4"):
        assert w[name]["counters"]["UncachedCompile"] == 1, (name, w[name]["counters"])
        assert w[name]["counters"]["PersistentCacheMiss"] == 1
        assert w[name]["counters"]["PersistentCacheHit"] == 0
    # alias entries are written for the one-device and the sharded programs alike
    assert warm["stats"].get("alias_writes", 0) == 2

    # the unsharded program and the 2x4 one now load too, all by alias, none lowered
    third = child("programs:mesh8,unsharded,mesh2x4", cache)
    t = runs(third)
    for name, run in t.items():
        assert run["counters"]["UncachedCompile"] == 0, (name, run["counters"])
        assert run["counters"]["PersistentCacheHit"] == 1
        assert run["counters"]["PersistentCacheAliasHit"] == 1 and run["lowered"] == 0
        np.testing.assert_allclose(run["y"], third["expected"], rtol=1e-5, atol=1e-5)
        assert run["specs"] == (w if name != "mesh8" else cold)[name]["specs"]


@pytest.mark.fallback
def test_an_alias_recording_other_placements_is_a_miss_not_a_wrong_program(tmp_path):
    r = child("forged", str(tmp_path / "cache"))
    assert r["first"]["counters"]["UncachedCompile"] == 1
    again = r["again"]
    assert again["counters"]["PersistentCacheAliasHit"] == 0  # refused: XLA's shardings differ
    assert again["counters"]["PersistentCacheHit"] == 1 and again["lowered"] == 1  # full key
    assert r["alias_errors"] == 1
    assert again["y"] == r["first"]["y"] and again["specs"] == r["first"]["specs"]


def test_one_device_data_meets_sharded_data(tmp_path):
    cache = str(tmp_path / "cache")
    cold = child("mixed", cache)
    warm = child("mixed", cache)  # both graphs load by alias
    for r in (cold, warm):
        assert r["ok"] and r["spec"] == "{devices=[1,8]<=[8]}"
        assert r["placement"][1] is False  # uncommitted, as a jit result of uncommitted inputs
    # the sharded program places the uncommitted one-device input itself, as jit does
    assert warm["counters"]["PersistentCacheAliasHit"] == 2
    assert warm["counters"]["UncachedCompile"] == 0  # same placements, same programs
    # a value committed to one device is replicated over the sharded graph's devices
    committed = child("mixed", SPMD_CHILD_COMMIT="1")
    assert committed["ok"] and committed["counters"]["ReplicateToMesh"] == 1


@pytest.mark.slow
def test_gpt_trains_sharded_like_one_device_and_warm_starts(tmp_path):
    cache = str(tmp_path / "cache")
    cold = child("gpt", cache)
    single = np.array(cold["single"]["losses"])
    for mode in ("dp", "tp"):  # 8-way data parallel; 4-way data x 2-way tensor parallel
        np.testing.assert_allclose(cold[mode]["losses"], single, rtol=1e-5)
        assert cold[mode]["counters"]["UncachedCompile"] == 2  # first step, steady step
        assert cold[mode]["counters"]["CachedCompile"] == 1
    assert cold["dp"]["mlp_spec"] == "{replicated}"
    assert cold["tp"]["mlp_spec"] == "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"
    warm = child("gpt", cache)
    for mode in ("single", "dp", "tp"):
        assert warm[mode]["counters"]["UncachedCompile"] == 0, (mode, warm[mode]["counters"])
        assert warm[mode]["counters"]["PersistentCacheHit"] == 2
        assert warm[mode]["losses"] == cold[mode]["losses"]
    assert warm["stats"]["misses"] == 0 and warm["stats"]["writes"] == 0
