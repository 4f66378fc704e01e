"""torch_xla's process-level names: world size, ordinals, the master process, ``launch``.

Each process drives one device (``xla:0``). Outside a job started by ``launch`` (or torchrun
plus ``launch``) a process is alone: world size 1, ordinal 0, the master. Inside one, these
describe its place in the job (``distributed/``).
"""

from __future__ import annotations

import sys
from typing import Any

import jax

from .distributed import env
from .distributed.launch import launch
from .distributed.rendezvous import mesh_reduce, rendezvous

__all__ = [
    "broadcast_master_param",
    "device_type",
    "global_ordinal",
    "is_master_ordinal",
    "launch",
    "local_ordinal",
    "master_print",
    "mesh_reduce",
    "rendezvous",
    "world_size",
]


def world_size() -> int:
    """``xr.world_size()``: the number of processes taking part."""
    return env.current().world


def global_ordinal() -> int:
    """``xr.global_ordinal()``: this process's rank among all."""
    return env.current().rank


def local_ordinal() -> int:
    """``xr.local_ordinal()``: this process's rank on its host."""
    return env.current().local_rank


def device_type() -> str:
    """``xr.device_type()``: the kind of device the graphs run on, as torch_xla names it
    (``CPU``, ``TPU``, ``CUDA``)."""
    platform = jax.devices()[0].platform.upper()
    return "CUDA" if platform in ("GPU", "CUDA", "ROCM") else platform


def is_master_ordinal(local: bool = True) -> bool:
    """``xm.is_master_ordinal()``: whether this process is rank 0 (of its host with
    ``local``, else of the job)."""
    return (local_ordinal() if local else global_ordinal()) == 0


def master_print(*args: Any, fd: Any = None, local: bool = False, flush: bool = False) -> None:
    """``xm.master_print``: ``print`` on the master process only."""
    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def broadcast_master_param(model: Any) -> None:
    """``xm.broadcast_master_param``: copy rank 0's parameters and buffers to every process."""
    if world_size() == 1:
        return
    import torch

    from .distributed.collectives import all_reduce

    tensors = [*model.parameters(), *model.buffers()]
    with torch.no_grad():
        if not is_master_ordinal(local=False):
            for t in tensors:
                t.zero_()
        flags = [t for t in tensors if t.dtype == torch.bool]
        all_reduce("sum", [t for t in tensors if t.dtype != torch.bool])
        all_reduce("or", flags)
