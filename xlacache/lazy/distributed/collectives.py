"""Collectives across the job's processes: ``all_reduce``, ``all_gather``, ``optimizer_step``.

Each collective is one IR node (a ``torch.library`` op ``xlacache_dist::*`` with a meta kernel,
so it is recorded like any aten op and its attributes, world size included, are part of the
graph's identity), lowered to ``lax.psum``/``pmax``/``pmin``/``all_gather`` over the process
mesh's axis. A graph holding one compiles as a program over the process mesh
(``program.py``), so a training step that all-reduces its gradients stays one program per
process, the same on every process. With one process, the collectives are what they are for
one value (no node is recorded).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from jax import lax

from ..lowering.registry import reg
from ..tensor import LazyTensor
from . import env, program

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR = "sum", "mul", "and", "or"
REDUCE_MIN, REDUCE_MAX = "min", "max"
_REDUCE_TYPES = (REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX)

_LIB = torch.library.Library("xlacache_dist", "DEF")
_LIB.define("all_reduce(Tensor x, str reduce_type, float scale, int world) -> Tensor")
_LIB.define("all_gather(Tensor x, int dim, int world) -> Tensor")


def _all_reduce_meta(x: torch.Tensor, reduce_type: str, scale: float, world: int) -> torch.Tensor:
    return torch.empty_like(x)


def _all_gather_meta(x: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] *= world
    return x.new_empty(shape)


_LIB.impl("all_reduce", _all_reduce_meta, "Meta")
_LIB.impl("all_gather", _all_gather_meta, "Meta")
ALL_REDUCE = torch.ops.xlacache_dist.all_reduce.default
ALL_GATHER = torch.ops.xlacache_dist.all_gather.default
program.COLLECTIVE_OPS.update((ALL_REDUCE, ALL_GATHER))


@reg(ALL_REDUCE)
def _lower_all_reduce(x: Any, reduce_type: str, scale: float, world: int) -> Any:
    axis = env.AXIS
    if reduce_type == REDUCE_SUM:
        r = lax.psum(x, axis)
    elif reduce_type == REDUCE_MAX:
        r = lax.pmax(x, axis)
    elif reduce_type == REDUCE_MIN:
        r = lax.pmin(x, axis)
    else:
        parts = list(lax.all_gather(x, axis))  # in rank order: the same result everywhere
        op = {REDUCE_MUL: lax.mul, REDUCE_AND: lax.bitwise_and, REDUCE_OR: lax.bitwise_or}
        r = functools.reduce(op[reduce_type], parts)
    return r if scale == 1.0 else r * scale


@reg(ALL_GATHER)
def _lower_all_gather(x: Any, dim: int, world: int) -> Any:
    return lax.all_gather(x, env.AXIS, axis=dim, tiled=True)


def _check(reduce_type: str, groups: Any) -> int:
    if reduce_type not in _REDUCE_TYPES:
        raise ValueError(f"xlacache.lazy: unknown reduce type {reduce_type!r}")
    world = env.current().world
    if groups and (len(groups) != 1 or sorted(groups[0]) != list(range(world))):
        raise NotImplementedError("xlacache.lazy: collectives over replica groups other than all")
    return world


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
    world = _check(reduce_type, groups)
    scale = float(scale)
    if isinstance(inputs, torch.Tensor):
        if world == 1:
            return inputs * scale if scale != 1.0 else inputs.clone()
        return ALL_REDUCE(_device_tensor(inputs, "all_reduce"), reduce_type, scale, world)
    with torch.no_grad():
        for t in inputs:
            if world == 1:
                if scale != 1.0:
                    t.mul_(scale)
            else:
                t.copy_(ALL_REDUCE(_device_tensor(t, "all_reduce"), reduce_type, scale, world))
    return inputs


def all_gather(value: torch.Tensor, dim: int = 0, groups: Any = None, pin_layout: bool = True):
    """``xm.all_gather``: every process's ``value`` concatenated along ``dim`` in rank order."""
    world = _check(REDUCE_SUM, groups)
    if world == 1:
        return value.clone()
    value = _device_tensor(value, "all_gather")
    return ALL_GATHER(value, dim % max(value.dim(), 1), world)


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: Any = None, pin_layout: bool = True):
    """``xm.reduce_gradients``: average every parameter's gradient over the processes.

    The gradients of one dtype travel as one flat buffer (one collective per dtype per step).
    """
    world = _check(REDUCE_SUM, groups)
    if world == 1:
        return
    grads = [
        p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None
    ]
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(_device_tensor(g, "reduce_gradients"))
    with torch.no_grad():
        for same in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in same])
            flat = ALL_REDUCE(flat, REDUCE_SUM, 1.0 / world, world)
            offset = 0
            for g in same:
                n = g.numel()
                g.copy_(flat[offset : offset + n].view(g.shape))
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
