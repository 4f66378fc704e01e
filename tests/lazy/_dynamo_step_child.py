"""Child process for test_dynamo_step: with the persistent cache in a directory, either a whole
train step compiled (forward, backward, AdamW) for three steps, then a function of two views
of one tensor (``step``), or one compiled
function called with float32 and float64 inputs (``dtypes``); prints the losses or results,
the compile report and the cache's alias figures as JSON."""

from __future__ import annotations

import json
import sys

import torch

import xlacache
import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc
from tests.lazy.models import MLP
from xlacache.lazy import metrics


def train_step() -> list[float]:
    torch.manual_seed(0)
    dev = xl.device()
    model = MLP().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    @torch.compile(backend="xlacache")
    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    @torch.compile(backend="xlacache")
    def pairs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b).sum()  # two views of one tensor, nothing updated: compiled

    losses = []
    for i in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(i)).to(dev)
        loss = step(x)
        xl.sync()
        losses.append(loss.item())
    losses.append(pairs(x[:, :-1], x[:, 1:]).item())
    return losses


def dtypes() -> list[float]:
    @torch.compile(backend="xlacache")
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).sin().sum()

    base = torch.linspace(0.1, 1.3, 12).reshape(3, 4)
    return [f(base.to(dt).to(xl.device())).item() for dt in (torch.float32, torch.float64)]


def main(mode: str, cache_dir: str) -> None:
    xlacache.initialize_cache(cache_dir, min_compile_seconds=0)
    parts = {"step": train_step, "dtypes": dtypes}
    values = [v for part in mode.split(",") for v in parts[part]()]
    stats = xlacache.stats()
    print(
        json.dumps(
            {
                "values": values,
                "report": {k: v for k, v in xc.report().items() if not isinstance(v, list)},
                "xla_compiles": metrics.counter_value("UncachedCompile") or 0,
                "alias_hits": stats["alias_hits"],
                "alias_misses": stats["alias_misses"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
