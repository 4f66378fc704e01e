"""float32 as PyTorch defines it: the precision of float32 matrix products and convolutions.

PyTorch computes float32 matmuls in full float32 by default
(``torch.get_float32_matmul_precision() == "highest"``) and lets convolutions use TF32
(``torch.backends.cudnn.allow_tf32``, True by default); XLA:GPU uses TF32 for every float32
dot or convolution whose precision is not ``HIGHEST``. So each such op is recorded with the
setting in force (an attribute: part of its node's digest, so a graph traced under "high"
is never reused under "highest") and lowered with:

===========  ===================================================  ===========================
setting      PyTorch                                              lowered with
===========  ===================================================  ===========================
``highest``  float32 throughout (``ieee``)                        ``Precision.HIGHEST``
``high``     TF32 or bf16x3 allowed (``tf32``)                    ``Precision.HIGH``
``medium``   bf16 allowed (``set_float32_matmul_precision``)      ``DotAlgorithmPreset``
                                                                  ``.BF16_BF16_F32`` (dots;
                                                                  convolutions: ``DEFAULT``)
===========  ===================================================  ===========================

The settings are read, never set, from torch's ``fp32_precision`` flags (torch 2.9+), which
also reflect the older API (``set_float32_matmul_precision``, ``allow_tf32``): reading the
older one after the newer was used raises in PyTorch. A matmul follows
``torch.backends.cuda.matmul.fp32_precision`` (``medium``: the mkldnn matmul flag says
``bf16`` too, as ``set_float32_matmul_precision("medium")`` leaves it), a convolution
``torch.backends.cudnn.conv.fp32_precision``; ``none`` inherits from the backend's, then the
generic flag, and ``none`` at the top is ``ieee``. Ops on other dtypes carry no attribute and
keep their lowering (bfloat16/float16 products accumulate in float32). Products the lowerings
use internally (pooling, interpolation, distances, solvers) are always ``HIGHEST``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from ..torch_internals import aten_ops

MATMUL, CONV = "matmul", "conv"
ATTRIBUTE = "fp32_precision"  # the keyword argument a lowering receives
# the ops whose float32 precision follows the settings, and which setting
OPS: dict[Any, str] = {
    **dict.fromkeys(
        aten_ops(
            "mm", "bmm", "matmul", "dot", "mv", "addmm", "baddbmm", "addmv", "addbmm", "_grouped_mm"
        ),
        MATMUL,
    ),
    **dict.fromkeys(aten_ops("convolution", "convolution_backward"), CONV),
}
_FP32 = (torch.float32, torch.complex64)
_SETTING = {"ieee": "highest", "none": "highest", "tf32": "high", "bf16": "medium"}


def _flag(backend: str, op: str) -> str:
    """A ``fp32_precision`` flag as PyTorch resolves it: the op's, else its backend's, else
    the generic one."""
    get = torch._C._get_fp32_precision_getter
    for b, o in ((backend, op), (backend, "all"), ("generic", "all")):
        value = get(b, o)
        if value != "none":
            return value
    return "none"


def setting(kind: str) -> str:
    """The PyTorch precision of float32 ``kind`` ops now: highest, high or medium."""
    if kind == CONV:
        return _SETTING[_flag("cuda", "conv")]
    name = _SETTING[_flag("cuda", "matmul")]
    if name == "high" and _flag("mkldnn", "matmul") == "bf16":
        return "medium"
    return name


def settings() -> dict[str, str]:
    """Both settings now, by kind (the Dynamo path keys its executables by them)."""
    return {MATMUL: setting(MATMUL), CONV: setting(CONV)}


def attribute(kind: str, dtypes: Any, now: dict[str, str] | None = None) -> str | None:
    """The precision attribute of a ``kind`` op on tensors of ``dtypes``: the setting (now, or
    in ``now``) when one is float32 (or complex64), else None."""
    if not any(d in _FP32 for d in dtypes):
        return None
    return setting(kind) if now is None else now[kind]


def dot_precision(name: str | None, dtype: Any) -> Any:
    """What ``precision=`` a float32 dot lowers with (None: JAX's default)."""
    if name is None:
        return None
    if name == "medium":
        real = jnp.dtype(dtype) == jnp.float32
        return lax.DotAlgorithmPreset.BF16_BF16_F32 if real else lax.Precision.DEFAULT
    return lax.Precision.HIGHEST if name == "highest" else lax.Precision.HIGH


def conv_precision(name: str | None) -> Any:
    """What ``precision=`` a float32 convolution lowers with (None: JAX's default)."""
    if name is None:
        return None
    return {"highest": lax.Precision.HIGHEST, "high": lax.Precision.HIGH}.get(
        name, lax.Precision.DEFAULT
    )


def record_attribute(func: Any, metas: Any) -> tuple[str, str] | None:
    """For the recorder: ``(ATTRIBUTE, value)`` for an op of ``OPS`` whose tensor arguments
    (``metas``) include a float32 one, else None."""
    kind = OPS.get(func)
    if kind is None:
        return None
    value = attribute(kind, [m.dtype for m in metas if isinstance(m, torch.Tensor)])
    return None if value is None else (ATTRIBUTE, value)
