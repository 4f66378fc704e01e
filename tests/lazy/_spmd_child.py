"""Child process for test_spmd: runs with 8 CPU devices (XLA_FLAGS set by the test).

``python -m tests.lazy._spmd_child SCENARIO CACHE_DIR`` prints one JSON line. Scenarios:

- ``programs``: small programs, each in one barrier: unsharded, sharded over a 1-D mesh of 8
  (data placement and a constraint), over a 2x4 mesh; values, sharding specs and counters.
- ``gpt``: a tiny GPT trained a few steps on one device, data-parallel over 8 devices, and
  2-way tensor-parallel x 4-way data-parallel; losses and counters per run.
"""

from __future__ import annotations

import json
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xlacache  # noqa: E402
import xlacache.lazy as xl  # noqa: E402
from tests.lazy.models import GPT  # noqa: E402

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
    }


def programs() -> dict:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 8, generator=g), torch.randn(8, 24, generator=g)
    xl.metrics.clear_counters()
    out = {"unsharded": program(x, w, None, ())}
    out["unsharded_again"] = program(x, w, None, ())
    mesh8 = xl.Mesh(np.arange(8), (8,), ("data",))
    out["mesh8"] = program(x, w, mesh8, (("data", None), ("data", None)))
    out["mesh8_again"] = program(x, w, mesh8, (("data", None), ("data", None)))
    mesh24 = xl.Mesh(np.arange(8), (2, 4), ("data", "model"))
    out["mesh2x4"] = program(x, w, mesh24, (("data", None), ("data", "model")))
    # both axes on one dim: the same devices as mesh8's, in a 2x4 mesh
    out["mesh2x4_joint"] = program(x, w, mesh24, ((("data", "model"), None), (0, 1)))
    out["unsharded_after"] = program(x, w, None, ())
    out["expected"] = (torch.relu(x @ w).sum(1) * 0.5).tolist()
    return out


def train(mode: str, steps: int = 3) -> dict:
    torch.manual_seed(0)
    dev = xl.device()
    model = GPT(vocab=64, d=32, heads=4, layers=2, seq=16).to(dev)
    mesh = None
    if mode == "dp":
        mesh = xl.Mesh(np.arange(8), (8,), ("data",))
    elif mode == "tp":
        mesh = xl.Mesh(np.arange(8), (4, 2), ("data", "model"))
        for blk in model.blocks:  # Megatron-style: column-parallel in, row-parallel out
            xl.mark_sharding(blk.qkv.weight, mesh, ("model", None))
            xl.mark_sharding(blk.qkv.bias, mesh, ("model",))
            xl.mark_sharding(blk.proj.weight, mesh, (None, "model"))
            xl.mark_sharding(blk.mlp[0].weight, mesh, ("model", None))
            xl.mark_sharding(blk.mlp[0].bias, mesh, ("model",))
            xl.mark_sharding(blk.mlp[2].weight, mesh, (None, "model"))
        xl.mark_sharding(model.head.weight, mesh, ("model", None))  # tied to the embedding
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, 64, (8, 16), generator=g).to(dev)
        if mesh is not None:
            xl.mark_sharding(idx, mesh, ("data", None))
        opt.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, 64), torch.roll(idx, -1, 1).view(-1))
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
    if scenario == "programs":
        out = programs()
    else:
        out = {mode: train(mode) for mode in ("single", "dp", "tp")}
    out["stats"] = {k: v for k, v in xlacache.stats().items() if isinstance(v, int)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
