"""``torch.autocast("xla")``: torch_xla's autocast policy, as kernels on the ``AutocastXLA`` key.

Lazy tensors carry the ``AutocastXLA`` dispatch key, which torch leaves empty without torch_xla
(so every op failed inside ``torch.autocast("xla")``). ``install()`` (at the device's first use)
registers a fallthrough for all ops and, for the ops torch_xla's policy names, a kernel that
casts the floating-point ``xla`` tensor arguments and calls the op again below the autocast
key (autograd records the casts):

* ``lower``: to the autocast dtype (``torch.get_autocast_dtype("xla")``, bfloat16 by default):
  matrix products, convolutions, ``linear``, ``prelu``, ``relu``;
* ``fp32``: to float32: losses, normalizations, softmax/log-softmax, reductions such as ``prod``,
  FFTs and linear algebra;
* ``promote``: to the widest floating type among the arguments (``cat``, ``stack``,
  ``index_copy``).

``torch.autocast("cpu")`` does not apply to ``xla`` tensors (as in eager PyTorch for any other
device); ``warn_cpu_autocast`` says so once instead of staying silent.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .state import STATE


def _autocast_xla_keyset() -> Any:
    """``DispatchKeySet(AutocastXLA)``: torch's Python enum does not name that key, but it is
    the one key ``torch.autocast("xla")`` takes out of the thread's excluded set."""
    outside = torch._C._dispatch_tls_local_exclude_set()
    with torch.autocast("xla", dtype=torch.bfloat16):
        inside = torch._C._dispatch_tls_local_exclude_set()
    return outside - inside


_AUTOCAST_XLA = _autocast_xla_keyset()
_LIBS: list[torch.library.Library] = []

_LOWER = (
    "conv1d conv1d.padding conv2d conv2d.padding conv3d conv3d.padding bmm mm baddbmm addmm "
    "addbmm linear matmul conv_tbc conv_transpose1d conv_transpose2d.input conv_transpose3d.input "
    "prelu relu"
)
_FP32 = (
    "batch_norm _log_softmax binary_cross_entropy grid_sampler polar prod prod.dim_int "
    "prod.dim_Dimname quantile quantile.scalar nanquantile nanquantile.scalar stft stft.center "
    "cdist grid_sampler_2d grid_sampler_3d trace view_as_complex cholesky cholesky_inverse "
    "cholesky_solve inverse lu_solve orgqr ormqr pinverse reflection_pad1d reflection_pad2d "
    "replication_pad1d replication_pad2d replication_pad3d mse_loss cosine_embedding_loss "
    "nll_loss nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy_loss "
    "l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss "
    "multi_margin_loss ctc_loss.IntList ctc_loss.Tensor kl_div multilabel_margin_loss "
    "binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn "
    "fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft "
    "linalg_cond linalg_cond.p_str linalg_matrix_rank linalg_matrix_rank.tol_tensor "
    "linalg_matrix_rank.atol_rtol_tensor linalg_matrix_rank.atol_rtol_float linalg_solve "
    "linalg_cholesky linalg_svdvals linalg_eigvals linalg_eigvalsh linalg_inv "
    "linalg_householder_product linalg_tensorinv linalg_tensorsolve "
    "fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd triangular_solve "
    "multilabel_margin_loss_forward linalg_qr linalg_cholesky_ex linalg_svd linalg_eig "
    "linalg_eigh linalg_lstsq linalg_inv_ex"
)
_PROMOTE = "stack cat index_copy index_copy.dimname"

# the ops that reach the lazy dispatcher when a lower-precision op runs in fp32 (for the warning)
CPU_AUTOCAST_OPS = frozenset(
    (
        torch.ops.aten.mm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.baddbmm.default,
        torch.ops.aten.convolution.default,
    )
)


def _eligible(x: Any) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.device.type == "xla"
        and x.is_floating_point()
        and x.dtype != torch.float64
    )


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if _eligible(x) and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)) and any(_eligible(e) for e in x):
        return type(x)(_cast(e, dtype) for e in x)
    return x


def _promoted(args: tuple, kwargs: dict) -> torch.dtype:
    """torch's autocast ``promote`` rule: the lower dtype unless another floating type joins."""
    out = torch.get_autocast_dtype("xla")
    flat: list[Any] = []
    for a in (*args, *kwargs.values()):
        flat.extend(a if isinstance(a, (list, tuple)) else (a,))
    for t in flat:
        if _eligible(t) and t.dtype != out:
            out = torch.float32
    return out


def _kernel(op: Any, policy: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            dtype = torch.get_autocast_dtype("xla")
        elif policy == "fp32":
            dtype = torch.float32
        else:
            dtype = _promoted(args, kwargs)
        args = tuple(_cast(a, dtype) for a in args)
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_XLA):
            return op(*args, **kwargs)

    return kernel


def _overload(name: str) -> Any:
    packet_name, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None or (overload or "default") not in packet.overloads():
        return None
    return getattr(packet, overload or "default")


def install() -> Callable[[], None]:
    """Register the fallthrough and the policy kernels on ``AutocastXLA`` (once: they concern
    ``xla`` tensors only) and track ``torch.autocast("cpu")`` (at the device's first use);
    the undo puts ``torch.set_autocast_enabled`` back."""
    if _LIBS:
        return _track_cpu_autocast()
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(torch.library.fallthrough_kernel, "AutocastXLA")
    aten = torch.library.Library("aten", "IMPL")
    for names, policy in ((_LOWER, "lower"), (_FP32, "fp32"), (_PROMOTE, "promote")):
        for name in names.split():
            op = _overload(name)
            if op is not None:
                aten.impl(op, _kernel(op, policy), "AutocastXLA")
    _LIBS.extend((everything, aten))
    return _track_cpu_autocast()


class _CpuAutocast(threading.local):
    on = False


_CPU = _CpuAutocast()


def _track_cpu_autocast() -> Callable[[], None]:
    """Track ``torch.autocast("cpu")`` per thread: inside ``__torch_dispatch__`` torch reports
    every autocast as off, so the state is read where ``torch.autocast`` sets it (a wrapper of
    ``torch.set_autocast_enabled`` that calls torch's own first); the undo puts torch's back."""
    orig = torch.set_autocast_enabled
    if getattr(orig, "_xlacache_lazy", False):
        return lambda: None

    def set_autocast_enabled(*args: Any, **kwargs: Any) -> None:
        orig(*args, **kwargs)
        _CPU.on = torch.is_autocast_enabled("cpu") and not torch.is_autocast_enabled("xla")

    set_autocast_enabled._xlacache_lazy = True  # type: ignore[attr-defined]
    set_autocast_enabled.__doc__ = orig.__doc__
    torch.set_autocast_enabled = set_autocast_enabled

    def undo() -> None:
        if torch.set_autocast_enabled is set_autocast_enabled:
            torch.set_autocast_enabled = orig
        _CPU.on = False

    return undo


def warn_cpu_autocast() -> None:
    """Once: ``torch.autocast("cpu")`` is on while ops run on ``xla`` tensors in their dtype."""
    if STATE.warned_cpu_autocast or not _CPU.on:
        return
    STATE.warned_cpu_autocast = True
    warnings.warn(
        'xlacache.lazy: torch.autocast("cpu") does not apply to xla tensors (as in eager '
        "PyTorch for any other device): these ops run in their own dtype. Use "
        'torch.autocast("xla", dtype=torch.bfloat16) for the device.',
        stacklevel=4,
    )
