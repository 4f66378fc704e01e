"""Host <-> device copies of values: CPU tensors to device-data leaves and back.

``to_device`` copies a CPU tensor into a new device-data leaf (``TransferToDevice``);
``to_host`` turns a materialized leaf back into a CPU tensor. Running the graph first is the
executor's part (``executor.to_cpu``). Values keep their dtype and width on the device
(``lowering.dtypes``): int64 and float64 are exact, bfloat16 and float8 cross as bit views
(numpy has no such dtypes; JAX's come from ``ml_dtypes``).
"""

from __future__ import annotations

import jax
import numpy as np
import torch
from jax._src.interpreters.pxla import batched_device_put, get_default_device
from jax.core import ShapedArray
from jax.sharding import SingleDeviceSharding

from . import metrics
from .graph import Node, data_node
from .lowering import BIT_VIEWS, jax_dtype, x64
from .tensor import LazyTensor, wrap

_NP_BITS = {torch.int16: np.int16, torch.uint8: np.uint8}


def host_array(t: torch.Tensor) -> np.ndarray:
    """A private host copy of a tensor's value in its device dtype (for ``jax.device_put``:
    JAX reads the host buffer asynchronously, and on CPU may even keep it as the device
    buffer, so the tensor's own memory could change under it afterwards)."""
    t = t.detach()
    if t.layout != torch.strided:
        raise RuntimeError(
            f"xlacache.lazy: a {t.layout} tensor cannot be put on the device (XLA arrays are "
            "dense, as in torch_xla); nn.Embedding and nn.EmbeddingBag need sparse=False there"
        )
    if t.device.type != "cpu":
        t = t.cpu()
    jdt = jax_dtype(t.dtype)
    t = t.resolve_conj().resolve_neg().contiguous()
    bits = BIT_VIEWS.get(t.dtype)
    arr = t.view(bits).numpy().view(jdt) if bits is not None else t.numpy()
    return np.array(arr, copy=True)


def device_tensor(data: jax.Array, dtype: torch.dtype) -> LazyTensor:
    """A lazy tensor whose value is the device array ``data`` (logical dtype ``dtype``)."""
    metrics.counter_inc("TransferToDevice")
    meta = torch.empty(tuple(data.shape), dtype=dtype, device="meta")
    return wrap(meta, (data_node(data, dtype), 0))


def to_device(t: torch.Tensor) -> LazyTensor:
    """Copy a CPU tensor to the device (``TransferToDevice``)."""
    with x64():
        data = put(host_array(t))
    return device_tensor(data, t.dtype)


_SHARDINGS: dict[jax.Device, SingleDeviceSharding] = {}


def put(arr: np.ndarray) -> jax.Array:
    """``jax.device_put(arr)`` (uncommitted, on JAX's default device) without its Python
    dispatch: JAX's own batched put, as ``device_put`` ends in, at a seventh of the cost
    (``arr`` has a device dtype and is private: ``host_array``)."""
    dev = get_default_device()
    sharding = _SHARDINGS.get(dev)
    if sharding is None:
        sharding = _SHARDINGS.setdefault(dev, SingleDeviceSharding(dev))
    aval = ShapedArray(arr.shape, arr.dtype)
    return batched_device_put(aval, sharding, [arr], [dev], committed=False)


def to_host(leaf: Node, dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of logical dtype ``dtype`` from a device-data leaf (``TransferFromDevice``)."""
    metrics.counter_inc("TransferFromDevice")
    data = leaf.data
    if not data.is_fully_addressable:  # replicated over every process: the local copy
        data = data.addressable_shards[0].data
    arr = np.array(data)
    bits = BIT_VIEWS.get(dtype)
    if bits is not None:
        return torch.from_numpy(arr.view(_NP_BITS[bits])).view(dtype)
    out = torch.from_numpy(arr)
    if out.dtype != dtype:
        raise RuntimeError(f"xlacache.lazy: device value of dtype {arr.dtype} for a {dtype} tensor")
    return out
