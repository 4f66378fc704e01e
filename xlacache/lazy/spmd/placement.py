"""Placements at a barrier: SPMD state, the sharding-constraint op, the executor's hooks.

Once SPMD is in use (``use_spmd``, a ``Mesh``, ``mark_sharding``), every graph's key also
covers where each input lives (``graph_inputs``): committed or not, the device assignment,
XLA's canonical sharding text and the memory kind. A constraint's sharding is an attribute of
its ``xlacache::shard`` node, so it is in the node's digest. A graph that runs on more than
one device never goes through the single-device alias path (``is_sharded_graph``). Before
SPMD is used, keys are exactly what they were without this module.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec

from .. import metrics
from ..graph import Node
from ..lowering import reg

STATE: dict[str, Any] = {"spmd": False, "global_mesh": None}

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


def graph_inputs(arrays: list[Any], leaves: list[Node], order: list[Node]) -> bytes | None:
    """The executor's hook at a barrier, before the graph key is computed.

    ``None`` until SPMD is in use (keys and arrays untouched). Then committed inputs on other
    devices than the graph's (one-device data meeting sharded data) are replicated over the
    graph's devices, in ``arrays`` and in their leaf (``ReplicateToMesh`` counts them), and
    the result is an exact digest of every input's placement, for the graph key.
    """
    if not STATE["spmd"]:
        return None
    misplaced = [
        j
        for j, a in enumerate(arrays)
        if isinstance(a, jax.Array) and a.committed and len(a.sharding.device_set) == 1
    ]
    if misplaced:
        assignment = _assignment(arrays, order)
        if assignment is not None and len(assignment) > 1:
            mesh = jax.sharding.Mesh(np.asarray(assignment, dtype=object), ("_r",))
            replicated = NamedSharding(mesh, PartitionSpec())
            for j in misplaced:
                a = arrays[j]
                arrays[j] = jax.device_put(a, replicated)
                if leaves[j].data is a:
                    leaves[j].data = arrays[j]
                metrics.counter_inc("ReplicateToMesh")
    h = blake2b(b"xlacache.lazy.spmd/1", digest_size=16)
    for a in arrays:
        code = _placement(a) if isinstance(a, jax.Array) else b"h"
        h.update(len(code).to_bytes(4, "little") + code)
    return h.digest()


def is_sharded_graph(arrays: list[Any], order: list[Node]) -> bool:
    """Whether a graph may run on more than one device (then no single-device alias)."""
    if not STATE["spmd"]:
        return False
    if any(isinstance(a, jax.Array) and a.committed for a in arrays):
        return True
    return any(n.func is SHARD for n in order)
