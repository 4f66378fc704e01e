"""Sizes in graphs whose sizes Dynamo made symbolic: the value each size symbol takes in a
call (its binding), a size or a fake tensor's shape under a binding, and the size arithmetic
such graphs do on Python ints."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

aten = torch.ops.aten
Aval = tuple[tuple[int, ...], torch.dtype]

# size arithmetic on Python ints (graphs with symbolic sizes, evaluated per binding)
SIZE_OPS: dict[Any, Callable[..., Any]] = {
    aten.sym_size.int: lambda x, d: x.shape[d],
    aten.sym_numel.default: lambda x: int(np.prod(x.shape)),
    aten.sym_stride.int: lambda x, d: int(np.prod(x.shape[d + 1 :])),
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.floordiv: operator.floordiv,
    operator.mod: operator.mod,
    operator.neg: operator.neg,
    operator.eq: operator.eq,
    operator.ne: operator.ne,
    operator.lt: operator.lt,
    operator.le: operator.le,
    operator.gt: operator.gt,
    operator.ge: operator.ge,
    torch.sym_max: max,
    torch.sym_min: min,
    torch.sym_not: operator.not_,
}


def symbol_values(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, int] | None:
    """The concrete value of every size symbol in this call (sympy symbol -> int), from
    ``(fake value, value)`` pairs: an int input's, or each size of a tensor input's shape. A
    size that is an expression (a backward's ``2*s0`` beside ``s0`` as an int input) must agree
    with the symbols the other sizes bind; None if one is not bound that way, or a size
    disagrees."""
    symbols: dict[Any, int] = {}
    exprs: list[tuple[Any, int]] = []
    for v, a in pairs:
        scalar = isinstance(v, (int, torch.SymInt))
        for s, got in [(v, a)] if scalar else zip(v.shape, a.shape, strict=True):
            if isinstance(s, torch.SymInt):
                expr = s.node.expr
                if expr.is_Symbol:
                    if symbols.setdefault(expr, int(got)) != int(got):
                        return None
                elif expr.free_symbols:
                    exprs.append((expr, int(got)))
    for expr, got in exprs:
        if not expr.free_symbols <= symbols.keys() or expr.xreplace(symbols) != got:
            return None
    return symbols


def concrete(s: Any, bind: dict[Any, int]) -> int:
    """The size ``s`` (an int or a SymInt) under the binding ``bind``."""
    if isinstance(s, torch.SymInt):
        expr = s.node.expr
        value = expr.xreplace(bind) if hasattr(expr, "xreplace") else expr
        if not (isinstance(value, int) or value.is_Integer):
            raise NotImplementedError(f"size {s} is not fixed by the inputs' sizes")
        return int(value)
    return int(s)


def aval(v: Any, bind: dict[Any, int]) -> Aval | None:
    """A fake tensor's shape under ``bind``, and its dtype (None for None)."""
    return None if v is None else (tuple(concrete(s, bind) for s in v.shape), v.dtype)
