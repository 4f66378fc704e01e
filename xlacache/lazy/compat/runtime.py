"""``torch_xla.runtime`` (``xr``) with single-process meanings."""

from __future__ import annotations

import os

import xlacache
from xlacache.lazy import device_type, global_ordinal, local_ordinal, world_size

__all__ = [
    "addressable_device_count",
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
    return 1


def local_device_count() -> int:
    return 1


def addressable_device_count() -> int:
    return 1


def global_runtime_device_count() -> int:
    return 1


def using_pjrt() -> bool:
    return True


def is_spmd() -> bool:
    return False


def use_spmd(auto: bool = False) -> None:
    raise NotImplementedError("xlacache.lazy does not support SPMD sharding")


def initialize_cache(path: str | os.PathLike, readonly: bool = False) -> None:
    """``xr.initialize_cache``: xlacache's persistent cache at ``path``."""
    xlacache.initialize_cache(path, readonly)
