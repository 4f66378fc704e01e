"""Worker functions for ``xl.launch`` in tests (importable by the spawned workers)."""

from __future__ import annotations

import os
import time

import torch

import xlacache
import xlacache.lazy as xl


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batches(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(batch, 6, generator=g), torch.randn(batch, 3, generator=g))
        for _ in range(steps)
    ]


def train(index: int, steps: int, batch: int, cache: str | None = None) -> dict:
    """Train ``tiny_model`` with SGD+momentum on this rank's slice of each global batch;
    the global loss (mean over the ranks' losses) per step and the final parameters."""
    if cache:
        xlacache.initialize_cache(cache, min_compile_seconds=0)
    dev = xl.device()
    world, rank = xl.world_size(), xl.global_ordinal()
    model = tiny_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    per = batch // world
    losses = []
    for x, y in batches(steps, batch):
        x, y = x[rank * per : (rank + 1) * per].to(dev), y[rank * per : (rank + 1) * per].to(dev)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        xl.optimizer_step(opt)
        xl.sync()
        losses.append(xl.all_reduce("sum", loss.detach(), scale=1.0 / world))
    xl.sync()
    return {
        "rank": rank,
        "world": world,
        "losses": [float(v.item()) for v in losses],
        "params": {k: v.cpu() for k, v in model.state_dict().items()},
        "counters": {
            k: xl.metrics.counter_value(k) or 0 for k in ("UncachedCompile", "PersistentCacheHit")
        },
        "stats": xlacache.stats() if cache else None,
    }


def collectives(index: int) -> dict:
    dev = xl.device()
    r = xl.global_ordinal()
    t = torch.tensor([r + 1.0, 2.0 * r], device=dev)
    out = {
        "sum": xl.all_reduce("sum", t).cpu().tolist(),
        "max": xl.all_reduce("max", t).cpu().tolist(),
        "min": xl.all_reduce("min", t, scale=2.0).cpu().tolist(),
        "mul": xl.all_reduce("mul", t).cpu().tolist(),
        "gather": xl.all_gather(t.view(1, 2)).cpu().tolist(),
        "mesh": xl.mesh_reduce("m", r * 10, sum),
        "rdv": [p.decode() for p in xl.rendezvous("hello", f"r{r}".encode())],
    }
    ts = [torch.tensor([float(r)] * 2, device=dev), torch.ones(3, device=dev)]
    xl.all_reduce("sum", ts)
    out["list"] = [t.cpu().tolist() for t in ts]
    out["scalar"] = xl.all_reduce("sum", torch.tensor(float(r), device=dev)).item()
    out["flag"] = xl.all_reduce("or", torch.tensor([r == 1], device=dev)).cpu().tolist()
    out["names"] = (
        xl.world_size(),
        xl.global_ordinal(),
        xl.local_ordinal(),
        xl.is_master_ordinal(),
    )
    return out


def raise_on_rank_1(index: int) -> None:
    if xl.global_ordinal() == 1:
        raise ValueError("boom on purpose")
    xl.rendezvous("never")  # rank 0 waits for rank 1, which never comes


def killed_mid_run(index: int, marker: str) -> None:
    """Rank 1 kills itself (SIGKILL) after two steps; the others keep training."""
    dev = xl.device()
    model = tiny_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 6).to(dev)
    for step in range(10_000):
        if step == 2 and xl.global_ordinal() == 1:
            os.kill(os.getpid(), 9)
        opt.zero_grad()
        model(x).sum().backward()
        xl.optimizer_step(opt)
        xl.sync()
        if step == 2:
            open(marker + str(xl.global_ordinal()), "w").close()
        time.sleep(0.01)


def names(index: int) -> tuple[int, int, int, int]:
    return (index, xl.world_size(), xl.global_ordinal(), int(xl.is_master_ordinal()))


def rank_dependent_constant(index: int) -> None:
    """Each rank bakes its own rank into the graph (a constant fill: the ints 0 and 1 are
    constants, as in torch_xla; other numbers are graph inputs): different programs."""
    t = torch.full((2,), xl.global_ordinal(), dtype=torch.float32, device=xl.device())
    xl.all_reduce("sum", t).cpu()


def evicting(index: int, rounds: int) -> dict:
    """Two graphs with collectives, alternately; rank 0 keeps one compiled graph in memory
    (it compiles again each time, rank 1 hits its in-memory cache)."""
    from xlacache.lazy.executor import EXECUTABLES

    if xl.global_ordinal() == 0:
        EXECUTABLES.resize(1)
    dev = xl.device()
    t = (torch.arange(3.0) + xl.global_ordinal()).to(dev)  # data: the same graph everywhere
    sums, gathers = [], []
    for _ in range(rounds):
        sums.append(xl.all_reduce("sum", t * 2).cpu().tolist())
        gathers.append(xl.all_gather(t.view(1, 3)).cpu().tolist())
    return {
        "sums": sums,
        "gathers": gathers,
        "evictions": xl.metrics.counter_value("CompilationCacheEviction") or 0,
        "compiles": xl.metrics.counter_value("UncachedCompile") or 0,
    }


def grouped(index: int) -> dict:
    """Collectives within replica groups [[0, 2], [1, 3]] of a 4-process job."""
    dev = xl.device()
    r = xl.global_ordinal()
    t = torch.tensor([r + 1.0, 10.0 * r], device=dev)
    groups = [[0, 2], [1, 3]]
    out = {
        "sum": xl.all_reduce("sum", t, groups=groups).cpu().tolist(),
        "max": xl.all_reduce("max", t, scale=0.5, groups=groups).cpu().tolist(),
        "gather": xl.all_gather(t.view(1, 2), groups=[[2, 0], [3, 1]]).cpu().tolist(),
        "all": xl.all_reduce("sum", t, groups=[[0, 1, 2, 3]]).cpu().tolist(),
    }
    try:
        xl.all_reduce("sum", t, groups=[[0, 1], [2]])
    except ValueError as e:
        out["bad"] = str(e)
    return out


def embedding_past_vocabulary_on_rank_1(index: int) -> dict:
    """Each rank embeds its token ids and all-reduces the sum (one program with a collective);
    rank 1's second batch has a token id past the vocabulary. What each rank read or raised."""
    dev = xl.device()
    rank = xl.global_ordinal()
    emb = torch.nn.Embedding(10, 2).to(dev)
    out = []
    for step in range(2):
        ids = torch.tensor([1, 12 if step == 1 and rank == 1 else 2])
        total = xl.all_reduce("sum", emb(ids.to(dev)).sum().detach())
        try:
            out.append(round(total.item(), 4))
        except IndexError as e:
            out.append(type(e).__name__)
    return {"rank": rank, "reads": out}
