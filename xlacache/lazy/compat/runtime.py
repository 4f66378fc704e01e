"""``torch_xla.runtime`` (``xr``): one device per process, ``world_size()`` processes; with
SPMD, a mesh over every device of every process (``global_runtime_device_count``)."""

from __future__ import annotations

import os

import xlacache
from xlacache.lazy import device_type, global_ordinal, local_ordinal, world_size
from xlacache.lazy.distributed import env as _env
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
    """This process's index in the job (joined from the environment if need be)."""
    return _env.join().rank


def process_count() -> int:
    """The processes of the job (joined from the environment if need be)."""
    return _env.join().world


def global_device_count() -> int:
    return world_size()


def local_device_count() -> int:
    return 1


def addressable_device_count() -> int:
    return 1


def global_runtime_device_count() -> int:
    """The devices SPMD can shard over: every device of every process of the job."""
    return _spmd.device_count()


def addressable_runtime_device_count() -> int:
    """The devices of this process."""
    return _spmd.addressable_device_count()


def using_pjrt() -> bool:
    return True


is_spmd = _spmd.is_spmd
use_spmd = _spmd.use_spmd


def initialize_cache(path: str | os.PathLike, readonly: bool = False) -> None:
    """``xr.initialize_cache``: xlacache's persistent cache at ``path``."""
    xlacache.initialize_cache(path, readonly)
