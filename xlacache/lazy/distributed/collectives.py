"""Collectives across the job's processes: ``all_reduce``, ``all_gather``, ``optimizer_step``.

Each collective is one IR node (a ``torch.library`` op ``xlacache_dist::*`` with a meta kernel,
so it is recorded like any aten op and its attributes, world size included, are part of the
graph's identity), lowered to ``lax.psum``/``pmax``/``pmin``/``all_gather`` over the process
mesh's axis. A graph holding one compiles as a program over the process mesh
(``program.py``), so a training step that all-reduces its gradients stays one program per
process, the same on every process. With one process, the collectives are what they are for
one value (no node is recorded).

Replica groups (torch_xla's ``groups=[[0, 2], [1, 3]]``: every process in exactly one group,
groups of one size) reduce or gather within each group: every process's value is gathered
(``lax.all_gather``), and each process combines its group's members, in the group's order.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from jax import lax
from jax import numpy as jnp

from ..lowering.registry import reg
from ..tensor import LazyTensor
from . import env, program

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR = "sum", "mul", "and", "or"
REDUCE_MIN, REDUCE_MAX = "min", "max"
_REDUCE_TYPES = (REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX)

_LIB = torch.library.Library("xlacache_dist", "DEF")
# groups: the replica groups concatenated (empty: every process), each of group_size ranks
_LIB.define(
    "all_reduce(Tensor x, str reduce_type, float scale, int world, int[] groups, "
    "int group_size) -> Tensor"
)
_LIB.define("all_gather(Tensor x, int dim, int world, int[] groups, int group_size) -> Tensor")


def _all_reduce_meta(
    x: torch.Tensor, reduce_type: str, scale: float, world: int, groups: list, group_size: int
) -> torch.Tensor:
    return torch.empty_like(x)


def _all_gather_meta(
    x: torch.Tensor, dim: int, world: int, groups: list, group_size: int
) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] *= group_size
    return x.new_empty(shape)


_LIB.impl("all_reduce", _all_reduce_meta, "Meta")
_LIB.impl("all_gather", _all_gather_meta, "Meta")
ALL_REDUCE = torch.ops.xlacache_dist.all_reduce.default
ALL_GATHER = torch.ops.xlacache_dist.all_gather.default
program.COLLECTIVE_OPS.update((ALL_REDUCE, ALL_GATHER))


_COMBINE = {
    REDUCE_SUM: lax.add,
    REDUCE_MUL: lax.mul,
    REDUCE_MAX: lax.max,
    REDUCE_MIN: lax.min,
    REDUCE_AND: lax.bitwise_and,
    REDUCE_OR: lax.bitwise_or,
}


def _my_group(x: Any, world: int, groups: list, group_size: int) -> list[Any]:
    """The values of the members of this process's group, in the group's order."""
    table = np.asarray(groups, dtype=np.int32).reshape(-1, group_size)
    by_rank = np.empty((world, group_size), dtype=np.int32)
    for row in table:
        by_rank[row] = row
    members = jnp.asarray(by_rank)[lax.axis_index(env.AXIS)]
    parts = jnp.take(lax.all_gather(x, env.AXIS), members, axis=0)
    return [parts[i] for i in range(group_size)]


@reg(ALL_REDUCE)
def _lower_all_reduce(
    x: Any, reduce_type: str, scale: float, world: int, groups: list, group_size: int
) -> Any:
    axis = env.AXIS
    if groups:
        r = functools.reduce(_COMBINE[reduce_type], _my_group(x, world, groups, group_size))
    elif reduce_type == REDUCE_SUM:
        r = lax.psum(x, axis)
    elif reduce_type == REDUCE_MAX:
        r = lax.pmax(x, axis)
    elif reduce_type == REDUCE_MIN:
        r = lax.pmin(x, axis)
    else:
        parts = list(lax.all_gather(x, axis))  # in rank order: the same result everywhere
        r = functools.reduce(_COMBINE[reduce_type], parts)
    return r if scale == 1.0 else r * scale


@reg(ALL_GATHER)
def _lower_all_gather(x: Any, dim: int, world: int, groups: list, group_size: int) -> Any:
    if groups:
        return jnp.concatenate(_my_group(x, world, groups, group_size), axis=dim)
    return lax.all_gather(x, env.AXIS, axis=dim, tiled=True)


def _check(reduce_type: str, groups: Any) -> tuple[int, list[int], int]:
    """``(world, groups flattened (empty: every process), group size)``."""
    if reduce_type not in _REDUCE_TYPES:
        raise ValueError(f"xlacache.lazy: unknown reduce type {reduce_type!r}")
    world = env.current().world
    if not groups:
        return world, [], world
    rows = [[int(r) for r in g] for g in groups]
    flat = [r for g in rows for r in g]
    if sorted(flat) != list(range(world)) or len({len(g) for g in rows}) != 1:
        raise ValueError(
            f"xlacache.lazy: replica groups {rows} must hold every rank of {world} exactly "
            "once, in groups of one size"
        )
    if len(rows) == 1:
        return world, [], world
    return world, flat, len(rows[0])


def _device_tensor(t: Any, what: str) -> LazyTensor:
    if not isinstance(t, LazyTensor):
        raise TypeError(
            f"xlacache.lazy: {what} takes device tensors in a multi-process job, got "
            f"{type(t).__name__} on {getattr(t, 'device', '?')}"
        )
    return t


def all_reduce(
    reduce_type: str,
    inputs: Any,
    scale: float = 1.0,
    groups: Any = None,
    pin_layout: bool = True,
) -> Any:
    """``xm.all_reduce``: reduce ``inputs`` over every process (``sum``, ``mul``, ``and``, ``or``,
    ``min``, ``max``), then multiply by ``scale``. One tensor: the result is returned; a list of
    tensors is updated in place (and returned), as torch_xla does."""
    world, flat, size = _check(reduce_type, groups)
    scale = float(scale)
    if isinstance(inputs, torch.Tensor):
        if size == 1:
            return inputs * scale if scale != 1.0 else inputs.clone()
        t = _device_tensor(inputs, "all_reduce")
        return ALL_REDUCE(t, reduce_type, scale, world, flat, size)
    with torch.no_grad():
        for t in inputs:
            if size == 1:
                if scale != 1.0:
                    t.mul_(scale)
            else:
                t.copy_(
                    ALL_REDUCE(
                        _device_tensor(t, "all_reduce"), reduce_type, scale, world, flat, size
                    )
                )
    return inputs


def all_gather(value: torch.Tensor, dim: int = 0, groups: Any = None, pin_layout: bool = True):
    """``xm.all_gather``: every process's ``value`` (of this process's replica group)
    concatenated along ``dim`` in rank (group) order."""
    world, flat, size = _check(REDUCE_SUM, groups)
    if size == 1:
        return value.clone()
    value = _device_tensor(value, "all_gather")
    return ALL_GATHER(value, dim % max(value.dim(), 1), world, flat, size)


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Any = None, pin_layout: bool = True):
    """``xm.reduce_gradients``: average every parameter's gradient over the processes (of this
    process's replica group).

    The gradients of one dtype travel as one flat buffer (one collective per dtype per step).
    """
    world, flat, size = _check(REDUCE_SUM, groups)
    if size == 1:
        return
    grads = [
        p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None
    ]
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(_device_tensor(g, "reduce_gradients"))
    with torch.no_grad():
        for same in by_dtype.values():
            buf = torch.cat([g.reshape(-1) for g in same])
            buf = ALL_REDUCE(buf, REDUCE_SUM, 1.0 / size, world, flat, size)
            offset = 0
            for g in same:
                n = g.numel()
                g.copy_(buf[offset : offset + n].view(g.shape))
                offset += n


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    barrier: bool = False,
    optimizer_args: dict[str, Any] | None = None,
    groups: Any = None,
    pin_layout: bool = True,
) -> Any:
    """``xm.optimizer_step``: average the gradients over the processes (in the step's graph),
    then ``optimizer.step()``; ``barrier`` syncs."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        from ..executor import sync

        sync()
    return loss
