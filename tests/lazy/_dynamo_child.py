"""Child process for test_compile: a model trained through torch.compile(backend="xlacache")
with the persistent cache; prints its losses and the compile counters as JSON."""

from __future__ import annotations

import json
import sys

import torch

import xlacache
import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc
from tests.lazy.models import MLP


def main(cache_dir: str) -> None:
    xlacache.initialize_cache(cache_dir, min_compile_seconds=0)
    torch.manual_seed(0)
    dev = xl.device()
    model = MLP().to(dev)
    step_fn = torch.compile(model, backend="xlacache")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step)).to(dev)
        loss = step_fn(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        xl.sync()
        losses.append(loss.item())
    print(json.dumps({"losses": losses, "report": {k: v for k, v in xc.report().items()}}))


if __name__ == "__main__":
    main(sys.argv[1])
