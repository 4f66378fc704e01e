"""A ``_foreach_*`` op recorded as one IR node over its lists.

The optimizers' multi-tensor steps and ``clip_grad_norm_`` apply each ``_foreach_*`` op to
every parameter. Recorded element by element, that is one node (and, for a functional op, one
tensor) per parameter: most of the tracing of an optimizer step. Here the functional overload
is recorded once, with the lists as its arguments; its lowering applies the element op's
lowering to each element (``foreach.over_lists``), so the program computes what the
per-element nodes compute, value for value. An in-place op then writes output ``j`` into
element ``j`` of its first list, as ``record(..., into=...)`` does.

Taken only where that is the same as the loop (else ``record_foreach`` returns
NotImplemented and the dispatcher runs the loop):

* the element op is one the dispatcher records as it comes (the caller checks that), with
  no meta kernel or value check of our own, and every argument feeds it as a list element
  or as it is (not a tensor of per-element scalars); eager's argument checks of the element
  op run here, on the elements' arguments;
* every list element is a lazy tensor, all of one floating dtype (torch's optimizers group
  their tensors so), the lists of one length; a functional op's elements are laid out as
  eager lays out their values (its results' layouts are the contiguous ones), but for a
  norm's (its results are numbers);
* for an in-place op, its targets are distinct storages, and no argument reads one of them
  at another element: the loop would read it after the write before, this node before all.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import torch

from .foreach import foreach_element, over_lists
from .lowering import (
    ARGUMENT_CHECKS,
    FOREACH_LOWERINGS,
    LOWERINGS,
    META_KERNELS,
    SCALAR_CONVERSIONS,
    STATIC_SCALAR_OPS,
    check_scalar_conversions,
)
from .lowering.checks import CHECKED_OPS
from .record import record
from .tensor import LazyTensor

aten = torch.ops.aten


class _Plan(NamedTuple):
    functional: Any  # the overload recorded
    element: Any
    inplace: bool
    tensor_lists: tuple[tuple[int, str], ...]  # (position, name) of the ``Tensor[]`` arguments
    tensors: tuple[tuple[int, str], ...]  # of the single ``Tensor`` arguments
    number_lists: bool  # a ``Scalar[]`` argument: each element's number is checked
    static: bool  # its numbers stay constants, as its element op's do
    checked: bool  # the element op has eager's argument or number-range checks
    any_layout: bool  # an in-place op, or a norm: its elements' layouts make no difference


@cache
def _plan(func: Any, element: Any) -> _Plan | None:
    """How ``func`` records as one node, given the element op the dispatcher's loop would
    record for each element; None when it cannot."""
    name = func._schema.name.split("::")[1]
    inplace = name.endswith("_")
    packet = getattr(aten, name.rstrip("_"), None) if inplace else func.overloadpacket
    functional = getattr(packet, func._overloadname, None) if packet is not None else None
    if functional is None:
        return None
    try:
        each = foreach_element(functional)
    except NotImplementedError:
        return None
    if each.op is not element or element not in LOWERINGS:
        return None
    if element in META_KERNELS or element in CHECKED_OPS:
        return None
    if "index" in each.kinds:
        return None
    schema = functional._schema.arguments
    if [str(a.type) for a in schema] != [str(a.type) for a in func._schema.arguments]:
        return None
    types = [(i, a.name, str(a.type)) for i, a in enumerate(schema)]
    FOREACH_LOWERINGS.setdefault(functional, over_lists(functional, LOWERINGS[element]))
    return _Plan(
        functional,
        element,
        inplace,
        tuple((i, n) for i, n, t in types if t == "List[Tensor]"),
        tuple((i, n) for i, n, t in types if t == "Tensor"),
        any(t == "List[number]" for _, _, t in types),
        element in STATIC_SCALAR_OPS,
        element in ARGUMENT_CHECKS or element in SCALAR_CONVERSIONS,
        inplace or element is aten.linalg_vector_norm.default,
    )


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return args[i] if i < len(args) else kwargs.get(name)


def _root_id(t: LazyTensor) -> int:
    c = t._c
    return id(c._root if c._root is not None else c)


def record_foreach(func: Any, element: Any, args: tuple, kwargs: dict) -> Any:
    """Record ``_foreach_*`` overload ``func`` as one node (its result, or None for an in-place
    op), or return NotImplemented where the loop over ``element`` must run instead."""
    plan = _plan(func, element)
    if plan is None or not plan.tensor_lists:
        return NotImplemented
    lists = [_arg(args, kwargs, i, n) for i, n in plan.tensor_lists]
    if any(type(ts) not in (list, tuple) for ts in lists):
        return NotImplemented
    count = len(lists[0])
    if count == 0 or not isinstance(lists[0][0], LazyTensor):
        return NotImplemented
    dtype = lists[0][0].dtype
    if not dtype.is_floating_point:
        return NotImplemented
    for ts in lists:
        if len(ts) != count:
            return NotImplemented
        for t in ts:
            if not isinstance(t, LazyTensor) or t.dtype is not dtype:
                return NotImplemented
            if t._c._lay is not None and not plan.any_layout:
                return NotImplemented
    if plan.inplace and not _writes_apart(plan, lists, args, kwargs):
        return NotImplemented
    if plan.checked:
        _check(plan, args, kwargs, count if plan.number_lists else 1, dtype)
    into = list(lists[0]) if plan.inplace else None
    out = record(plan.functional, args, kwargs, as_view=False, into=into, static=plan.static)
    return None if plan.inplace else out


def _check(plan: _Plan, args: tuple, kwargs: dict, count: int, dtype: torch.dtype) -> None:
    """Eager's checks of the element op's arguments (on their metas) and numbers, for the
    first ``count`` elements (one, when every element takes the same numbers)."""
    bind = foreach_element(plan.functional).bind
    argument_check = ARGUMENT_CHECKS.get(plan.element)
    for j in range(count):
        pos, kw = bind(args, kwargs, j)
        if argument_check is not None:
            metas = [a._c._meta if isinstance(a, LazyTensor) else a for a in pos]
            argument_check(*metas, **{k: getattr(v, "_meta", v) for k, v in kw.items()})
        if plan.element in SCALAR_CONVERSIONS:
            check_scalar_conversions(plan.element, pos, kw, dtype)


def _writes_apart(plan: _Plan, lists: list, args: tuple, kwargs: dict) -> bool:
    """Whether the in-place op's targets (the first list) are distinct storages that no other
    argument reads at another element."""
    targets: dict[int, int] = {}
    for j, t in enumerate(lists[0]):
        if targets.setdefault(_root_id(t), j) != j:
            return False
    for ts in lists[1:]:
        for j, t in enumerate(ts):
            if targets.get(_root_id(t), j) != j:
                return False
    for i, n in plan.tensors:
        t = _arg(args, kwargs, i, n)
        if isinstance(t, LazyTensor) and _root_id(t) in targets:
            return False
    return True
