"""The aten -> JAX lowering table, filled by one module per op family.

Each entry takes the op's arguments as the aten schema orders them, with tensors replaced by jax
values, and returns a jax value (or a tuple for multi-output ops). The executor casts results to
the dtype and shape torch's meta kernel predicted, so lowerings may be loose about dtype
promotion. Ops not in the table are decomposed with PyTorch's decompositions first
(``dispatch.dispatch``). Backward ops of composite forwards are lowered as one node each (often
``jax.vjp`` of the forward lowering) instead of the dozens of nodes a decomposition would record.

A new lowering goes in its family's module with ``@reg(aten.op.overload)``:

==================  ==============================================================
``elementwise``     arithmetic, comparisons, logical/bitwise, rounding, unary math
``activations``     relu, gelu, silu, elu, softplus, hardtanh, ... and their backward ops
``factories``       zeros/ones/full/arange/eye/linspace, ``*_like``, ``new_*``, casts
``reductions``      sum/mean/prod/extrema/var/std/norms/cumulative, sort, topk
``shapes``          views and reshapes, their ``*_scatter`` inverses, cat/stack, pad
``indexing``        index/index_put, gather/scatter, masked_fill, embedding
``embedding_bag``   ``F.embedding_bag`` and its backward ops, as segment reductions
``linalg``          matrix products
``solvers``         Cholesky/LU/QR/SVD/eigh, solves, inverses, determinants
``nn``              softmax, layer/batch norm, losses
``margins``         the margin losses (multi-class, multi-label, soft) and their backward ops
``conv``            convolution and pooling
``resample``        interpolation and padding backward ops
``grid_sample``     ``F.grid_sample``: the 3-d sampler, both samplers' backward ops
``antialias``       antialiased bilinear/bicubic interpolation and its backward ops
``special_fns``     gamma/erf/Bessel/zeta families, orthogonal polynomials
``accurate``        ``exp2``/``sinh``/``cosh`` where XLA's own expansions lose accuracy
``spectral``        complex numbers (``complex``, ``polar``, real/complex views), FFTs
``random``          random draws (``lower_random``; not in the table: one ``random`` node)
``library_ops``     ops libraries register (``transformers::``), adopted by name and schema
==================  ==============================================================

``precision`` says how float32 matrix products and convolutions lower under PyTorch's
precision settings (each such op records the setting as its ``fp32_precision`` attribute).
``scalar_conversions`` is eager's range check of a Python number converted to a tensor's
dtype (``fill_(300)`` on int8), run as the op is recorded.
``checks`` lets a lowering flag what eager checks on values (indices in range, probabilities
in [0, 1], integer divisors not zero); the program returns the flags (``lazy.device_checks``
reads them).
``dtypes`` holds the torch <-> JAX dtype map (same widths: int64 stays int64), torch's
conversion rules (``cast``) and ``x64()``, the scope the runtime lowers and runs in.
"""

from __future__ import annotations

from . import (  # noqa: F401
    activations,
    antialias,
    conv,
    elementwise,
    embedding_bag,
    factories,
    grid_sample,
    indexing,
    library_ops,
    linalg,
    margins,
    nn,
    precision,
    reductions,
    resample,
    shapes,
    solvers,
    special_fns,
    spectral,
)
from .dtypes import BIT_VIEWS, cast, jax_dtype, x64
from .random import lower_random
from .registry import (
    ARGUMENT_CHECKS,
    FOREACH_LOWERINGS,
    LOWERED_IF,
    LOWERINGS,
    META_KERNELS,
    STATIC_SCALAR_OPS,
    lowering_of,
    reg,
)
from .scalar_conversions import SCALAR_CONVERSIONS, check_scalar_conversions

__all__ = [
    "ARGUMENT_CHECKS",
    "FOREACH_LOWERINGS",
    "LOWERED_IF",
    "META_KERNELS",
    "BIT_VIEWS",
    "LOWERINGS",
    "SCALAR_CONVERSIONS",
    "STATIC_SCALAR_OPS",
    "cast",
    "check_scalar_conversions",
    "jax_dtype",
    "lower_random",
    "lowering_of",
    "precision",
    "reg",
    "x64",
]
