"""``torch_xla.runtime`` (``xr``): one device per process, ``world_size()`` processes."""

from __future__ import annotations

import os

import xlacache
from xlacache.lazy import device_type, global_ordinal, local_ordinal, world_size
from xlacache.lazy.spmd import mesh as _spmd

__all__ = [
    "addressable_device_count",
    "addressable_runtime_device_count",
    "device_type",
    "global_device_count",
    "global_ordinal",
    "global_runtime_device_count",
    "initialize_cache",
    "is_spmd",
    "local_device_count",
    "local_ordinal",
    "process_count",
    "process_index",
    "use_spmd",
    "using_pjrt",
    "world_size",
]


def process_index() -> int:
    return global_ordinal()


def process_count() -> int:
    return world_size()


def global_device_count() -> int:
    return world_size()


def local_device_count() -> int:
    return 1


def addressable_device_count() -> int:
    return 1


def global_runtime_device_count() -> int:
    """The devices SPMD can shard over (all of this process's: ``jax.devices()``)."""
    return _spmd.device_count()


def addressable_runtime_device_count() -> int:
    return _spmd.device_count()


def using_pjrt() -> bool:
    return True


is_spmd = _spmd.is_spmd
use_spmd = _spmd.use_spmd


def initialize_cache(path: str | os.PathLike, readonly: bool = False) -> None:
    """``xr.initialize_cache``: xlacache's persistent cache at ``path``."""
    xlacache.initialize_cache(path, readonly)
