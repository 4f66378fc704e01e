"""Matrix products: mm/bmm/matmul/dot/mv, addmm/baddbmm/addmv/addbmm, and ``_grouped_mm``
(mixture-of-experts layers: one product per group of rows, as a ragged dot)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from ..torch_internals import aten_ops
from .checks import GROUP_OFFSETS, check, checked
from .dtypes import cast, promote
from .precision import dot_precision
from .registry import meta_kernel, reg, scaled

aten = torch.ops.aten


def _narrow(dtype: Any) -> bool:
    """bfloat16, float16 and the float8 types: products accumulate in float32."""
    return jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize < 4


def matmul(a: Any, b: Any, fp32_precision: str | None = None) -> Any:
    """``a @ b``; bfloat16/float16/float8 products accumulate in float32, as eager's (and the
    MXU's), and are rounded once (the executor's ``cast``); float32 ones with the precision
    PyTorch's setting gave (``precision.py``)."""
    a, b = promote(a, b)
    if _narrow(a.dtype):
        return jnp.matmul(a, b, preferred_element_type=jnp.float32)
    return jnp.matmul(a, b, precision=dot_precision(fp32_precision, a.dtype))


reg(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.dot.default, aten.mv.default)(
    matmul
)


@reg(aten.addbmm.default)
def _addbmm(
    bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1, fp32_precision: str | None = None
) -> Any:
    return _addmm(bias, a, b, beta, alpha, batch_sum=True, fp32_precision=fp32_precision)


@reg(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def _addmm(
    bias: Any,
    a: Any,
    b: Any,
    beta: Any = 1,
    alpha: Any = 1,
    batch_sum: bool = False,
    fp32_precision: str | None = None,
) -> Any:
    out = matmul(a, b, fp32_precision)
    if batch_sum:
        out = jnp.sum(out, axis=0)
    if _narrow(bias.dtype):
        bias = bias.astype(jnp.float32)
    if jnp.issubdtype(out.dtype, jnp.integer):  # eager casts the factors to the integer type
        alpha, beta = (cast(jnp.asarray(v), out.dtype) for v in (alpha, beta))
        return out * alpha + bias * beta
    if not (isinstance(alpha, int) and alpha == 1):
        out = out * alpha
    if isinstance(beta, int) and beta == 0:
        return out
    return out + scaled(bias, beta)


@reg(*aten_ops("_grouped_mm"))  # torch 2.8+
def _grouped_mm(
    a: Any,
    b: Any,
    offs: Any = None,
    bias: Any = None,
    out_dtype: Any = None,
    fp32_precision: str | None = None,
) -> Any:
    """``aten._grouped_mm``: group ``g`` spans ``offs[g-1]:offs[g]`` of the 2-d operand's
    grouped dimension (rows of ``a`` against ``b[g]``; columns of ``b`` against ``a[g]``;
    with both 2-d, the contraction, one output per group); 3-d by 3-d is a batched product.
    Rows or columns past ``offs[-1]`` are zero (eager leaves them unwritten)."""
    low = a.dtype in (jnp.bfloat16, jnp.float16)
    if low:
        kw: dict[str, Any] = {"preferred_element_type": jnp.float32}
    else:
        kw = {"precision": dot_precision(fp32_precision, a.dtype)}
    if offs is None:
        out = jnp.matmul(a, b, **kw)
    elif a.ndim == 2 and b.ndim == 3:
        out = lax.ragged_dot(a, b, _group_sizes(offs, a.shape[0]), **kw)
    elif a.ndim == 3:  # 2-d ``b``: its columns are grouped
        sizes = _group_sizes(offs, b.shape[1])
        out = lax.ragged_dot(b.T, jnp.swapaxes(a, 1, 2), sizes, **kw).T
    else:  # both 2-d: the contraction is grouped
        numbers = lax.RaggedDotDimensionNumbers(
            dot_dimension_numbers=(([1], [0]), ([], [])),
            lhs_ragged_dimensions=[1],
            rhs_group_dimensions=[],
        )
        sizes = _group_sizes(offs, a.shape[1])
        out = lax.ragged_dot_general(a, b, sizes, numbers, **kw)
    return out.astype(a.dtype)


def _group_sizes(offs: Any, extent: int) -> Any:
    """Each group's size from the groups' end offsets (clipped to ``extent``, as slices are).
    Eager lets a group that starts before the previous one's end overwrite it (its rows start
    at that end), and reads a negative offset from the end: both are flagged."""
    offs = offs.astype(jnp.int32)
    ends = jnp.clip(offs, 0, extent)
    check(GROUP_OFFSETS, (offs < 0) | (ends < jnp.concatenate([ends[:1], ends[:-1]])))
    return jnp.maximum(ends - jnp.concatenate([jnp.zeros(1, jnp.int32), ends[:-1]]), 0)


checked(*aten_ops("_grouped_mm"))


@meta_kernel(*aten_ops("_grouped_mm"))
def _grouped_mm_meta(
    a: Any, b: Any, offs: Any = None, bias: Any = None, out_dtype: Any = None
) -> torch.Tensor:
    """The eager kernel's checks and output shape (torch's meta kernel takes bfloat16 only,
    CUDA's case, where the eager kernel also takes float32 and float16)."""
    floats = (torch.float32, torch.bfloat16, torch.float16)
    _expect(a.dtype in floats and b.dtype in floats, "mat_a and mat_b must be float matrices")
    _expect(a.dim() in (2, 3) and b.dim() in (2, 3), "mat_a and mat_b have to be 2 or 3d")
    if a.dim() == 3 or b.dim() == 3:
        _expect(a.shape[-1] == b.shape[-2], "contraction dimension of mat_a and mat_b must match")
    _expect(
        (offs is not None) == (a.dim() == 2 or b.dim() == 2),
        "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d",
    )
    if offs is not None:
        _expect(offs.dim() == 1 and offs.dtype == torch.int32, "Offsets have to be 1D int32")
    _expect(bias is None, "Bias not supported yet")
    _expect(out_dtype in (None, a.dtype), "Grouped gemm output dtype must match `mat_a` dtype")
    if a.dim() == 2 and b.dim() == 2:
        shape = (offs.shape[0], a.shape[0], b.shape[1])
    elif a.dim() == 2:
        _expect(offs.shape[0] == b.shape[0], "matrix batch sizes have to match")
        shape = (a.shape[0], b.shape[-1])
    elif b.dim() == 2:
        _expect(offs.shape[0] == a.shape[0], "matrix batch sizes have to match")
        shape = (a.shape[1], b.shape[1])
    else:
        _expect(a.shape[0] == b.shape[0], "batched dimension has to match")
        shape = (a.shape[0], a.shape[1], b.shape[-1])
    return torch.empty(shape, dtype=a.dtype, device="meta")


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)
