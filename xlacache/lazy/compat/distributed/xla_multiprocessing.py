"""``torch_xla.distributed.xla_multiprocessing`` (``xmp``): one process here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xlacache.lazy import launch

__all__ = ["spawn"]


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> Any:
    """Run ``fn(index, *args)`` per process: ``fn(0, *args)`` in this one."""
    if nprocs not in (None, 1):
        raise NotImplementedError(f"xlacache.lazy runs one process; nprocs={nprocs} asked")
    return launch(fn, args)
