"""``torch_xla.core.xla_model`` (``xm``) with single-process meanings."""

from __future__ import annotations

from typing import Any

import torch

import xlacache.lazy as _xl
from xlacache.lazy import (
    RateTracker,
    add_step_closure,
    broadcast_master_param,
    is_master_ordinal,
    mark_step,
    master_print,
    mesh_reduce,
    optimizer_step,
    rendezvous,
    save,
    wait_device_ops,
    xla_device,
)

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

__all__ = [
    "REDUCE_AND",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_MUL",
    "REDUCE_OR",
    "REDUCE_SUM",
    "RateTracker",
    "add_step_closure",
    "all_reduce",
    "broadcast_master_param",
    "get_local_ordinal",
    "get_ordinal",
    "get_rng_state",
    "get_xla_supported_devices",
    "is_master_ordinal",
    "mark_step",
    "master_print",
    "mesh_reduce",
    "optimizer_step",
    "reduce_gradients",
    "rendezvous",
    "save",
    "set_rng_state",
    "wait_device_ops",
    "xla_device",
    "xla_device_hw",
    "xrt_world_size",
]


def get_ordinal(defval: int = 0) -> int:
    return _xl.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    return _xl.local_ordinal()


def xrt_world_size(defval: int = 1) -> int:
    return _xl.world_size()


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list:
    return [str(_xl.device())]


def xla_device_hw(device: Any) -> str:
    """The hardware kind behind ``device`` (``CPU``, ``TPU``, ``CUDA``)."""
    return _xl.device_type()


def set_rng_state(seed: int, device: Any = None) -> None:
    _xl.set_rng_state(seed)


def get_rng_state(device: Any = None) -> int:
    return _xl.get_rng_state()


def all_reduce(
    reduce_type: str, inputs: Any, scale: float = 1.0, groups: Any = None, pin_layout: bool = True
) -> Any:
    """Reduce across processes; with one process every reduction of one value is the value
    (times ``scale``). A list of tensors is updated in place, as in torch_xla."""
    if reduce_type not in (REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX):
        raise ValueError(f"unknown reduce type {reduce_type!r}")
    if isinstance(inputs, torch.Tensor):
        return inputs * scale if scale != 1.0 else inputs.clone()
    if scale != 1.0:
        with torch.no_grad():
            for t in inputs:
                t.mul_(scale)
    return inputs


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Any = None, pin_layout: bool = True):
    """All-reduce the gradients across processes: nothing to do with one."""
