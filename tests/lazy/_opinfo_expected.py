"""Expected results of the OpInfo conformance suite (``test_opinfo.py``) that are not "native".

Keyed by (mode, op id); the value is the status the op has today and why. An op that does
better than its entry fails the suite: take it off (the list only shrinks). A wrong result
is never listed. The statuses are those of each op's first sample (the suite runs one);
``benchmarks/opinfo_conformance.py`` reports them as ``first`` in its JSON output.
"""

from __future__ import annotations

DYNAMIC = "its output shape depends on the data (nonzero, masked_select, unique, bincount)"
EIG = "eigendecomposition of non-symmetric matrices: XLA implements it on CPU only"
SPARSE = "sparse tensors are not supported on the device"
COMPLEX32 = "complex32 has no device dtype"
MODE_INDEX = "eager picks the index among equal values by std::sort (no lowering can match it)"
RANDOM_CPU = "random draws from the CPU generator (the one the OpInfo seeds), as eager"

EXPECTED: dict[tuple[str, str], tuple[str, str]] = {
    ("float32", "_segment_reduce.lengths"): ("fallback", "no lowering: aten::segment_reduce"),
    ("float32", "_segment_reduce.offsets"): ("fallback", "no lowering: aten::segment_reduce"),
    ("float32", "_upsample_bilinear2d_aa"): (
        "fallback",
        "no lowering: aten::_upsample_bilinear2d_aa",
    ),
    ("float32", "argwhere"): ("fallback", DYNAMIC),
    ("float32", "chalf"): ("error", COMPLEX32),
    ("float32", "combinations"): ("fallback", DYNAMIC),
    ("float32", "geqrf"): ("fallback", "no lowering: aten::geqrf"),
    ("float32", "hash_tensor"): ("fallback", "no lowering: aten::hash_tensor"),
    ("float32", "histc"): ("fallback", "no lowering: aten::histc"),
    ("float32", "histogram"): ("fallback", "no lowering: aten::histogram"),
    ("float32", "histogramdd"): ("fallback", "no lowering: aten::_histogramdd_*"),
    ("float32", "linalg.eig"): ("fallback", EIG),
    ("float32", "linalg.eigvals"): ("fallback", EIG),
    ("float32", "linalg.ldl_factor"): ("fallback", "no lowering: aten::linalg_ldl_factor_ex"),
    ("float32", "linalg.ldl_factor_ex"): ("fallback", "no lowering: aten::linalg_ldl_factor_ex"),
    ("float32", "linalg.ldl_solve"): ("fallback", "no lowering: aten::linalg_ldl_solve"),
    ("float32", "linalg.lstsq"): ("fallback", "no lowering: aten::linalg_lstsq"),
    ("float32", "linalg.lstsq.grad_oriented"): ("fallback", "no lowering: aten::linalg_lstsq"),
    ("float32", "masked_select"): ("fallback", DYNAMIC),
    ("float32", "matrix_exp"): ("fallback", "no lowering: aten::linalg_matrix_exp"),
    ("float32", "mode"): ("fallback", MODE_INDEX),
    ("float32", "nn.functional.ctc_loss"): ("fallback", "no lowering: aten::_ctc_loss"),
    ("float32", "nn.functional.fractional_max_pool2d"): ("fallback", RANDOM_CPU),
    ("float32", "nn.functional.fractional_max_pool3d"): ("fallback", RANDOM_CPU),
    ("float32", "nonzero"): ("fallback", DYNAMIC),
    ("float32", "ormqr"): ("fallback", "no lowering: aten::ormqr"),
    ("float32", "sparse.mm.reduce"): ("error", SPARSE),
    ("float32", "sparse.sampled_addmm"): ("error", SPARSE),
    ("float32", "special.airy_ai"): ("fallback", "no lowering: aten::special_airy_ai"),
    ("float32", "special.bessel_j0"): ("fallback", "no lowering: prims::bessel_j0"),
    ("float32", "special.bessel_j1"): ("fallback", "no lowering: prims::bessel_j1"),
    ("float32", "special.bessel_y0"): ("fallback", "no lowering: aten::special_bessel_y0"),
    ("float32", "special.bessel_y1"): ("fallback", "no lowering: aten::special_bessel_y1"),
    ("float32", "special.modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k0",
    ),
    ("float32", "special.modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k1",
    ),
    ("float32", "special.scaled_modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k0",
    ),
    ("float32", "special.scaled_modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k1",
    ),
    ("float32", "to_sparse"): ("error", SPARSE),
    ("float32", "unique"): ("fallback", DYNAMIC),
    ("float32", "unique_consecutive"): ("fallback", DYNAMIC),
    ("float32-grad", "_segment_reduce.lengths"): (
        "fallback",
        "no lowering: aten::_segment_reduce_backward, aten::segment_reduce",
    ),
    ("float32-grad", "_segment_reduce.offsets"): (
        "fallback",
        "no lowering: aten::_segment_reduce_backward, aten::segment_reduce",
    ),
    ("float32-grad", "_upsample_bilinear2d_aa"): (
        "fallback",
        "no lowering: aten::_upsample_bilinear2d_aa, aten::_upsample_bilinear2d_aa_backward",
    ),
    ("float32-grad", "chalf"): ("error", COMPLEX32),
    ("float32-grad", "combinations"): ("fallback", DYNAMIC),
    ("float32-grad", "linalg.eig"): ("fallback", EIG),
    ("float32-grad", "linalg.eigvals"): ("fallback", EIG),
    ("float32-grad", "linalg.lstsq"): ("fallback", "no lowering: aten::linalg_lstsq"),
    ("float32-grad", "linalg.lstsq.grad_oriented"): ("fallback", "no lowering: aten::linalg_lstsq"),
    ("float32-grad", "masked_select"): ("fallback", DYNAMIC),
    ("float32-grad", "matrix_exp"): ("fallback", "no lowering: aten::linalg_matrix_exp"),
    ("float32-grad", "mode"): ("fallback", MODE_INDEX),
    ("float32-grad", "nn.functional.ctc_loss"): (
        "fallback",
        "no lowering: aten::_ctc_loss, aten::_ctc_loss_backward",
    ),
    ("float32-grad", "nn.functional.fractional_max_pool2d"): ("fallback", RANDOM_CPU),
    ("float32-grad", "nn.functional.fractional_max_pool3d"): ("fallback", RANDOM_CPU),
    ("float32-grad", "nn.functional.multi_margin_loss"): (
        "fallback",
        "no lowering: aten::multi_margin_loss_backward",
    ),
    ("float32-grad", "nn.functional.multilabel_margin_loss"): (
        "fallback",
        "no lowering: aten::multilabel_margin_loss_backward",
    ),
    ("float32-grad", "ormqr"): ("fallback", "no lowering: aten::ormqr"),
    ("float32-grad", "sparse.mm.reduce"): ("error", SPARSE),
    ("float32-grad", "sparse.sampled_addmm"): ("error", SPARSE),
    ("float32-grad", "to_sparse"): ("error", SPARSE),
    ("bfloat16", "_segment_reduce.lengths"): ("fallback", "no lowering: aten::segment_reduce"),
    ("bfloat16", "_segment_reduce.offsets"): ("fallback", "no lowering: aten::segment_reduce"),
    ("bfloat16", "argwhere"): ("fallback", DYNAMIC),
    ("bfloat16", "chalf"): ("error", COMPLEX32),
    ("bfloat16", "combinations"): ("fallback", DYNAMIC),
    ("bfloat16", "hash_tensor"): ("fallback", "no lowering: aten::hash_tensor"),
    ("bfloat16", "histc"): ("fallback", "no lowering: aten::histc"),
    ("bfloat16", "masked_select"): ("fallback", DYNAMIC),
    ("bfloat16", "matrix_exp"): ("fallback", "no lowering: aten::linalg_matrix_exp"),
    ("bfloat16", "mode"): ("fallback", MODE_INDEX),
    ("bfloat16", "nn.functional.fractional_max_pool2d"): ("fallback", RANDOM_CPU),
    ("bfloat16", "nn.functional.fractional_max_pool3d"): ("fallback", RANDOM_CPU),
    ("bfloat16", "nonzero"): ("fallback", DYNAMIC),
    ("bfloat16", "sparse.mm.reduce"): ("error", SPARSE),
    ("bfloat16", "to_sparse"): ("error", SPARSE),
    ("bfloat16", "unique"): ("fallback", DYNAMIC),
    ("bfloat16", "unique_consecutive"): ("fallback", DYNAMIC),
    ("int64", "argwhere"): ("fallback", DYNAMIC),
    ("int64", "bincount"): ("fallback", DYNAMIC),
    ("int64", "chalf"): ("error", COMPLEX32),
    ("int64", "combinations"): ("fallback", DYNAMIC),
    ("int64", "hash_tensor"): ("fallback", "no lowering: aten::hash_tensor"),
    ("int64", "masked_select"): ("fallback", DYNAMIC),
    ("int64", "mode"): ("fallback", MODE_INDEX),
    ("int64", "nonzero"): ("fallback", DYNAMIC),
    ("int64", "special.airy_ai"): ("fallback", "no lowering: aten::special_airy_ai"),
    ("int64", "special.bessel_j0"): ("fallback", "no lowering: prims::bessel_j0"),
    ("int64", "special.bessel_j1"): ("fallback", "no lowering: prims::bessel_j1"),
    ("int64", "special.bessel_y0"): ("fallback", "no lowering: aten::special_bessel_y0"),
    ("int64", "special.bessel_y1"): ("fallback", "no lowering: aten::special_bessel_y1"),
    ("int64", "special.modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k0",
    ),
    ("int64", "special.modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k1",
    ),
    ("int64", "special.scaled_modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k0",
    ),
    ("int64", "special.scaled_modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k1",
    ),
    ("int64", "to_sparse"): ("error", SPARSE),
    ("int64", "unique"): ("fallback", DYNAMIC),
    ("int64", "unique_consecutive"): ("fallback", DYNAMIC),
    ("bool", "argwhere"): ("fallback", DYNAMIC),
    ("bool", "chalf"): ("error", COMPLEX32),
    ("bool", "combinations"): ("fallback", DYNAMIC),
    ("bool", "hash_tensor"): ("fallback", "no lowering: aten::hash_tensor"),
    ("bool", "masked_select"): ("fallback", DYNAMIC),
    ("bool", "mode"): ("fallback", MODE_INDEX),
    ("bool", "nonzero"): ("fallback", DYNAMIC),
    ("bool", "special.airy_ai"): ("fallback", "no lowering: aten::special_airy_ai"),
    ("bool", "special.bessel_j0"): ("fallback", "no lowering: prims::bessel_j0"),
    ("bool", "special.bessel_j1"): ("fallback", "no lowering: prims::bessel_j1"),
    ("bool", "special.bessel_y0"): ("fallback", "no lowering: aten::special_bessel_y0"),
    ("bool", "special.bessel_y1"): ("fallback", "no lowering: aten::special_bessel_y1"),
    ("bool", "special.modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k0",
    ),
    ("bool", "special.modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_modified_bessel_k1",
    ),
    ("bool", "special.scaled_modified_bessel_k0"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k0",
    ),
    ("bool", "special.scaled_modified_bessel_k1"): (
        "fallback",
        "no lowering: aten::special_scaled_modified_bessel_k1",
    ),
    ("bool", "to_sparse"): ("error", SPARSE),
    ("bool", "unique"): ("fallback", DYNAMIC),
    ("bool", "unique_consecutive"): ("fallback", DYNAMIC),
    # random ops without a device lowering: they run on the CPU fallback, drawing from the CPU
    # generator (checked by shape and dtype: their values depend on the seed)
    ("float32", "multinomial"): ("fallback", "no lowering: aten::multinomial"),
    ("bfloat16", "multinomial"): ("fallback", "no lowering: aten::multinomial"),
    ("float32", "nn.functional.rrelu"): ("fallback", "no lowering: aten::rrelu_with_noise"),
    ("float32-grad", "nn.functional.rrelu"): ("fallback", "no lowering: aten::rrelu_with_noise"),
    ("bfloat16", "nn.functional.rrelu"): ("fallback", "no lowering: aten::rrelu_with_noise"),
    ("float32", "randint_like"): ("fallback", "no lowering: aten::randint_like"),
    ("bfloat16", "randint_like"): ("fallback", "no lowering: aten::randint_like"),
    ("int64", "randint_like"): ("fallback", "no lowering: aten::randint_like"),
}
