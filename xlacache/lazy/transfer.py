"""Host <-> device copies of values: CPU tensors to device-data leaves and back.

``to_device`` copies a CPU tensor into a new device-data leaf (``TransferToDevice``);
``to_host`` turns a materialized leaf back into a CPU tensor. Running the graph first is the
executor's part (``executor.to_cpu``). Conversions between torch and device dtypes live here.
"""

from __future__ import annotations

import jax
import numpy as np
import torch

from . import metrics
from .graph import Node, data_node
from .lowering import jax_dtype
from .tensor import LazyTensor, wrap


def to_device(t: torch.Tensor) -> LazyTensor:
    """Copy a CPU tensor to the device (``TransferToDevice``)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    arr = t.resolve_conj().resolve_neg().contiguous().numpy(force=True)
    arr = arr.astype(jax_dtype(t.dtype), copy=False)
    metrics.counter_inc("TransferToDevice")
    node = data_node(jax.device_put(arr), t.dtype)
    return wrap(torch.empty(t.shape, dtype=t.dtype, device="meta"), (node, 0))


def to_host(leaf: Node, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of logical dtype ``dtype`` from a device-data leaf (``TransferFromDevice``)."""
    metrics.counter_inc("TransferFromDevice")
    out = torch.from_numpy(np.array(leaf.data))
    return out.to(dtype) if out.dtype != dtype else out
