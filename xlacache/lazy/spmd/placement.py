"""Placements at a barrier: SPMD state, the sharding-constraint op, the executor's hooks.

Once SPMD is in use (``use_spmd``, a ``Mesh``, ``mark_sharding``), every graph's key also
covers where each input lives (``graph_inputs``): committed or not, the device assignment,
XLA's canonical sharding text and the memory kind. A constraint's sharding is an attribute of
its ``xlacache::shard`` node, so it is in the node's digest. A graph that may run on more
than one device names its devices (``program_devices``) for its alias; one whose devices
belong to other processes too is a cross-process program (``spans_processes``). Before SPMD
is used, keys are exactly what they were without this module.

In a multi-process job (a mesh over every process's devices), a value every process holds
alike (a seeded parameter, a one-device input) becomes a global array with ``to_global``:
each process places only its own shards.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec

from .. import metrics
from ..distributed.agreement import agree
from ..graph import Node
from ..lowering import reg, x64
from ..state import STATE

_LIB = torch.library.Library("xlacache", "DEF")
_LIB.define("shard(Tensor self, str sharding) -> Tensor")
_LIB.impl("shard", lambda x, sharding: torch.empty_like(x), "Meta")
SHARD = torch.ops.xlacache.shard.default
CONSTRAINTS: dict[str, NamedSharding] = {}  # a constraint's exact code -> its sharding


def constraint_code(sharding: NamedSharding) -> str:
    """An exact text for a mesh sharding: device ids, mesh shape, axis names, spec, memory."""
    CONSTRAINTS.setdefault(code := _code(sharding), sharding)
    return code


def _code(sharding: NamedSharding) -> str:
    mesh = sharding.mesh
    ids = ",".join(str(d.id) for d in mesh.devices.flat)
    shape = ",".join(str(s) for s in mesh.devices.shape)
    names = ",".join(f"{len(a)}:{a}" for a in mesh.axis_names)
    spec = ",".join(_spec_entry(e) for e in sharding.spec)
    return f"mesh[{ids}|{shape}|{names}]spec[{spec}]mem[{sharding.memory_kind}]"


def _spec_entry(e: Any) -> str:
    if e is None:
        return "N"
    if isinstance(e, tuple):
        return "(" + ",".join(f"{len(a)}:{a}" for a in e) + ")"
    return f"{len(e)}:{e}"


@reg(SHARD)
def _lower_shard(x: Any, sharding: str) -> Any:
    return jax.lax.with_sharding_constraint(x, CONSTRAINTS[sharding])


_CODES: dict[tuple[Any, int, bool], bytes] = {}


def _placement(a: Any) -> bytes:
    """Exact code of where a graph input lives (cached by the sharding, compared by ==)."""
    s = a.sharding
    committed = bool(a.committed)
    ck = (s, a.ndim, committed)
    code = _CODES.get(ck)
    if code is None:
        if not committed:
            code = b"u"  # on the default device, uncommitted: jit places it
        else:
            ids = ",".join(str(d.id) for d in s._device_assignment)
            hlo = str(s._to_xla_hlo_sharding(a.ndim))
            code = f"c[{ids}]{hlo}/{s.memory_kind}".encode()
        if len(_CODES) > 4096:
            _CODES.clear()
        _CODES[ck] = code
    return code


def _assignment(arrays: list[Any], order: list[Node]) -> tuple | None:
    """The devices a graph runs on: its first multi-device input's, else its first
    constraint's (None: one device)."""
    for a in arrays:
        if isinstance(a, jax.Array) and len(a.sharding.device_set) > 1:
            return a.sharding._device_assignment
    for n in order:
        if n.func is SHARD:
            return CONSTRAINTS[n.attrs[0][1]]._device_assignment
    return None


def to_global(a: Any, sharding: Any, check: str | None = None, domain: str = "runs") -> jax.Array:
    """``a`` (a one-device array or a host array, the same value on every process) placed with
    ``sharding``; over other processes' devices too, each process places its own shards (no
    communication). With ``check`` (what the value is, for errors) the processes first compare
    a digest of it (``agreement``, in ``domain``): a value that differs is an error naming the
    ranks, never a global array made of different values."""
    with x64():
        if sharding.is_fully_addressable:
            return jax.device_put(a, sharding)
        host = np.asarray(a)
        if check is not None:
            h = blake2b(b"xlacache.lazy.value/1", digest_size=16)
            _digest(h, host)
            what = f"{check} of a {host.dtype.name}{list(host.shape)} value"
            agree(b"", what, domain, inputs=h.digest())
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _digest(h: Any, host: np.ndarray) -> None:
    """Feed a host value's dtype, shape and bytes to the hash ``h``."""
    h.update(f"{host.dtype.name}{host.shape}".encode())
    h.update(np.ascontiguousarray(host).view(np.uint8).reshape(-1).data)


def _everywhere(devices: Any) -> NamedSharding:
    """A value replicated over ``devices``, in their order (a 1-D mesh of them)."""
    mesh = jax.sharding.Mesh(np.asarray(devices, dtype=object), ("_r",))
    return NamedSharding(mesh, PartitionSpec())


def replicated(sharding: Any) -> NamedSharding:
    """A sharding that replicates a value over ``sharding``'s devices, in their order."""
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec())
    return _everywhere(sharding._device_assignment)


def graph_inputs(arrays: list[Any], leaves: list[Node], order: list[Node]) -> bytes | None:
    """The executor's hook at a barrier, before the graph key is computed.

    ``None`` until SPMD is in use (keys and arrays untouched). Then committed inputs on other
    devices than the graph's (one-device data meeting sharded data) are replicated over the
    graph's devices, in ``arrays`` and in their leaf (``ReplicateToMesh`` counts them), and
    the result is an exact digest of every input's placement, for the graph key.
    """
    if not STATE.spmd:
        return None
    misplaced = [
        j
        for j, a in enumerate(arrays)
        if isinstance(a, jax.Array) and a.committed and len(a.sharding.device_set) == 1
    ]
    if misplaced:
        assignment = _assignment(arrays, order)
        if assignment is not None and len(assignment) > 1:
            everywhere = _everywhere(assignment)
            for j in misplaced:
                a = arrays[j]
                arrays[j] = to_global(a, everywhere)
                if leaves[j].data is a:
                    leaves[j].data = arrays[j]
                metrics.counter_inc("ReplicateToMesh")
    h = blake2b(b"xlacache.lazy.spmd/1", digest_size=16)
    for a in arrays:
        code = _placement(a) if isinstance(a, jax.Array) else b"h"
        h.update(len(code).to_bytes(4, "little") + code)
    return h.digest()


def replicated_inputs(arrays: list[Any], scalars: np.ndarray) -> bytes:
    """A digest of the inputs of a program over several processes that each process passes
    from its own memory (host numbers, one-device data): they must be the same everywhere."""
    h = blake2b(b"xlacache.lazy.inputs/1", digest_size=16)
    _digest(h, scalars)
    for a in arrays:
        if isinstance(a, jax.Array) and a.is_fully_addressable:
            _digest(h, np.asarray(a))
    return h.digest()


def program_devices(arrays: list[Any], order: list[Node]) -> tuple | None:
    """The devices a graph's program runs on, in the program's order, when SPMD may place it
    (a committed input, a constraint); None for a program on the default device."""
    if not STATE.spmd:
        return None
    assignment = _assignment(arrays, order)
    if assignment is not None:
        return tuple(assignment)
    for a in arrays:
        if isinstance(a, jax.Array) and a.committed:
            return tuple(a.sharding._device_assignment)
    return None


def spans_processes(devices: tuple | None) -> bool:
    """Whether a program on ``devices`` runs on other processes' devices too."""
    if not devices:
        return False
    me = jax.process_index()
    return any(d.process_index != me for d in devices)
