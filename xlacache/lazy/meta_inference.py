"""Shape inference of recorded ops: torch's meta kernels, memoized.

torch's meta kernels are Python and cost ~100-400 us an op; a training loop repeats the same
ops, so ``record`` looks results up in ``META_CACHE`` by (op, exact attribute encoding, input
shapes and dtypes, eager's layouts, torch's default dtype) and runs ``infer`` on a miss.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import torch

from .graph import avals_code, op_code
from .identity import node_prefix
from .lowering import ARGUMENT_CHECKS, META_KERNELS
from .state import STATE
from .tensor import contiguous_meta

# Values: (op, output metas (contiguous; a tuple for multi-output ops, else one), avals,
# node-digest prefix, the multi-output container type or None, eager's layouts, whether the op
# is wide)
META_CACHE: dict[tuple[int, str, tuple, tuple, Any], tuple] = STATE.meta_cache
_META_CACHE_MAX = 200_000
# scalar graph inputs are float32: an op on these dtypes gets its Python floats as constants
WIDE_DTYPES = frozenset((torch.float64, torch.complex128))


def _wide(in_avals: tuple, avals: tuple) -> bool:
    """Does the op read or write float64/complex128 values?"""
    return any(a is not None and a[1] in WIDE_DTYPES for a in (*in_avals, *avals))


def _import_dynamo() -> None:
    """Import Dynamo, as torch does on the first call of a function it keeps Dynamo out of (the
    first meta kernel), and free the reference cycle its import leaves (``torch.fx.wrap``'s
    ``inspect.currentframe()``): it holds every frame below it, the op's tensors among them,
    which would otherwise live until a collection and become outputs of the first graph (a
    program the next step would not reuse)."""
    import torch._dynamo  # noqa: F401

    gc.collect()


def infer(func: Any, margs: list, mkw: dict, akey: str, in_avals: tuple) -> tuple:
    """The ``META_CACHE`` value of ``func`` on these inputs (runs the meta kernel): the op,
    its output metas, avals, node-digest prefix, multi-output container type (or None), the
    layout of each output eager would not lay out contiguously (else None; ``Cell._lay``), and
    whether it is wide (``WIDE_DTYPES``, from ``in_avals`` and the outputs'). Raises eager's
    error where an argument check (``ARGUMENT_CHECKS``) fails."""
    if "torch._dynamo" not in sys.modules:
        _import_dynamo()
    argument_check = ARGUMENT_CHECKS.get(func)
    if argument_check is not None:
        argument_check(*margs, **mkw)
    meta = META_KERNELS.get(func, func)
    try:
        mout = meta(*margs, **mkw)
    except Exception as e:  # noqa: BLE001 - re-raised with the op's name
        numbers = _scalars_as_numbers(func, margs)
        try:
            if numbers is None:
                raise
            mout = meta(*numbers, **mkw)
        except Exception:  # noqa: BLE001
            raise RuntimeError(f"xlacache.lazy: shape inference failed for {func}: {e}") from e
    if isinstance(mout, torch.Tensor) and (mout.is_conj() or mout.is_neg()):
        # lazy values carry no conjugate/negative bit: ``_conj`` computes the conjugate
        mout = torch.empty(mout.shape, dtype=mout.dtype, device="meta")
    if isinstance(mout, torch.Tensor):
        outs, multi = [mout], None
    else:
        outs, multi = list(mout), (list if isinstance(mout, list) else tuple)
    avals = tuple(None if o is None else (tuple(o.shape), o.dtype) for o in outs)
    metas = tuple(None if o is None else contiguous_meta(o) for o in outs)
    layouts = tuple(None if o is None or o.is_contiguous() else o for o in outs)
    if len(META_CACHE) > _META_CACHE_MAX:
        META_CACHE.clear()
    prefix = node_prefix(op_code(func), akey, avals_code(avals))
    wide = _wide(in_avals, avals)
    if multi is None:
        return func, metas[0], avals, prefix, multi, layouts[0], wide
    return func, metas, avals, prefix, multi, layouts, wide


def _scalars_as_numbers(func: Any, margs: list) -> list | None:
    """``margs`` with the 0-d tensors given to ``Scalar`` arguments (autograd formulas do that)
    as numbers of their kind, which is all the meta kernel needs; None if there are none."""
    out, changed = list(margs), False
    for i, a in enumerate(func._schema.arguments[: len(margs)]):
        m = margs[i]
        if str(a.type) == "Scalar" and isinstance(m, torch.Tensor) and m.dim() == 0:
            d = m.dtype
            out[i] = 1j if d.is_complex else 1.0 if d.is_floating_point else d == torch.bool or 1
            changed = True
    return out if changed else None
