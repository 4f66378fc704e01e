"""Train examples/gpt.py's GPT with SPMD sharding over 8 CPU devices, through the cache.

python examples/spmd_gpt.py                    # 2-way tensor x 4-way data parallel
python examples/spmd_gpt.py --mesh dp          # 8-way data parallel
python examples/spmd_gpt.py --mesh none        # one device, for comparison
python examples/spmd_gpt.py                    # again: the warm start (compiles 0 graphs)
python examples/spmd_gpt.py --procs 2          # a pod: 2 processes x 4 devices, one mesh
CPU_NUM_DEVICES=4 torchrun --nproc_per_node 2 examples/spmd_gpt.py   # the same pod, torchrun

One program per step shape compiles for all 8 devices (XLA's SPMD partitioner). With
``--procs 2`` the mesh spans two processes (``xl.launch``, ``CPU_NUM_DEVICES=4`` each): each
process loads its half of every global batch (``MpDeviceLoader(..., input_sharding=
xl.ShardingSpec(mesh, ("data", None), minibatch=True))``), every step is one program run by
both, rank 0 compiles it and rank 1 loads rank 0's executable. The second run of the same
command finds every program in the cache (``--cache``, default /tmp/xlacache_spmd_example):
it prints ``compiled 0`` and the same losses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch._dynamo  # noqa: F401 - torch imports these on the first optimizer and the first
import torch.distributed.tensor  # noqa: F401 - device copy (~2 s): here, not in the timings
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT  # noqa: E402

import xlacache  # noqa: E402
import xlacache.lazy as xl  # noqa: E402
from xlacache.lazy.compat import runtime as xr  # noqa: E402


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
    """A mesh over every device of the job (of every process)."""
    if kind == "none":
        return None
    n = xr.global_runtime_device_count()
    if kind == "dp":
        return xl.Mesh(np.arange(n), (n,), ("data",))
    return xl.Mesh(np.arange(n), (n // 2, 2), ("data", "model"))


def global_batches(args: argparse.Namespace) -> torch.Tensor:
    """Every step's global batch of tokens, the same in every process: ``(steps, batch,
    seq + 1)``."""
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1), generator=g)


def train(index: int, args: argparse.Namespace) -> dict:
    """One process of the job (or the only one): train, and return what it saw."""
    t0 = time.perf_counter()
    if args.cache:
        xlacache.initialize_cache(args.cache, min_compile_seconds=0)  # rank 0 writes
    if args.mesh != "none":
        xr.use_spmd()  # joins the job's mesh (every process's devices)
    dev = xl.device()
    torch.manual_seed(0)  # the same initial weights in every process
    model = GPT(args.vocab, args.d, args.heads, args.layers, args.seq, 0.0).to(dev)
    mesh = make_mesh(args.mesh)
    if args.mesh == "tp":
        shard_gpt(model, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    procs, rank = xr.process_count(), xr.process_index()
    data = global_batches(args)
    per = args.batch // procs  # each process loads its slice of every global batch
    local = [data[s, rank * per : (rank + 1) * per] for s in range(args.steps)]
    spec = None if mesh is None else xl.ShardingSpec(mesh, ("data", None), minibatch=True)
    losses, first_step_s = [], None
    for step, batch in enumerate(xl.MpDeviceLoader(local, dev, input_sharding=spec)):
        if step == 1:  # the loader synced step 0: its loss is data (replicated: a local read)
            losses[0] = losses[0].item()
            first_step_s = time.perf_counter() - t0
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = [v if isinstance(v, float) else v.item() for v in losses]
    if first_step_s is None:
        first_step_s = time.perf_counter() - t0
    train_s = time.perf_counter() - t0
    params = None
    if args.params:  # reading a sharded value back gathers it: every process reads
        params = {k: v.cpu() for k, v in model.state_dict().items()}
    m = xl.metrics
    result = {
        "rank": rank,
        "procs": procs,
        "devices": xr.global_runtime_device_count(),
        "mesh": args.mesh,
        "losses": losses,
        "compiled": m.counter_value("UncachedCompile") or 0,
        "loaded_from_cache": m.counter_value("PersistentCacheHit") or 0,
        "loaded_by_alias": m.counter_value("PersistentCacheAliasHit") or 0,
        "lowered": (m.metric_data("LoweringTime") or (0, 0))[0],
        "compile_s": ((m.metric_data("CompileTime") or (0, 0))[1]) / 1e9,
        "lowering_s": ((m.metric_data("LoweringTime") or (0, 0))[1]) / 1e9,
        "first_step_s": first_step_s,
        "total_s": train_s,
        "qkv_sharding": xl.sharding_spec(model.blocks[0].qkv.weight),
        "cache": {k: v for k, v in xlacache.stats().items() if isinstance(v, int)},
    }
    if params is not None:
        result["params"] = params
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mesh", choices=("tp", "dp", "none"), default="tp")
    ap.add_argument("--procs", type=int, default=1, help="processes (xl.launch)")
    ap.add_argument("--devices", type=int, default=8, help="CPU devices in all")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", "--d", dest="d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8, help="global batch")
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--cache", default="/tmp/xlacache_spmd_example")
    ap.add_argument("--json", action="store_true", help="print one JSON line of results")
    ap.add_argument("--params", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main() -> None:
    args = parse()
    if args.devices % args.procs:
        raise SystemExit(f"--devices {args.devices} is not a multiple of --procs {args.procs}")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun: one worker of its job
        mine = train(0, args)  # use_spmd() joins the job torchrun describes
        ranks = xl.mesh_reduce("results", mine, list)
        if mine["rank"] != 0:
            return
    elif args.procs > 1:
        os.environ["CPU_NUM_DEVICES"] = str(args.devices // args.procs)  # every worker's
        ranks = xl.launch(train, args=(args,), nprocs=args.procs)
    else:
        import jax

        jax.config.update("jax_num_cpu_devices", args.devices)  # before the first device use
        ranks = [train(0, args)]
    result = {**ranks[0], "compiled_per_rank": [r["compiled"] for r in ranks]}
    result["writes_per_rank"] = [r["cache"].get("writes", 0) for r in ranks]
    if args.json:
        print(json.dumps(result))
        return
    for step, loss in enumerate(result["losses"]):
        print(f"step {step}  loss {loss:.5f}")
    print(
        f"{args.mesh} over {result['devices']} devices in {result['procs']} process(es): compiled "
        f"{result['compiled']} graphs (per rank {result['compiled_per_rank']}), loaded "
        f"{result['loaded_from_cache']} from {args.cache}, first step "
        f"{result['first_step_s']:.1f} s, {result['total_s']:.1f} s "
        f"(qkv weight sharding {result['qkv_sharding'] or 'one device'})"
    )


if __name__ == "__main__":
    main()
