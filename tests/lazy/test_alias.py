"""Warm start by alias: a process loads a graph's executable without lowering the graph.

An alias entry maps a graph's exact key (plus JAX's version and configuration, the lowering
code, the device and the environment components of the persistent key) to the executable's
persistent key (``xlacache.executables``). A wrong alias would be a wrong program, so every
way it can go stale must miss, and a bad target must fall back to compiling.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import xlacache
import xlacache.lazy as xl
from tests.conftest import run_json, xla_flags
from xlacache import counters, entry, executables
from xlacache import key as key_mod
from xlacache.lazy import metrics
from xlacache.stores.local import LocalStore

ROOT = Path(__file__).resolve().parents[2]
dev = xl.device()


def _c(name: str) -> int:
    return metrics.counter_value(name) or 0


def _lowerings() -> int:
    data = metrics.metric_data("LoweringTime")
    return data[0] if data else 0


def _program(p: float = 2.0, dim: int = -1) -> torch.Tensor:
    x = torch.arange(12.0).reshape(3, 4).to(dev)
    y = ((x + 1) ** p).sum(dim)
    xl.sync()
    return y.cpu()


@pytest.fixture(autouse=True)
def _warm_tracer():
    # The first time a process runs an op, torch keeps an intermediate alive a little longer,
    # which makes it an output of that first graph: trace once before the cache is set up.
    _program()


def _want(p: float = 2.0, dim: int = -1) -> torch.Tensor:
    return ((torch.arange(12.0).reshape(3, 4) + 1) ** p).sum(dim)


def _aliases(path: Path) -> list[entry.Header]:
    with LocalStore(path, readonly=True) as store:
        headers = [store.read_header(i.key) for i in store.list()]
    return [h for h in headers if h is not None and entry.is_alias(h)]


def test_same_graph_loads_by_alias_without_lowering(tmp_path):
    xlacache.initialize_cache(tmp_path / "c", prefetch=0)
    xl.clear_compiled_cache()
    first = _program()
    assert xlacache.stats()["alias_writes"] == 1
    (alias,) = _aliases(tmp_path / "c")
    assert alias.label.startswith(entry.ALIAS_LABEL_PREFIX)
    xl.clear_compiled_cache()  # as a new process: only the persistent cache knows the graph
    lowerings, hits = _lowerings(), _c("PersistentCacheAliasHit")
    again = _program()
    assert _lowerings() == lowerings  # not lowered
    assert _c("PersistentCacheAliasHit") == hits + 1
    assert xlacache.stats()["alias_hits"] == 1
    torch.testing.assert_close(first, _want())
    assert torch.equal(first, again)


@pytest.mark.slow
def test_changed_attribute_misses_the_alias(tmp_path):
    xlacache.initialize_cache(tmp_path / "c", prefetch=0)
    xl.clear_compiled_cache()
    _program(p=2.0, dim=-1)
    for p, dim in ((3.0, -1), (2.0, -2), (2, -1)):  # exponent, dim, int vs float exponent
        xl.clear_compiled_cache()
        lowerings, hits = _lowerings(), _c("PersistentCacheAliasHit")
        got = _program(p, dim)
        assert _lowerings() == lowerings + 1, (p, dim)  # lowered: no alias for this graph
        assert _c("PersistentCacheAliasHit") == hits
        torch.testing.assert_close(got, _want(p, dim))
        assert got.dtype == _want(p, dim).dtype


def _target_key(path: Path) -> str:
    (alias,) = _aliases(path)
    with LocalStore(path, readonly=True) as store:
        record = json.loads(entry.decode(store.get(alias.key)).payload())
    return record["target"]


@pytest.mark.fallback
def test_unloadable_target_falls_back_to_compiling(tmp_path):
    xlacache.initialize_cache(tmp_path / "c", prefetch=0)
    xl.clear_compiled_cache()
    _program()
    target = _target_key(tmp_path / "c")
    with LocalStore(tmp_path / "c") as store:  # a valid entry whose executable is garbage
        old = entry.decode(store.get(target))
        h = old.header
        blob = entry.encode(target, b"not an executable", compile_seconds=1.0, label=h.label,
                            platform_name=h.platform, context=h.context,
                            components=h.components, summary=h.summary)  # fmt: skip
        store.delete(target)
        store.put(target, blob)
    xl.clear_compiled_cache()
    lowerings, unc = _lowerings(), _c("UncachedCompile")
    got = _program()
    torch.testing.assert_close(got, _want())
    assert _lowerings() == lowerings + 1 and _c("UncachedCompile") == unc + 1
    assert xlacache.stats()["errors"].get("load_rejected", 0) >= 1
    xl.clear_compiled_cache()  # the recompiled executable replaced the bad one
    lowerings = _lowerings()
    torch.testing.assert_close(_program(), _want())
    assert _lowerings() == lowerings


@pytest.mark.fallback
def test_alias_to_another_program_is_refused(tmp_path):
    xlacache.initialize_cache(tmp_path / "c", prefetch=0)
    xl.clear_compiled_cache()
    _program(dim=-1)  # [3] outputs
    _program(dim=-2)  # [4] outputs: another graph, another executable
    aliases = _aliases(tmp_path / "c")
    assert len(aliases) == 2
    with LocalStore(tmp_path / "c") as store:
        records = {a.key: json.loads(entry.decode(store.get(a.key)).payload()) for a in aliases}
        (a, ra), (b, rb) = records.items()
        # point alias a at b's executable (its recorded components included, so only the
        # loaded executable's own signature can tell)
        forged = dict(ra, target=rb["target"], components=rb["components"])
        payload = json.dumps(forged).encode()
        store.delete(a)
        store.put(a, entry.encode(a, payload, compile_seconds=0.0, context=entry.ALIAS_CONTEXT,
                                  label="alias:forged"))  # fmt: skip
    xl.clear_compiled_cache()
    got = (_program(dim=-1), _program(dim=-2))
    torch.testing.assert_close(got[0], _want(dim=-1))
    torch.testing.assert_close(got[1], _want(dim=-2))
    assert xlacache.stats()["errors"].get("alias", 0) == 1


def test_readonly_process_reads_aliases_and_writes_nothing(tmp_path):
    xlacache.initialize_cache(tmp_path / "c", prefetch=0)
    xl.clear_compiled_cache()
    _program()
    xlacache.api._reset_for_tests()
    counters.reset()
    before = sorted(p.name for p in (tmp_path / "c").rglob("*"))
    xlacache.initialize_cache(tmp_path / "c", readonly=True, prefetch=0)
    xl.clear_compiled_cache()
    lowerings = _lowerings()
    torch.testing.assert_close(_program(), _want())
    assert _lowerings() == lowerings
    _program(p=3.0)  # a miss: compiled, and neither the executable nor an alias is stored
    stats = xlacache.stats()
    assert stats["alias_hits"] == 1 and stats["writes"] == 0 and stats["alias_writes"] == 0
    assert sorted(p.name for p in (tmp_path / "c").rglob("*")) == before


def test_alias_key_names_every_part():
    env = {name: "00" * 32 for name in key_mod.ENVIRONMENT_COMPONENTS}
    parts = {name: b"x" for name in key_mod.ALIAS_PARTS[1:]}
    base = key_mod.alias_key(parts, env)
    assert key_mod.is_valid_key(base)
    seen = {base}
    for name in parts:
        seen.add(key_mod.alias_key({**parts, name: b"y"}, env))
    for name in env:
        seen.add(key_mod.alias_key(parts, {**env, name: "11" * 32}))
    assert len(seen) == 1 + len(parts) + len(env)


def test_no_alias_without_a_cache():
    assert executables.alias_key(b"graph", "code") is None
    assert executables.load("0" * 64, {"inputs": [], "outputs": []}) is None


# ---------------------------------------------------------------------------- fresh processes

CHILD = """
import json, sys
import torch, torch.nn.functional as F
import xlacache, xlacache.lazy as xl
from tests.lazy.models import GPT
xlacache.initialize_cache(sys.argv[1], min_compile_seconds=0)
torch.manual_seed(0)
dev = xl.device()
model = GPT(dropout=0.1).to(dev)  # dropout: the warm process draws the same masks
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
losses = []
for step in range(3):
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(step)).to(dev)
    opt.zero_grad()
    loss = F.cross_entropy(model(idx).view(-1, 64), torch.roll(idx, -1, 1).view(-1))
    loss.backward()
    opt.step()
    xl.sync()
    losses.append(loss.item())
m = xl.metrics
print(json.dumps({
    "losses": losses,
    "lowerings": (m.metric_data("LoweringTime") or [0])[0],
    "alias_hits": m.counter_value("PersistentCacheAliasHit") or 0,
    "compiles": m.counter_value("UncachedCompile") or 0,
    "hits": m.counter_value("PersistentCacheHit") or 0,
    "misses": m.counter_value("PersistentCacheMiss") or 0,
    "devices": len(__import__("jax").devices()),
}))
"""


def _child(cache: Path, env: dict | None = None) -> dict:
    return run_json(CHILD, str(cache), env={"PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.slow
def test_fresh_process_loads_without_lowering_and_other_devices_miss(tmp_path):
    """A second process with the same cache lowers and compiles nothing and gets the same
    losses (dropout included). Other codegen flags miss too: the alias key holds the same
    xla_flags component as every key (test_alias_key_names_every_part, test_key.py)."""
    cache = tmp_path / "c"
    cold = _child(cache)
    assert cold["lowerings"] >= 2 and cold["alias_hits"] == 0
    assert cold["compiles"] >= 1 and cold["misses"] >= 1
    warm = _child(cache)
    assert warm["lowerings"] == 0 and warm["compiles"] == 0 and warm["misses"] == 0
    assert warm["alias_hits"] == cold["lowerings"] and warm["hits"] == cold["compiles"]
    assert warm["losses"] == cold["losses"]
    two = _child(cache, {"XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=2")})
    assert two["devices"] == 2
    assert two["alias_hits"] == 0 and two["lowerings"] == cold["lowerings"]
    assert two["losses"] == pytest.approx(cold["losses"], rel=1e-5)
    assert os.path.isdir(cache)
