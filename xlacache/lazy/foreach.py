"""``_foreach_*`` ops as loops over their element op: which aten op a ``_foreach_*`` overload
applies to each element, how its arguments bind to element ``j``, and the lowering that
applies the element op's lowering to each element (schema logic only: the dispatcher records
one node per op or runs the loop, ``foreach_nodes``; the Dynamo lowering reuses both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

aten = torch.ops.aten

Bind = Callable[[tuple, dict, int], tuple[tuple, dict]]


class ElementOp(NamedTuple):
    """What a ``_foreach_*`` overload applies to each element: ``op``; ``bind(args, kwargs,
    j)``, element ``j``'s ``(args, kwargs)``; and how each foreach argument feeds it
    (``kinds``: "list", element j; "same", as it is; "index", a tensor of per-element
    scalars)."""

    op: Any
    bind: Bind
    kinds: tuple[str, ...]


_FOREACH: dict[Any, ElementOp] = {}
# element ops for the overloads the named op lacks (a Scalar bound): torch's own kernels
_SCALAR_TWINS = {"maximum": "clamp_min", "minimum": "clamp_max"}


def foreach_element(func: Any) -> ElementOp:
    """The element op of a ``_foreach_*`` overload and its binding (list arguments indexed, a
    shared scalar or tensor as it is, an argument the element op takes as keyword-only by
    name). Raises NotImplementedError when no overload fits."""
    hit = _FOREACH.get(func)
    if hit is None:
        hit = _FOREACH[func] = _foreach_element(func)
    return hit


def _elementwise_type(t: str) -> str:
    return t[5:-1] if t.startswith("List[") else t


def _fits(f: Any, c: Any) -> str | None:
    """How foreach argument ``f`` feeds element argument ``c``: "list" (element j), "same"
    (as it is), "index" (a tensor of per-element scalars), or None (it does not)."""
    ft, ct = str(f.type), str(c.type)
    if ft.startswith("List["):
        return "list" if _elementwise_type(ft) in (ct, ct.removeprefix("Optional[")[:-1]) else None
    if ft == ct or f"Optional[{ft}]" == ct:
        return "same"
    if ft == "Tensor" and ct == "number":
        return "index"
    return None


def _foreach_element(func: Any) -> ElementOp:
    fargs = func._schema.arguments
    name = func._schema.name.split("::")[1][len("_foreach_") :]
    if name.rstrip("_") == "norm":
        element, plan = aten.linalg_vector_norm.default, [("list", None), ("same", None)]
        plan.append(("same", "dtype"))
    else:
        packet = getattr(aten, name, None) or getattr(aten, name.rstrip("_"))
        try:
            element, plan = _foreach_candidate(packet, fargs)
        except NotImplementedError:
            twin = _SCALAR_TWINS.get(name.rstrip("_"))
            if twin is None:
                raise
            element, plan = _foreach_candidate(getattr(aten, twin), fargs)

    def bind(args: tuple, kwargs: dict, j: int) -> tuple[tuple, dict]:
        pos: list[Any] = []
        kw: dict[str, Any] = {}
        for i, (how, key) in enumerate(plan):
            f = fargs[i]
            if i < len(args):
                v = args[i]
            elif f.name in kwargs:
                v = kwargs[f.name]
            else:
                continue  # the element op's default
            if how != "same":
                v = v[j]
            if key is None:
                pos.append(v)
            elif v is not None:
                kw[key] = v
        return tuple(pos), kw

    return ElementOp(element, bind, tuple(how for how, _ in plan))


def over_lists(
    func: Any,
    element_lowering: Callable[..., Any],
    prepare: Callable[[tuple, dict], tuple[tuple, dict]] | None = None,
) -> Callable[..., list]:
    """The lowering of ``_foreach_*`` overload ``func``: ``element_lowering`` applied to each
    element's arguments (``prepare(args, kwargs)`` first, if given), the results as a list."""
    bind = foreach_element(func).bind

    def run(*args: Any, **kwargs: Any) -> list:
        count = len(next(a for a in args if isinstance(a, (list, tuple))))
        out = []
        for j in range(count):
            pos, kw = bind(args, kwargs, j)
            if prepare is not None:
                pos, kw = prepare(pos, kw)
            out.append(element_lowering(*pos, **kw))
        return out

    return run


def _foreach_candidate(packet: Any, fargs: list) -> tuple[Any, list[tuple[str, str | None]]]:
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        cargs = cand._schema.arguments
        if len(cargs) < len(fargs) or any(c.name == "out" for c in cargs):
            continue
        if not all(c.has_default_value() for c in cargs[len(fargs) :]):
            continue
        how = [_fits(f, c) for f, c in zip(fargs, cargs, strict=False)]
        if None in how:
            continue
        keys = [c.name if c.kwarg_only else None for c in cargs[: len(fargs)]]
        return cand, list(zip(how, keys, strict=True))  # type: ignore[arg-type]
    raise NotImplementedError(f"xlacache.lazy: no element op for _foreach_{packet.__name__}")
