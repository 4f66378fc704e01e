"""Batches placed by a ``ShardingSpec`` (``MpDeviceLoader(..., input_sharding=spec)``).

Each tensor of a batch goes to the device already sharded: no one-device copy, no
resharding in the step's graph. ``minibatch=True``: each process holds its own slice of the
global batch, and the global array is assembled from every process's slice
(``jax.make_array_from_process_local_data``: the slices in process order along the sharded
dimensions; no communication). ``minibatch=False``: every process holds the whole batch and
places its own shards of it, after the processes compared a digest of it (in a sequence of
the loader's own, outside the trace lock: the training loop runs meanwhile).
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from ..lowering import x64
from ..state import STATE
from ..tensor import LOCK, LazyTensor
from ..transfer import device_tensor, host_array
from .mesh import ShardingSpec
from .placement import to_global


def to_device_sharded(t: torch.Tensor, spec: ShardingSpec) -> LazyTensor:
    """Copy the CPU tensor ``t`` to the device, placed as ``spec`` says."""
    if not spec.can_apply(t):
        raise ValueError(
            f"xlacache.lazy: input_sharding {spec} does not apply to a batch tensor of shape "
            f"{tuple(t.shape)} (one partition spec entry per dimension)"
        )
    sharding = spec.sharding(t.dim())
    STATE.spmd = True
    host = host_array(t)
    if spec.minibatch and not sharding.is_fully_addressable:
        with x64():
            data = jax.make_array_from_process_local_data(sharding, host)
    else:
        data = to_global(host, sharding, check="a loaded batch", domain="batches")
    with LOCK:
        return device_tensor(data, t.dtype)


def batch_to_device(batch: Any, device: torch.device, sharding: Any) -> Any:
    """``batch`` (tensors, in dicts, lists, tuples, named tuples) on ``device``; with
    ``sharding`` (a ``ShardingSpec``, or a dict of them by the batch's keys) tensors are placed
    by it. A tensor the spec does not fit is refused when each process loads its own slice
    (it would become a replica that differs between processes). Takes the trace lock itself."""
    if isinstance(batch, torch.Tensor):
        if sharding is None or isinstance(sharding, dict):
            with LOCK:
                return batch.to(device)
        if not sharding.can_apply(batch) and not sharding.minibatch:
            with LOCK:
                return batch.to(device)  # replicated, as torch_xla leaves it
        return to_device_sharded(batch, sharding)
    if isinstance(batch, dict):
        return type(batch)(
            (k, batch_to_device(v, device, _for_key(sharding, k))) for k, v in batch.items()
        )
    if isinstance(batch, (list, tuple)):
        vals = [batch_to_device(v, device, sharding) for v in batch]
        return type(batch)(*vals) if hasattr(batch, "_fields") else type(batch)(vals)
    return batch


def _for_key(sharding: Any, key: Any) -> Any:
    return sharding.get(key) if isinstance(sharding, dict) else sharding
