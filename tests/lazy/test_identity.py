"""Exact identity: graphs that differ in one attribute never share a compiled program."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import xlacache.lazy as xl
from tests.conftest import run_json
from xlacache.lazy import executor, metrics
from xlacache.lazy.executable_cache import Executable, ExecutableCache, memory_maps
from xlacache.lazy.identity import UnencodableAttribute, encode, placeholder

dev = xl.device()
ROOT = Path(__file__).resolve().parents[2]


def _c(name: str) -> int:
    return metrics.counter_value(name) or 0


def test_issue_repro_pow_exponents_and_negative_dims():
    x = torch.tensor([2.0, 3.0]).to(dev)
    a = x**-1
    xl.sync()
    b = x**-2
    xl.sync()
    assert a.cpu().tolist() == [0.5, pytest.approx(1 / 3)]
    torch.testing.assert_close(b.cpu(), torch.tensor([0.25, 1 / 9]))
    m = torch.arange(4.0).reshape(2, 2).to(dev)
    assert m.sum(-1).cpu().tolist() == [1.0, 5.0]
    assert m.sum(-2).cpu().tolist() == [2.0, 4.0]


def test_encoding_is_typed_and_exact():
    values = [1, 1.0, True, -1, -2, 0.0, -0.0, math.inf, -math.inf, None, "1", (1,), [1]]
    values += [torch.float32, torch.float64, torch.Size([1]), placeholder(1), np.float32(1.0)]
    codes = [encode(v) for v in values]
    assert len(set(codes)) == len(codes), codes
    assert encode(math.nan) == encode(float("nan"))  # the same NaN bits: the same attribute
    neg_nan = -math.nan
    if math.copysign(1.0, neg_nan) < 0:  # a NaN with its sign bit set is another bit pattern
        assert encode(neg_nan) != encode(math.nan)
    assert encode((1, (2.5, None), "a,b")) == encode((1, (2.5, None), "a,b"))
    assert encode(("a,b",)) != encode(("a", "b"))  # strings carry their length
    with pytest.raises(UnencodableAttribute):
        encode(object())
    with pytest.raises(UnencodableAttribute):
        encode((1, {"a": 1}))


def test_int_float_bool_scalars_give_the_dtypes_eager_gives():
    i = torch.arange(4)
    checks = [
        (lambda t: t**2, i),
        (lambda t: t**2.0, i),
        (lambda t: t + 1, i),
        (lambda t: t + 1.0, i),
        (lambda t: t * True, i),
    ]
    for fn, a in checks:
        got, want = fn(a.to(dev)).cpu(), fn(a)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        torch.testing.assert_close(got, want)
    for fill in (True, 1, 1.0, -0.0, 0.0):
        got, want = torch.full((2,), fill, device=dev).cpu(), torch.full((2,), fill)
        assert got.dtype == want.dtype and torch.equal(got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), fill


def _cases(rng: random.Random) -> list[tuple[str, object]]:
    """(label, fn) pairs: graphs with one attribute changed from each other."""
    cases: list[tuple[str, object]] = []
    for e in (-3, -2, -1, 0, 1, 2, 3, -2.0, -1.0, 0.5, 2.0, 3.0, -0.5):
        cases.append((f"pow {e!r}", lambda x, e=e: x.abs() ** e))
    for d in (-2, -1, 0, 1):
        for keep in (False, True):
            cases.append((f"sum {d} {keep}", lambda x, d=d, k=keep: x.sum(d, keepdim=k)))
            cases.append((f"amax {d} {keep}", lambda x, d=d, k=keep: x.amax(d, keepdim=k)))
            cases.append((f"argmax {d} {keep}", lambda x, d=d, k=keep: x.argmax(d, keepdim=k)))
        cases.append((f"softmax {d}", lambda x, d=d: x.softmax(d)))
        cases.append((f"cumsum {d}", lambda x, d=d: x.cumsum(d)))
    for i in (-3, -2, -1, 0, 1, 2):
        cases.append((f"select {i}", lambda x, i=i: x[i]))
        cases.append((f"col {i}", lambda x, i=i: x[:, i]))
        cases.append((f"slice {i}:", lambda x, i=i: x[i:]))
        cases.append((f"narrow {i}", lambda x, i=i: x.narrow(1, i % 3, 1)))
    for dt in (torch.float32, torch.float16, torch.int32, torch.bool, torch.int8, torch.int16):
        cases.append((f"to {dt}", lambda x, dt=dt: (x * 3).to(dt)))
        cases.append((f"sum dtype {dt}", lambda x, dt=dt: x.sum(0, dtype=dt)))
    for v in (0.0, -0.0, 1.0, -1.0, math.inf, -math.inf):
        cases.append((f"nan_to_num {v!r}", lambda x, v=v: 1 / (x * math.nan).nan_to_num(nan=v)))
        cases.append((f"full {v!r}", lambda x, v=v: 1 / torch.full((2,), v, device=x.device)))
    for v in (1, 1.0, True, 2, -2):
        cases.append((f"int tensor + {v!r}", lambda x, v=v: (x > 0).int() + v))
        cases.append((f"int tensor * {v!r}", lambda x, v=v: (x * 10).long() * v))
    for k in (1, 2, 3):
        cases.append((f"topk {k}", lambda x, k=k: x.topk(k, dim=-1).values))
    for dims in ((0, 1), (1, 0)):
        cases.append((f"permute {dims}", lambda x, dims=dims: x.permute(*dims) * 1))
    for _ in range(24):  # drawn: an exponent (int or float), a dim and keepdim, a reduction
        e = rng.choice([rng.randint(-4, 4), rng.randint(-8, 8) / 2])
        d, keep = rng.randint(-2, 1), rng.random() < 0.5
        red = rng.choice(["sum", "mean", "amax", "amin", "prod"])
        cases.append(
            (
                f"drawn {e!r} {red} {d} {keep}",
                lambda x, e=e, r=red, d=d, k=keep: getattr(x.abs() ** e, r)(d, keepdim=k),
            )
        )
    rng.shuffle(cases)
    return cases


def _same(got: torch.Tensor, want: torch.Tensor, label: str) -> None:
    assert got.dtype == want.dtype, (label, got.dtype, want.dtype)
    assert got.shape == want.shape, (label, got.shape, want.shape)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2, equal_nan=True, msg=label)
    if want.is_floating_point():  # -0.0 / inf signs: the sign is part of the value
        zero_or_inf = (want == 0) | want.isinf()
        assert torch.equal(got.signbit()[zero_or_inf], want.signbit()[zero_or_inf]), label


@pytest.mark.slow
def test_randomized_one_attribute_apart_match_eager():
    rng = random.Random(1234)
    torch.manual_seed(0)
    base = torch.randn(3, 3)
    x = base.to(dev)
    cases = _cases(rng)
    assert len(cases) > 120, len(cases)
    for rep in range(2):  # the second pass runs every graph from the in-memory cache
        hits0 = _c("CachedCompile")
        for label, fn in cases if rep == 0 else list(reversed(cases)):
            got = fn(x)
            xl.sync()
            _same(got.cpu(), fn(base), label)
        if rep == 1:
            assert _c("CachedCompile") - hits0 >= len(cases)


def test_compiled_cache_is_a_counted_lru():
    cache = executor.EXECUTABLES
    old = cache.capacity
    x = torch.arange(6.0).to(dev)
    try:
        xl.clear_compiled_cache()
        cache.resize(2)
        ev0 = _c("CompilationCacheEviction")
        for k in (1, 2, 3):
            assert (x * 0 + x**k).cpu()[2].item() == 2.0**k
        assert xl.compiled_cache_size() == 2
        assert _c("CompilationCacheEviction") - ev0 == 1
        # ** 1 was evicted (least recently used): it compiles again and evicts ** 2
        compiles0 = _c("UncachedCompile") + _c("PersistentCacheHit")
        assert (x * 0 + x**1).cpu()[2].item() == 2.0
        assert _c("UncachedCompile") + _c("PersistentCacheHit") - compiles0 == 1
        assert _c("CompilationCacheEviction") - ev0 == 2
        cached0 = _c("CachedCompile")
        assert (x * 0 + x**3).cpu()[2].item() == 8.0  # still there
        assert _c("CachedCompile") - cached0 == 1
        with pytest.raises(ValueError):
            cache.resize(0)
    finally:
        cache.resize(old)


_MAPS_CHILD = """
import json, sys, warnings, torch, xlacache.lazy as xl
from xlacache.lazy import executor, metrics
from xlacache.lazy.executable_cache import memory_maps

def sorted_sums(x):
    for _ in range(4):
        x = (x.softmax(-1) + x.mean(0)).sort(-1).values.cumsum(0).tanh()
    return x.sum(0)

torch.manual_seed(0)
x = torch.randn(16, 16)
xd = x.to(xl.device())
held = memory_maps()
if sys.argv[1] == "bounded":
    executor.EXECUTABLES.set_map_limit(2 * (held + 60))  # a budget of 60 maps more than now
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for k in range(5, 17):  # distinct graphs (one per width) of many kernels: ~40 maps each
        # a sanity check: XLA's default code generation rounds cumsum's partial sums its own
        # way (the numbers are the OpInfo suite's to check)
        torch.testing.assert_close(sorted_sums(xd[:, :k]).cpu(), sorted_sums(x[:, :k]),
                                   rtol=1e-5, atol=1e-5)
print(json.dumps({"held": held, "end": memory_maps(), "graphs": xl.compiled_cache_size(),
                  "evicted": metrics.counter_value("CompilationCacheEviction") or 0,
                  "warned": sum("memory maps" in str(w.message) for w in seen)}))
"""


@pytest.mark.slow
def test_compiled_graphs_are_dropped_before_the_process_runs_out_of_memory_maps():
    """XLA's CPU executables are mapped code: an L-BFGS run (its history grows, so every
    step compiles new graphs) held 20,907 maps after 301 compiles and died at the kernel's
    limit (LLVM: "Cannot allocate memory", then SIGSEGV), below the 1024-graph bound. XLA's
    default code generation (not the suite's loop emitter, whose maps outlive their
    executables) returns an evicted graph's maps."""
    env = {"XLA_FLAGS": ""}
    free = run_json(_MAPS_CHILD, "unbounded", env=env)
    bounded = run_json(_MAPS_CHILD, "bounded", env=env)
    assert free["graphs"] == 12 and free["evicted"] == 0 and free["warned"] == 0
    assert free["end"] > free["held"] + 300  # each graph holds its maps
    assert bounded["warned"] == 1 and bounded["evicted"] > 0 and 1 <= bounded["graphs"] < 12
    assert bounded["end"] < bounded["held"] + 150


def test_the_map_bound_spares_the_newest_graph_and_owns_up_to_maps_it_does_not_hold():
    """Maps that evicting every graph but the newest does not free (something else holds
    them) raise the budget to what is held, so that the next compile does not empty the
    cache again; past three quarters of the limit it keeps evicting."""
    held = memory_maps()
    cache = ExecutableCache(100, map_limit=held * 3 // 2)  # held is over half: evict
    for k in range(40):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cache.put(bytes([k]), Executable(None, 1, ()))
    # the second put evicted the first and found the maps still held: no more evictions
    assert len(cache) >= 30 and cache.map_budget >= held
    tight = ExecutableCache(100, map_limit=held)  # held is past the ceiling
    for k in range(5):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tight.put(bytes([k]), Executable(None, 1, ()))
    assert len(tight) == 1 and tight.get(bytes([4])) is not None  # the newest stays


_CHILD = """
import json, torch, xlacache.lazy as xl
from xlacache.lazy import executor
x = torch.arange(6.0).reshape(2, 3).to(xl.device())
y = ((x ** -2).sum(-1, keepdim=True) * 0.5).to(torch.bfloat16)[-1]
print(json.dumps({"digest": y._v[0].digest.hex(), "capacity": executor.EXECUTABLES.capacity}))
"""


def _child(env: dict[str, str]) -> dict:
    import json

    base = {k: v for k, v in os.environ.items() if k != "XLA_COMPILATION_CACHE_SIZE"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_digests_are_stable_across_processes_and_capacity_from_env():
    x = torch.arange(6.0).reshape(2, 3).to(dev)
    y = ((x**-2).sum(-1, keepdim=True) * 0.5).to(torch.bfloat16)[-1]
    here = y._v[0].digest.hex()
    a = _child({"PYTHONHASHSEED": "1", "XLA_COMPILATION_CACHE_SIZE": "3"})
    b = _child({"PYTHONHASHSEED": "2"})
    assert a["digest"] == b["digest"] == here
    assert a["capacity"] == 3 and b["capacity"] == 1024
