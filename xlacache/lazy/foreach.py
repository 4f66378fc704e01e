"""``_foreach_*`` ops as loops over their element op: which aten op a ``_foreach_*`` overload
applies to each element, and how its arguments bind to element ``j`` (schema logic only; the
dispatcher runs the loop, and the Dynamo lowering reuses the binding)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


_FOREACH: dict[Any, tuple[Any, Callable[[tuple, dict, int], tuple[tuple, dict]]]] = {}
# element ops for the overloads the named op lacks (a Scalar bound): torch's own kernels
_SCALAR_TWINS = {"maximum": "clamp_min", "minimum": "clamp_max"}


def foreach_element(func: Any) -> tuple[Any, Callable[[tuple, dict, int], tuple[tuple, dict]]]:
    """``(op, bind)`` for a ``_foreach_*`` overload: the op it applies to each element and
    ``bind(args, kwargs, j)``, the ``(args, kwargs)`` of element ``j`` (list arguments
    indexed, a shared scalar or tensor as it is, an argument the element op takes as
    keyword-only by name). Raises NotImplementedError when no overload fits."""
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


def _foreach_element(func: Any) -> tuple[Any, Callable[[tuple, dict, int], tuple[tuple, dict]]]:
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

    return element, bind


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
