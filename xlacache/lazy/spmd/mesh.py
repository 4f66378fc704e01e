"""torch_xla's SPMD API: ``Mesh``, ``mark_sharding`` and friends, on JAX shardings.

``Mesh(device_ids, mesh_shape, axis_names)`` is a ``jax.sharding.Mesh`` of those devices;
``mark_sharding(t, mesh, spec)`` annotates ``t`` in place: device data is placed with its
``NamedSharding`` (``jax.device_put``), a pending value gets a sharding-constraint node
(``xlacache::shard``, lowered to ``lax.with_sharding_constraint``). XLA propagates shardings
through the rest of the graph, which compiles once for all devices; ``.cpu()`` gathers.

In a multi-process job (``xl.launch``, torchrun) the mesh spans the job: device ids are
global ordinals (process 0's devices first), ``mark_sharding`` of a value every process holds
alike places this process's shards of the global array, and every graph over the mesh is one
program run by every process (``docs/spmd.md``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec

from ..distributed import env
from ..executor import materialize
from ..graph import DATA
from ..record import record, value
from ..state import STATE
from ..tensor import LOCK, LazyTensor
from .placement import SHARD, constraint_code, replicated, to_global

__all__ = [
    "Mesh",
    "ShardingSpec",
    "clear_sharding",
    "get_global_mesh",
    "get_1d_mesh",
    "is_spmd",
    "mark_sharding",
    "set_global_mesh",
    "sharding_spec",
    "use_spmd",
]


def use_spmd(auto: bool = False) -> None:
    """``xr.use_spmd()``: turn SPMD on (``Mesh`` and ``mark_sharding`` also do). In a job
    named by the environment (torchrun), this process joins it first."""
    if auto:
        raise NotImplementedError(
            "xlacache.lazy: auto-sharding (use_spmd(auto=True)) is not "
            "supported; annotate tensors with mark_sharding"
        )
    env.join()
    STATE.spmd = True


def is_spmd() -> bool:
    return bool(STATE.spmd)


def devices() -> list[Any]:
    """Every device of the job in mesh order: ``Mesh`` device id ``i`` is ``devices()[i]``
    (process 0's devices, then process 1's, ...)."""
    env.join()
    return sorted(jax.devices(), key=lambda d: (d.process_index, d.id))


def device_count() -> int:
    """The devices of every process of the job (``xr.global_runtime_device_count()``)."""
    return len(devices())


def addressable_device_count() -> int:
    """The devices of this process (``xr.addressable_runtime_device_count()``)."""
    env.join()
    return len(jax.local_devices())


class Mesh:
    """``xs.Mesh``: a logical ``mesh_shape`` array of device ids with optional axis names.

    ``device_ids`` are global ordinals ``0 .. N-1`` of the job's devices (``devices()``: on
    CPU, ``CPU_NUM_DEVICES`` per process times the processes), laid out row-major over
    ``mesh_shape``.
    """

    def __init__(
        self,
        device_ids: Sequence[int] | np.ndarray,
        mesh_shape: tuple[int, ...],
        axis_names: tuple[str, ...] | None = None,
    ) -> None:
        ids = [int(i) for i in np.asarray(device_ids).reshape(-1)]
        shape = tuple(int(s) for s in mesh_shape)
        if len(ids) != int(np.prod(shape)):
            raise ValueError(f"xlacache.lazy: {len(ids)} device ids do not fill mesh {shape}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"xlacache.lazy: mesh device ids repeat: {ids}")
        job = devices()
        missing = [i for i in ids if not 0 <= i < len(job)]
        if missing:
            processes = len({d.process_index for d in job})
            raise ValueError(
                f"xlacache.lazy: no device with id {missing} (the job has {len(job)}: "
                f"{processes} process(es) x {len(jax.local_devices())}; on CPU set "
                "CPU_NUM_DEVICES, jax_num_cpu_devices or XLA_FLAGS="
                "--xla_force_host_platform_device_count before the first device use)"
            )
        if axis_names is None:
            axis_names = tuple(f"_{i}" for i in range(len(shape)))
        names = tuple(str(a) for a in axis_names)
        if len(names) != len(shape) or len(set(names)) != len(names):
            raise ValueError(f"xlacache.lazy: axis names {names} do not name mesh {shape}")
        self.device_ids = np.asarray(ids)
        self.mesh_shape = shape
        self.axis_names = tuple(axis_names)
        self._names = names
        self.jax_mesh = jax.sharding.Mesh(
            np.asarray([job[i] for i in ids], dtype=object).reshape(shape), names
        )
        use_spmd()

    def size(self) -> int:
        return len(self.device_ids)

    def shape(self) -> OrderedDict:
        return OrderedDict(zip(self.axis_names, self.mesh_shape, strict=True))

    def get_logical_mesh(self) -> np.ndarray:
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name: str) -> int:
        return self.axis_names.index(name)

    def __repr__(self) -> str:
        return f"Mesh(shape={self.mesh_shape}, axis_names={self.axis_names})"

    def sharding(self, partition_spec: Sequence[Any], ndim: int) -> NamedSharding:
        """The JAX sharding of a rank-``ndim`` tensor with torch_xla's ``partition_spec``."""
        spec = tuple(partition_spec)
        if len(spec) != ndim:
            raise ValueError(
                f"xlacache.lazy: partition spec {spec} has {len(spec)} entries for a tensor "
                f"of rank {ndim}"
            )
        used: list[str] = []
        entries = [self._entry(e, used) for e in spec]
        return NamedSharding(self.jax_mesh, PartitionSpec(*entries))

    def _entry(self, e: Any, used: list[str]) -> Any:
        if e is None:
            return None
        if isinstance(e, tuple):
            names = tuple(self._axis(a, used) for a in e)
            return names if len(names) != 1 else names[0]
        return self._axis(e, used)

    def _axis(self, a: Any, used: list[str]) -> str:
        if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            if not 0 <= int(a) < len(self._names):
                raise ValueError(f"xlacache.lazy: mesh axis {a} out of range for {self}")
            name = self._names[int(a)]
        elif isinstance(a, str) and a in self._names:
            name = a
        else:
            raise ValueError(f"xlacache.lazy: {a!r} names no axis of {self}")
        if name in used:
            raise ValueError(f"xlacache.lazy: mesh axis {a!r} used twice in one partition spec")
        used.append(name)
        return name


def get_1d_mesh(axis_name: str | None = None) -> Mesh:
    """``xs.get_1d_mesh``: every device on one axis."""
    n = device_count()
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


def set_global_mesh(mesh: Mesh) -> None:
    STATE.global_mesh = mesh


def get_global_mesh() -> Mesh | None:
    return STATE.global_mesh


def mark_sharding(
    t: torch.Tensor, mesh: Mesh | None, partition_spec: Sequence[Any]
) -> torch.Tensor:
    """``xs.mark_sharding``: shard ``t`` over ``mesh`` (``None`` entries: replicated dims;
    a tuple entry shards one dim over several axes). Returns ``t``, annotated in place."""
    if not isinstance(t, LazyTensor):
        raise TypeError(f"xlacache.lazy: mark_sharding needs an xla tensor, got {t.device}")
    mesh = mesh or get_global_mesh()
    if mesh is None:
        raise ValueError("xlacache.lazy: mark_sharding needs a mesh (or set_global_mesh)")
    sharding = mesh.sharding(partition_spec, t.dim())
    _annotate(t, sharding)
    return t


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """``xs.clear_sharding``: drop ``t``'s annotation (sharded device data is replicated over
    the devices it was sharded on; a pending value loses its constraint)."""
    with LOCK:
        n, _ = value(t)
        if n.op == DATA:
            s = n.data.sharding
            if isinstance(s, NamedSharding) and len(s.device_set) > 1:
                _place(t, n, replicated(s))
        elif n.func is SHARD and t._c._root is None:
            t._c._v = n.inputs[0]
    return t


def _annotate(t: LazyTensor, sharding: NamedSharding) -> None:
    STATE.spmd = True
    with LOCK:
        n, _ = value(t)
        if n.op == DATA:
            _place(t, n, sharding)
            return
        out = record(SHARD, (t, constraint_code(sharding)), {})
        t._c._v = out._c._v


def _place(t: LazyTensor, leaf: Any, sharding: NamedSharding) -> None:
    """Place device data with ``sharding`` (its placement, not its value: every holder of the
    leaf sees the placed array). A global array is placed again by a graph (a program every
    process runs); one-device data becomes this process's shards of the global array."""
    if leaf.data.is_fully_addressable:
        leaf.data = to_global(leaf.data, sharding, check="mark_sharding")
        return
    out = record(SHARD, (t, constraint_code(sharding)), {})
    materialize([out])
    leaf.data = value(out)[0].data


class ShardingSpec:
    """``xs.ShardingSpec``: how ``MpDeviceLoader(..., input_sharding=spec)`` places each batch
    tensor: ``mesh`` and ``partition_spec`` as for ``mark_sharding``. ``minibatch=True``: each
    process loads its own slice of the global batch (the global batch is the processes'
    batches in process order along the sharded dimensions); ``False``: every process loads the
    whole batch."""

    def __init__(self, mesh: Mesh, partition_spec: Sequence[Any], minibatch: bool = False) -> None:
        self.mesh = mesh
        self.partition_spec = tuple(partition_spec)
        self.minibatch = bool(minibatch)

    def can_apply(self, t: torch.Tensor) -> bool:
        return t.dim() == len(self.partition_spec)

    def sharding(self, ndim: int) -> NamedSharding:
        return self.mesh.sharding(self.partition_spec, ndim)

    def __repr__(self) -> str:
        return f"ShardingSpec({self.mesh!r}, {self.partition_spec!r}, minibatch={self.minibatch})"


def sharding_spec(t: torch.Tensor) -> str:
    """XLA's text for ``t``'s sharding once computed (torch_xla's ``_get_xla_sharding_spec``):
    ``""`` for a tensor on one device, e.g. ``{devices=[8,1]<=[8]}`` for a sharded one."""
    materialize([t])
    with LOCK:
        n, _ = value(t)
        s = n.data.sharding
        if len(s.device_set) == 1:
            return ""
        return str(s._to_xla_hlo_sharding(n.data.ndim))
