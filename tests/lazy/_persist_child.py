"""Child process for test_persistent: trains a small transformer with the xlacache cache."""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

import xlacache
import xlacache.lazy as xl
from tests.lazy.models import GPT


def main(cache_dir: str) -> None:
    xlacache.initialize_cache(cache_dir, min_compile_seconds=0)
    torch.manual_seed(0)
    dev = xl.device()
    model = GPT(dropout=0.1).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for step in range(4):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, 64, (2, 16), generator=g).to(dev)
        opt.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, 64), torch.roll(idx, -1, 1).view(-1))
        loss.backward()
        opt.step()
        xl.sync()
        losses.append(loss.item())
    names = ["UncachedCompile", "CachedCompile", "PersistentCacheHit", "PersistentCacheMiss"]
    counters = {n: xl.metrics.counter_value(n) or 0 for n in names}
    print(json.dumps({"losses": losses, "counters": counters}))


if __name__ == "__main__":
    main(sys.argv[1])
