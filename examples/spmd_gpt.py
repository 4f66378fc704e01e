"""Train examples/gpt.py's GPT with SPMD sharding over 8 CPU devices, through the cache.

python examples/spmd_gpt.py                    # 2-way tensor x 4-way data parallel
python examples/spmd_gpt.py --mesh dp          # 8-way data parallel
python examples/spmd_gpt.py --mesh none        # one device, for comparison
python examples/spmd_gpt.py                    # again: the warm start (compiles 0 graphs)

One program per step shape compiles for all 8 devices (XLA's SPMD partitioner). The second
run of the same command finds every program in the cache (``--cache``, default
/tmp/xlacache_spmd_example): it prints ``compiled 0`` and the same losses.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax

# the device count is fixed when JAX's backend starts: before the first device use
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT  # noqa: E402

import xlacache  # noqa: E402
import xlacache.lazy as xl  # noqa: E402


def shard_gpt(model: GPT, mesh: xl.Mesh) -> None:
    """Megatron-style tensor parallelism over the mesh's ``model`` axis: attention's qkv and
    the MLP's first linear are split by output features, their second halves (proj, the MLP's
    last linear) by input features; the tied embedding/head by vocabulary."""
    for blk in model.blocks:
        xl.mark_sharding(blk.qkv.weight, mesh, ("model", None))
        xl.mark_sharding(blk.qkv.bias, mesh, ("model",))
        xl.mark_sharding(blk.proj.weight, mesh, (None, "model"))
        xl.mark_sharding(blk.mlp[0].weight, mesh, ("model", None))
        xl.mark_sharding(blk.mlp[0].bias, mesh, ("model",))
        xl.mark_sharding(blk.mlp[2].weight, mesh, (None, "model"))
    xl.mark_sharding(model.head.weight, mesh, ("model", None))


def make_mesh(kind: str) -> xl.Mesh | None:
    n = jax.device_count()
    if kind == "dp":
        return xl.Mesh(np.arange(n), (n,), ("data",))
    if kind == "tp":
        return xl.Mesh(np.arange(n), (n // 2, 2), ("data", "model"))
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mesh", choices=("tp", "dp", "none"), default="tp")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--cache", default="/tmp/xlacache_spmd_example")
    ap.add_argument("--json", action="store_true", help="print one JSON line of results")
    args = ap.parse_args()

    t0 = time.perf_counter()
    xlacache.initialize_cache(args.cache)
    dev = xl.device()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d, args.heads, args.layers, args.seq, 0.0).to(dev)
    mesh = make_mesh(args.mesh)
    if args.mesh == "tp":
        shard_gpt(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1))
    losses = []
    for step in range(args.steps):
        batch = data[step].to(dev)
        if mesh is not None:
            xl.mark_sharding(batch, mesh, ("data", None))  # each device gets batch/data rows
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        xl.sync()
        losses.append(loss.item())
        if not args.json:
            print(f"step {step}  loss {losses[-1]:.5f}")
    m = xl.metrics
    result = {
        "mesh": args.mesh,
        "devices": jax.device_count(),
        "losses": losses,
        "compiled": m.counter_value("UncachedCompile") or 0,
        "loaded_from_cache": m.counter_value("PersistentCacheHit") or 0,
        "compile_s": ((m.metric_data("CompileTime") or (0, 0))[1]) / 1e9,
        "lowering_s": ((m.metric_data("LoweringTime") or (0, 0))[1]) / 1e9,
        "total_s": time.perf_counter() - t0,
        "qkv_sharding": xl.sharding_spec(model.blocks[0].qkv.weight),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.mesh}: compiled {result['compiled']} graphs, loaded "
            f"{result['loaded_from_cache']} from {args.cache}, {result['total_s']:.1f} s "
            f"(qkv weight sharding {result['qkv_sharding'] or 'one device'})"
        )


if __name__ == "__main__":
    main()
