"""Worker functions for the SPMD pod tests: ``xl.launch`` jobs of 2 processes, each with
``CPU_NUM_DEVICES=4`` (set by the test), one mesh over the job's 8 devices."""

from __future__ import annotations

import os

import numpy as np
import torch

import xlacache.lazy as xl
from xlacache.lazy.compat import runtime as xr
from xlacache.lazy.compat.distributed import parallel_loader as pl
from xlacache.lazy.compat.distributed import spmd as xs


def _error(fn) -> str | None:
    try:
        fn()
    except (ValueError, RuntimeError) as e:
        return str(e)
    return None


def _leaf(t: torch.Tensor):
    """The device array behind ``t`` (materialized)."""
    xl.sync()
    return t._v[0].data


def api(index: int, saved: str) -> dict:
    """torch_xla's multi-host SPMD names, placement, loading, reads, saving (to ``saved``),
    and the errors."""
    xr.use_spmd()
    dev = xl.device()
    rank = xr.process_index()
    out: dict = {
        "names": [
            xr.global_runtime_device_count(),
            xr.addressable_runtime_device_count(),
            rank,
            xr.process_count(),
        ]
    }
    mesh = xs.Mesh(np.arange(8), (4, 2), ("data", "model"))
    out["mesh"] = [[d.process_index for d in row] for row in mesh.jax_mesh.devices]
    out["no_device"] = _error(lambda: xs.Mesh(np.arange(16), (8, 2)))

    # a value every process holds alike: each places only its own shards of it
    torch.manual_seed(0)
    w = torch.randn(8, 6)
    wd = w.to(dev)
    xs.mark_sharding(wd, mesh, ("data", "model"))
    data = _leaf(wd)
    out["placed"] = [list(data.shape), len(data.addressable_shards), xl.sharding_spec(wd)]
    out["w_ok"] = torch.equal(wd.cpu(), w)  # a read of a sharded value gathers it
    y = (wd @ wd.T).sum(1) * 0.5
    out["y_ok"] = torch.allclose(y.cpu(), (w @ w.T).sum(1) * 0.5, rtol=1e-5, atol=1e-5)
    xl.save({"w": wd, "y": y}, saved)  # every process gathers, the master writes
    c = w.to(dev)
    xs.mark_sharding(c, mesh, ("data", None))
    xs.clear_sharding(c)  # global data placed again: a program every process runs
    out["cleared"] = [
        xl.sharding_spec(c),
        len(_leaf(c).addressable_shards),
        torch.equal(c.cpu(), w),
    ]

    # each process loads its slice of the global batch; or the whole batch
    local = torch.arange(12.0).view(4, 3) + 100 * rank
    spec = xs.ShardingSpec(mesh, ("data", None), minibatch=True)
    (batch,) = list(pl.MpDeviceLoader([local], dev, input_sharding=spec))
    out["minibatch"] = batch.cpu().tolist()
    whole = torch.arange(24.0).view(8, 3)
    spec = xs.ShardingSpec(mesh, ("data", None), minibatch=False)
    (batch,) = list(pl.MpDeviceLoader([whole], dev, input_sharding=spec))
    out["whole_ok"] = torch.equal(batch.cpu(), whole)
    out["whole_shards"] = len(_leaf(batch).addressable_shards)

    # the errors: a value that differs between processes, a graph with a rank-dependent
    # input, a different graph, a read one process skips
    differs = torch.full((8,), float(rank)).to(dev)
    out["differs"] = _error(lambda: xs.mark_sharding(differs, mesh, ("data",)))
    scaled = wd * float(rank + 1)  # the same graph, other scalar inputs
    out["inputs"] = _error(scaled.cpu)
    del scaled
    other = wd * 2 if rank == 0 else wd * 2 + 1
    out["graph"] = _error(other.cpu)
    del other
    pending = wd * 3
    out["skip"] = _error(lambda: wd.cpu()) if rank == 0 else _error(xl.sync)
    xl.sync()  # paired again: both run the step
    out["after_ok"] = torch.equal(pending.cpu(), w * 3)
    if rank == 1:
        return out  # rank 1 leaves: rank 0's next cross-process program is an error
    out["exited"] = _error(lambda: (wd + 1).cpu())
    return out


def killed(index: int, steps_before: int) -> None:
    """Rank 1 kills itself (SIGKILL) in the middle of a sharded training loop."""
    xr.use_spmd()
    dev = xl.device()
    mesh = xs.Mesh(np.arange(8), (8,), ("data",))
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 6).to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    for step in range(1000):
        if step == steps_before and xr.process_index() == 1:
            os.kill(os.getpid(), 9)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        xl.sync()


def embedding_past_vocabulary(index: int) -> dict:
    """An embedding of token ids sharded over the job's mesh, in range, then with an id past
    the vocabulary in process 1's half: what each process read, or the error it raised."""
    xr.use_spmd()
    dev = xl.device()
    mesh = xs.Mesh(np.arange(8), (8,), ("data",))
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 2).to(dev)
    reads: list = []
    for bad in (False, True):
        ids = torch.arange(8)
        if bad:
            ids[6] = 12
        x = ids.to(dev)
        xs.mark_sharding(x, mesh, ("data",))
        try:
            reads.append(round(emb(x).sum().item(), 4))
        except IndexError as e:
            reads.append(type(e).__name__)
    return {"reads": reads}
