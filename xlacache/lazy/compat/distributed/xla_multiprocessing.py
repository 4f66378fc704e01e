"""``torch_xla.distributed.xla_multiprocessing`` (``xmp``): ``spawn`` is ``launch``."""

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
    """Run ``fn(index, *args)`` in ``nprocs`` processes (``xl.launch``)."""
    return launch(fn, args, nprocs=nprocs, start_method=start_method)
