"""Data-parallel MNIST-shaped CNN over several processes (torch_xla's test_train_mp_mnist.py
shape): ``xl.launch`` + ``DistributedSampler`` + ``MpDeviceLoader`` + ``xl.optimizer_step``.

python examples/mp_mnist.py --nprocs 2                          # two processes, one job
python examples/mp_mnist.py --nprocs 2 --cache /tmp/mp_cache    # run twice: the 2nd compiles 0

Each process trains on its own shard of every epoch: ``MpDeviceLoader`` only moves batches to
the device (it shards nothing), so the ``DataLoader`` takes a ``DistributedSampler`` with
``num_replicas=xl.world_size()`` and ``rank=xl.global_ordinal()``. ``xl.optimizer_step``
averages the gradients over the processes inside the step's compiled program, so every
replica applies the same update. With ``--cache`` rank 0 writes the executables and the other
ranks load them (a pod compiles each program once); a second run loads everything.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from mnist_cnn import Net, synthetic_mnist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import xlacache
import xlacache.lazy as xl


def _mp_fn(index: int, args: argparse.Namespace) -> None:
    if args.cache:
        xlacache.initialize_cache(args.cache)  # rank 0 writes, the others read
    torch.manual_seed(0)  # the same initial weights on every replica
    dev = xl.device()
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * xl.world_size(), momentum=0.9)
    pairs = synthetic_mnist(args.samples, args.samples)[0]
    dataset = TensorDataset(*pairs)
    sampler = DistributedSampler(
        dataset, num_replicas=xl.world_size(), rank=xl.global_ordinal(), shuffle=True, seed=0
    )
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, drop_last=True)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every process
        model.train()
        for step, (x, y) in enumerate(xl.MpDeviceLoader(loader, dev)):
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            xl.optimizer_step(opt)  # all-reduce (average) the gradients, then step
            if step % 5 == 0:  # MpDeviceLoader synced the last step: rank 0's loss is data
                xl.add_step_closure(
                    lambda s, v, e=epoch: xl.master_print(f"epoch {e} step {s:3d} loss {v:.4f}"),
                    (step, loss.detach()),
                )
    model.eval()
    correct = torch.zeros((), device=dev)
    for x, y in xl.MpDeviceLoader(loader, dev):
        correct += (model(x).argmax(1) == y).sum()
    correct = xl.all_reduce("sum", correct).item()
    seen = len(loader) * args.batch * xl.world_size()
    m = xl.metrics
    counts = (m.counter_value("UncachedCompile") or 0, m.counter_value("PersistentCacheHit") or 0)
    per_rank = xl.mesh_reduce("counts", counts, list)
    xl.master_print(
        f"{xl.world_size()} processes: train accuracy {correct / seen:.3f}, "
        f"{time.perf_counter() - t0:.1f}s\n"
        f"compiles per rank {[c for c, _ in per_rank]} (pod total {sum(c for c, _ in per_rank)}), "
        f"loaded from cache per rank {[h for _, h in per_rank]}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per process")
    ap.add_argument("--samples", type=int, default=64 * 10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--cache", default=None)
    args = ap.parse_args()
    xl.launch(_mp_fn, args=(args,), nprocs=args.nprocs)


if __name__ == "__main__":
    main()
