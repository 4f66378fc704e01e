"""``torch_xla.core.xla_model`` (``xm``): the lazy runtime's names, collectives across the
processes of a ``launch`` job."""

from __future__ import annotations

from typing import Any

import xlacache.lazy as _xl
from xlacache.lazy import (
    RateTracker,
    add_step_closure,
    all_gather,
    all_reduce,
    broadcast_master_param,
    is_master_ordinal,
    mark_step,
    master_print,
    mesh_reduce,
    optimizer_step,
    reduce_gradients,
    rendezvous,
    save,
    wait_device_ops,
    xla_device,
)
from xlacache.lazy.distributed.collectives import (
    REDUCE_AND,
    REDUCE_MAX,
    REDUCE_MIN,
    REDUCE_MUL,
    REDUCE_OR,
    REDUCE_SUM,
)

__all__ = [
    "REDUCE_AND",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "REDUCE_MUL",
    "REDUCE_OR",
    "REDUCE_SUM",
    "RateTracker",
    "add_step_closure",
    "all_gather",
    "all_reduce",
    "broadcast_master_param",
    "get_local_ordinal",
    "get_ordinal",
    "get_rng_state",
    "get_xla_supported_devices",
    "is_master_ordinal",
    "is_xla_tensor",
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


def is_xla_tensor(tensor: Any) -> bool:
    """Whether ``tensor`` lives on the xla device."""
    return _xl.is_lazy(tensor)


def xla_device_hw(device: Any) -> str:
    """The hardware kind behind ``device`` (``CPU``, ``TPU``, ``CUDA``)."""
    return _xl.device_type()


def set_rng_state(seed: int, device: Any = None) -> None:
    _xl.set_rng_state(seed)


def get_rng_state(device: Any = None) -> int:
    return _xl.get_rng_state()
