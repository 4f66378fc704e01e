"""Stride-aware lowerings for AOTAutograd graphs: ``as_strided``, ``as_strided_scatter`` and
``sym_stride`` read their input's layout from its fake tensor.

A lazy tensor reports a contiguous layout, and the lazy runtime's ``as_strided`` works on the
tensor's own elements in that layout. In an AOTAutograd graph, views keep eager's layout: the
fake of ``x.transpose(1, 2)`` has strides ``(36, 6, 12, 1)``, and functionalization replays a
view (a ``chunk`` of it, say) as ``as_strided(transpose, size, stride, offset)`` over the
storage those strides index. These lowerings map each storage position the op names to the
input element that holds it (positions from the input's sizes, strides and storage offset), so
the value is eager's. A position that no element of the input holds raises: the graph never
reads past what it was given. ``lazy_runner`` runs such a graph op by op on lazy tensors (a
graph that does not lower) with the same index maps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from torch._higher_order_ops.effects import with_effects
from torch.fx import Node

from ..lowering import LOWERINGS
from ..lowering.shapes import strided_index

aten = torch.ops.aten
Concrete = Callable[[Any], int]
LAYOUT_OPS = (aten.as_strided.default, aten.as_strided_scatter.default, aten.sym_stride.int)
# ops whose LU factors (outputs the backward solves with) are those of A^T when A is contiguous
FACTORED_TRANSPOSED = (aten._linalg_det.default, aten._linalg_slogdet.default)


def _layout(node: Any, concrete: Concrete) -> np.ndarray:
    v = node.meta["val"]
    return strided_index(
        [concrete(s) for s in v.shape],
        [concrete(s) for s in v.stride()],
        concrete(v.storage_offset()),
    )


def _gather_index(have: np.ndarray, want: np.ndarray, what: str) -> np.ndarray:
    """For each position in ``want``, the flat index of an element of ``have`` holding it."""
    top = int(max(have.max(initial=-1), want.max(initial=-1))) + 1
    inverse = np.full(max(top, 1), -1, dtype=np.int64)
    inverse[have.ravel()] = np.arange(have.size, dtype=np.int64)
    if want.size and (want.min() < 0 or (inverse[want] < 0).any()):
        raise NotImplementedError(
            f"xlacache.lazy.dynamo: {what} reads storage its input does not hold"
        )
    return inverse[want] if want.size else want


def _scatter_source(have: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element of the input (positions ``have``), the element of the source written
    there (positions ``want``), or -1; every written position must be an input element's."""
    _gather_index(have, want, "as_strided_scatter")
    source = np.full(int(max(have.max(initial=-1), want.max(initial=-1))) + 1, -1)
    source[want.ravel()] = np.arange(want.size)
    return source[have]


def lowering(n: Node, concrete: Concrete) -> Callable[..., Any] | None:
    """The stride-aware lowering of node ``n`` (sizes evaluated with ``concrete``), or None
    when ``n`` does not depend on its input's layout."""
    t = n.target
    src = n.args[0] if n.args else None
    if not isinstance(src, Node) or "val" not in src.meta:
        return None
    if t in FACTORED_TRANSPOSED:
        fake = src.meta["val"]
        if not fake.is_contiguous() or fake.is_complex():
            return None
        factor = LOWERINGS[t]  # torch factors a contiguous real A as A^T (lazy: special.py)
        return lambda a: factor(jnp.swapaxes(a, -1, -2))
    if t is aten.sym_stride.int:
        strides = [concrete(s) for s in src.meta["val"].stride()]
        return lambda x, d: strides[d]
    if t not in LAYOUT_OPS:
        return None
    # the input's layout, computed when the program is traced (not when it is loaded)
    have = functools.cache(lambda: _layout(src, concrete))
    if t is aten.as_strided.default:

        def as_strided(x: Any, size: Any, stride: Any, storage_offset: Any = None) -> Any:
            want = strided_index(size, stride, storage_offset)
            idx = _gather_index(have(), want, "as_strided")
            return x.reshape(-1)[idx]

        return as_strided
    if t is aten.as_strided_scatter.default:

        def as_strided_scatter(
            x: Any, s: Any, size: Any, stride: Any, storage_offset: Any = None
        ) -> Any:
            k = _scatter_source(have(), strided_index(size, stride, storage_offset))
            if not (k >= 0).any():
                return x
            flat = s.astype(x.dtype).reshape(-1)
            return jnp.where(k >= 0, flat[np.maximum(k, 0)], x)

        return as_strided_scatter
    return None


def _static(s: Any) -> int:
    if isinstance(s, torch.SymInt):
        raise NotImplementedError("xlacache.lazy.dynamo: a view's layout has symbolic sizes")
    return int(s)


def _view(args: tuple, kwargs: dict) -> np.ndarray:
    """The positions an ``as_strided`` call's ``size, stride, storage_offset`` name."""
    size, stride = args[0], args[1]
    offset = args[2] if len(args) > 2 else kwargs.get("storage_offset")
    return strided_index(size, stride, offset)


def _run_with_effects(token: Any, op: Any, *args: Any, **kwargs: Any) -> tuple:
    """AOTAutograd's ``with_effects(token, op, ...)`` (an ordered op such as
    ``_linalg_check_errors``, threaded by a CPU token) on lazy tensors: the op, in order."""
    out = op(*args, **kwargs)
    return (token, *out) if isinstance(out, tuple) else (token, out)


class _EagerLayout(torch.fx.Interpreter):
    """Runs a graph on lazy tensors, its layout-dependent ops by their index maps and its
    effectful ops (``with_effects``, which has no rule for lazy tensors) in order."""

    def run_node(self, n: Node) -> Any:
        if n.op == "call_function" and n.target is with_effects:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            return _run_with_effects(*args, **kwargs)
        if n.op != "call_function" or n.target not in LAYOUT_OPS:
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.target is aten.sym_stride.int:
            return _static(n.args[0].meta["val"].stride()[args[1]])
        have = _layout(n.args[0], _static)
        x = args[0]
        if n.target is aten.as_strided.default:
            idx = _gather_index(have, _view(args[1:], kwargs), "as_strided")
            return x.reshape(-1)[torch.from_numpy(idx).to(x.device)]
        s, k = args[1], _scatter_source(have, _view(args[2:], kwargs))
        k = torch.from_numpy(k).to(x.device)
        flat = s.to(x.dtype).reshape(-1)
        return torch.where(k >= 0, flat[k.clamp(min=0)], x)


def lazy_runner(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """What runs ``gm`` op by op on lazy tensors: ``gm`` itself, or, when it has ``as_strided``
    or its kin (or ``with_effects``), an interpreter that gives them eager's layouts."""
    special = (*LAYOUT_OPS, with_effects)
    if any(n.op == "call_function" and n.target in special for n in gm.graph.nodes):
        return _EagerLayout(gm).run
    return gm
