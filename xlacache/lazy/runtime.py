"""torch_xla's process-level names, with their single-process meanings.

One process drives one device (``xla:0``): world size 1, ordinal 0, this process is the master,
reductions across processes see one value. The multi-process runtime extends these.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax


def world_size() -> int:
    """``xr.world_size()``: the number of processes taking part (1)."""
    return 1


def global_ordinal() -> int:
    """``xr.global_ordinal()``: this process's rank among all (0)."""
    return 0


def local_ordinal() -> int:
    """``xr.local_ordinal()``: this process's rank on its host (0)."""
    return 0


def device_type() -> str:
    """``xr.device_type()``: the kind of device the graphs run on, as torch_xla names it
    (``CPU``, ``TPU``, ``CUDA``)."""
    platform = jax.devices()[0].platform.upper()
    return "CUDA" if platform in ("GPU", "CUDA", "ROCM") else platform


def is_master_ordinal(local: bool = True) -> bool:
    """``xm.is_master_ordinal()``: whether this process is rank 0 (always, in one process)."""
    return (local_ordinal() if local else global_ordinal()) == 0


def master_print(*args: Any, fd: Any = None, local: bool = False, flush: bool = False) -> None:
    """``xm.master_print``: ``print`` on the master process only."""
    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list], Any]) -> Any:
    """``xm.mesh_reduce``: ``reduce_fn`` over every process's ``data`` (here, one)."""
    return reduce_fn([data])


def rendezvous(tag: str, payload: bytes = b"", replicas: Any = None) -> list[bytes]:
    """``xm.rendezvous``: every process's payload once all arrive (here, this one's)."""
    return [payload]


def broadcast_master_param(model: Any) -> None:
    """``xm.broadcast_master_param``: copy rank 0's parameters everywhere (nothing to do)."""


def launch(
    fn: Callable[..., Any],
    args: tuple = (),
    start_method: str = "spawn",
    debug_single_process: bool = False,
) -> Any:
    """``torch_xla.launch`` / ``xmp.spawn``: run ``fn(index, *args)`` in each process; one
    process here, so ``fn(0, *args)`` in this one."""
    return fn(0, *args)
