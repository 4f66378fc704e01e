"""Child process for test_spmd: runs with 8 CPU devices (`jax_num_cpu_devices`, set below).

``python -m tests.lazy._spmd_child SCENARIO CACHE_DIR`` prints one JSON line. Scenarios:

- ``programs:NAME,...``: small programs (``MESHES``), each in one barrier: unsharded, sharded
  over a 1-D mesh of 8 (data placement and a constraint), over a 2x4 mesh; values, sharding
  specs and counters of each.
- ``api``: torch_xla's names (``xr``, ``xs``), annotation errors, constraints on pending values.
- ``gpt``: a tiny GPT trained a few steps on one device, data-parallel over 8 devices, and
  2-way tensor-parallel x 4-way data-parallel; losses and counters per run.
- ``forged``: a sharded program's alias record altered to other output placements, then the
  program again as in a new process (the alias must miss, the values stay right).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jax

REPO = Path(__file__).resolve().parents[2]
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xlacache  # noqa: E402
import xlacache.lazy as xl  # noqa: E402
from tests.lazy.models import GPT  # noqa: E402

sys.path.insert(0, str(REPO / "examples"))
from spmd_gpt import shard_gpt  # noqa: E402

NAMES = (
    "UncachedCompile",
    "CachedCompile",
    "PersistentCacheHit",
    "PersistentCacheMiss",
    "PersistentCacheAliasHit",
    "ReplicateToMesh",
)


def counters() -> dict[str, int]:
    out = {n: xl.metrics.counter_value(n) or 0 for n in NAMES}
    xl.metrics.clear_counters()
    return out


def lowered() -> int:
    """Graphs lowered since the last call (``LoweringTime`` samples)."""
    data = xl.metrics.metric_data("LoweringTime")
    xl.metrics.clear_metrics()
    return data[0] if data else 0


def program(x: torch.Tensor, w: torch.Tensor, mesh: xl.Mesh | None, spec: tuple) -> dict:
    """One barrier computing relu(x @ w).sum(1), sharded as ``spec`` says."""
    x, w = x.to(xl.device()), w.to(xl.device())
    if mesh is not None:
        xl.mark_sharding(x, mesh, spec[0])
    h = torch.relu(x @ w)
    if mesh is not None:
        xl.mark_sharding(h, mesh, spec[1])
    y = h.sum(1) * 0.5
    xl.sync()
    return {
        "y": y.cpu().tolist(),
        "specs": [xl.sharding_spec(t) for t in (x, h, y)],
        "counters": counters(),
        "lowered": lowered(),
    }


MESHES = {
    "unsharded": (None, ()),
    "mesh8": (((8,), ("data",)), (("data", None), ("data", None))),
    "mesh2x4": (((2, 4), ("data", "model")), (("data", None), ("data", "model"))),
    # both axes of the 2x4 mesh on one dim: x placed as mesh8 places it, h sharded otherwise
    "mesh2x4_joint": (((2, 4), ("data", "model")), ((("data", "model"), None), (0, 1))),
}


def programs(names: list[str]) -> dict:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 8, generator=g), torch.randn(8, 24, generator=g)
    xl.metrics.clear_counters()
    out: dict = {"runs": []}
    for name in names:
        shape, spec = MESHES[name]
        mesh = None if shape is None else xl.Mesh(np.arange(8), *shape)
        out["runs"].append({"name": name, **program(x, w, mesh, spec)})
    out["expected"] = (torch.relu(x @ w).sum(1) * 0.5).tolist()
    return out


def api() -> dict:
    """torch_xla's names (compat) and the errors of bad annotations."""
    from xlacache.lazy.compat import runtime as xr
    from xlacache.lazy.compat.distributed import spmd as xs

    out: dict = {"is_spmd_before": xr.is_spmd()}
    xr.use_spmd()
    out["is_spmd"] = xr.is_spmd()
    out["devices"] = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(8), (2, 4), ("x", "y"))
    out["mesh"] = [mesh.size(), list(mesh.shape().items()), mesh.get_logical_mesh().tolist()]
    errors = {}
    t = torch.ones(4, 8, device=xl.device())
    bad = {
        "rank": lambda: xs.mark_sharding(t, mesh, ("x",)),
        "axis": lambda: xs.mark_sharding(t, mesh, ("z", None)),
        "index": lambda: xs.mark_sharding(t, mesh, (5, None)),
        "twice": lambda: xs.mark_sharding(t, mesh, ("x", "x")),
        "cpu": lambda: xs.mark_sharding(torch.ones(4, 8), mesh, ("x", None)),
        "size": lambda: xs.Mesh(np.arange(8), (3, 3)),
        "ids": lambda: xs.Mesh(np.arange(8) + 4, (8,)),
    }
    for name, fn in bad.items():
        try:
            fn()
            errors[name] = None
        except (ValueError, TypeError) as e:
            errors[name] = str(e)
    out["errors"] = errors
    a = torch.arange(32.0).view(4, 8).to(xl.device())
    xs.mark_sharding(a, mesh, ("x", "y"))
    out["data_spec"] = xl.sharding_spec(a)
    b = a * 2
    xs.mark_sharding(b, mesh, (None, ("x", "y")))  # a pending value: a constraint
    c = b + 1
    xl.sync()
    out["constraint_spec"] = xl.sharding_spec(b)
    out["values"] = [
        b.cpu().tolist(),
        c.cpu().tolist(),
        (torch.arange(32.0).view(4, 8) * 2).tolist(),
    ]
    xs.clear_sharding(a)
    out["cleared_spec"] = xl.sharding_spec(a)
    # batches placed by the loader: a dict of specs by key; a tensor the spec does not fit
    from xlacache.lazy.compat.distributed import parallel_loader as pl

    x, labels = torch.arange(32.0).view(4, 8), torch.arange(4)
    specs = {"x": xs.ShardingSpec(mesh, ("x", None)), "y": xs.ShardingSpec(mesh, ("x", "y"))}
    (batch,) = list(pl.MpDeviceLoader([{"x": x, "y": labels}], xl.device(), input_sharding=specs))
    out["loader"] = [
        xl.sharding_spec(batch["x"]),
        xl.sharding_spec(batch["y"]),  # rank 1: the 2-d spec does not fit, copied unsharded
        torch.equal(batch["x"].cpu(), x) and torch.equal(batch["y"].cpu(), labels),
    ]
    return out


def mixed() -> dict:
    """One-device data (from an unsharded graph: loaded by alias in a warm process, so placed
    on device 0) meeting sharded data in one graph."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(16, 8, generator=g), torch.randn(8, 8, generator=g)
    dev = xl.device()
    a = x.to(dev) * 3.0 + 1.0
    xl.sync()
    leaf = a._v[0]
    placement = [str(leaf.data.sharding), leaf.data.committed]
    if os.environ.get("SPMD_CHILD_COMMIT"):  # no public path makes one: the safety net
        leaf.data = jax.device_put(leaf.data, jax.devices()[0])
    mesh = xl.Mesh(np.arange(8), (8,), ("data",))
    wd = w.to(dev)
    xl.mark_sharding(wd, mesh, (None, "data"))
    y = a @ wd
    xl.sync()
    ok = torch.allclose(y.cpu(), (x * 3.0 + 1.0) @ w, rtol=1e-5, atol=1e-5)
    return {"placement": placement, "ok": ok, "spec": xl.sharding_spec(y), "counters": counters()}


def forged(cache_dir: str) -> dict:
    from xlacache import entry
    from xlacache.stores.local import LocalStore

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 8, generator=g), torch.randn(8, 24, generator=g)
    mesh = xl.Mesh(np.arange(8), (8,), ("data",))
    first = program(x, w, mesh, MESHES["mesh8"][1])
    with LocalStore(cache_dir) as store:
        (key,) = [i.key for i in store.list() if entry.is_alias(store.read_header(i.key))]
        record = json.loads(entry.decode(store.get(key)).payload())
        for placed in record["placements"]["outputs"]:
            placed["spec"] = [None] * len(placed["spec"])  # replicated: not what XLA chose
        store.delete(key)
        payload = json.dumps(record).encode()
        store.put(key, entry.encode(key, payload, compile_seconds=0.0,
                                    context=entry.ALIAS_CONTEXT, label="alias:forged"))  # fmt: skip
    xl.clear_compiled_cache()  # as a new process
    again = program(x, w, mesh, MESHES["mesh8"][1])
    errors = xlacache.stats()["errors"]
    return {"first": first, "again": again, "alias_errors": errors.get("alias", 0)}


def train(mode: str, steps: int = 3) -> dict:
    torch.manual_seed(0)
    dev = xl.device()
    model = GPT(vocab=32, d=16, heads=2, layers=1, seq=8).to(dev)
    mesh = None
    if mode == "dp":
        mesh = xl.Mesh(np.arange(8), (8,), ("data",))
    elif mode == "tp":
        mesh = xl.Mesh(np.arange(8), (4, 2), ("data", "model"))
        shard_gpt(model, mesh)  # the example's Megatron-style tensor parallelism
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, 32, (8, 8), generator=g).to(dev)
        if mesh is not None:
            xl.mark_sharding(idx, mesh, ("data", None))
        opt.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, 32), torch.roll(idx, -1, 1).view(-1))
        loss.backward()
        opt.step()
        xl.sync()
        losses.append(loss.item())
    spec = xl.sharding_spec(model.blocks[0].mlp[0].weight)
    return {"losses": losses, "counters": counters(), "mlp_spec": spec}


def main(scenario: str, cache_dir: str) -> None:
    if cache_dir != "-":
        xlacache.initialize_cache(cache_dir, min_compile_seconds=0)
    assert jax.device_count() == 8, jax.devices()
    if scenario.startswith("programs:"):
        out = programs(scenario.split(":", 1)[1].split(","))
    elif scenario == "mixed":
        out = mixed()
    elif scenario == "api":
        out = api()
    elif scenario == "forged":
        out = forged(cache_dir)
    else:
        out = {mode: train(mode) for mode in ("single", "dp", "tp")}
    out["stats"] = {k: v for k, v in xlacache.stats().items() if isinstance(v, int)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
