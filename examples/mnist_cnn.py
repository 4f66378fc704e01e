"""Train an MNIST-shaped CNN (synthetic 28x28 digits) with xlacache.lazy.

python examples/mnist_cnn.py                        # in-memory cache only
python examples/mnist_cnn.py --cache /tmp/xla_cache # persistent: the 2nd run compiles nothing
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import xlacache
import xlacache.lazy as xl


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.bn1(self.conv1(x)), 2))
        x = F.relu(F.max_pool2d(self.bn2(self.conv2(x)), 2))
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.1, self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(n: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Class k is a noisy bright square at a k-dependent position: learnable in a few steps."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    for i, k in enumerate(y.tolist()):
        r, c = 2 + (k // 5) * 12, 2 + (k % 5) * 5
        x[i, 0, r : r + 8, c : c + 4] += 2.0
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--samples", type=int, default=64 * 20)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--cache", default=None)
    args = ap.parse_args()
    if args.cache:
        xlacache.initialize_cache(args.cache)
    torch.manual_seed(0)
    dev = xl.device()
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = synthetic_mnist(args.samples, args.batch)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for step, (x, y) in enumerate(xl.MpDeviceLoader(loader, dev)):
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()  # MpDeviceLoader syncs after each step
            if step % 5 == 0:
                print(f"epoch {epoch} step {step:3d} loss {loss.item():.4f}")
    model.eval()
    correct = 0
    for x, y in xl.MpDeviceLoader(loader, dev):
        correct += (model(x).argmax(1) == y).sum().item()
    print(f"train accuracy {correct / args.samples:.3f}  time {time.perf_counter() - t0:.1f}s")
    m = xl.metrics
    print(
        f"compiles {m.counter_value('UncachedCompile') or 0}, "
        f"persistent hits {m.counter_value('PersistentCacheHit') or 0}, "
        f"in-memory hits {m.counter_value('CachedCompile') or 0}"
    )


if __name__ == "__main__":
    main()
