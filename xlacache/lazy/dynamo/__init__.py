"""``torch.compile(model, backend="xlacache")`` for tensors on ``xl.device()`` (docs/compile.md).

The backend is registered under PyTorch's ``torch_dynamo_backends`` entry point group, so
``backend="xlacache"`` works once xlacache is installed; ``backend=xlacache_backend`` works
without installing. ``report()`` says how graphs ran.
"""

from __future__ import annotations

from typing import Any

from ..state import STATE
from .backend import recompile_reasons, sync_dynamo_counters, xlacache_backend

__all__ = ["report", "xlacache_backend"]


def report() -> dict[str, Any]:
    """Compiled graphs, lazy fallbacks and why, graph breaks, recompiles and why."""
    from .. import metrics

    sync_dynamo_counters()
    names = (
        "DynamoGraph",
        "DynamoGraphBreak",
        "DynamoRecompile",
        "CompiledGraph",
        "CompiledGraphFallback",
        "CompiledGraphLowering",
        "CompiledGraphCompile",
        "CompiledGraphAliasHit",
        "CompiledGraphAotHit",
        "CompiledGraphExecute",
        "CompiledGraphLazyRun",
    )
    out: dict[str, Any] = {n: metrics.counter_value(n) or 0 for n in names}
    out["fallback_reasons"] = list(STATE.dynamo_reasons)
    out["recompile_reasons"] = recompile_reasons()
    return out
