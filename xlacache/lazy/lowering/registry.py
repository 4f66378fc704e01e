"""The lowering table (aten op -> JAX function) and helpers shared by op families."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch

from .dtypes import cast, jax_dtype

aten = torch.ops.aten
LOWERINGS: dict[Any, Callable[..., Any]] = {}
# ops whose Scalar arguments stay compile-time constants (not graph inputs)
STATIC_SCALAR_OPS = {
    aten.pow.Tensor_Scalar,
    aten.pow.Scalar,
    aten.linalg_vector_norm.default,
    aten.nan_to_num.default,
    aten.embedding_renorm.default,
    aten.multi_margin_loss.default,  # p picks the formula
    aten.multi_margin_loss_backward.default,
}

Fn = Callable[..., Any]


def registrar(
    table: dict[Any, Fn], what: str, wrap: Callable[[Fn], Fn] | None = None
) -> Callable[..., Callable[[Fn], Fn]]:
    """A decorator factory ``deco(*ops)(fn)`` filling ``table`` (with ``wrap(fn)`` if given);
    each op is registered once."""

    def register(*ops: Any) -> Callable[[Fn], Fn]:
        def deco(fn: Fn) -> Fn:
            entry = fn if wrap is None else wrap(fn)
            for op in ops:
                if op in table:
                    raise ValueError(f"xlacache.lazy: {op} already has {what}")
                table[op] = entry
            return fn

        return deco

    return register


LOW_FLOATS = (jnp.bfloat16, jnp.float16)  # computed in float32 (eager's opmath)


def in_opmath(x: Any) -> Any:
    if isinstance(x, (tuple, list)):
        return type(x)(in_opmath(e) for e in x)
    return x.astype(jnp.float32) if getattr(x, "dtype", None) in LOW_FLOATS else x


def opmath(fn: Fn) -> Fn:
    """``fn`` computing bfloat16/float16 values in float32, as eager's kernels do (their
    "opmath" type); the executor rounds results to the predicted dtype once."""

    def lowered(*args: Any, **kw: Any) -> Any:
        return fn(*in_opmath(args), **{k: in_opmath(v) for k, v in kw.items()})

    return lowered


reg = registrar(LOWERINGS, "a lowering")  # ``@reg(aten.op.overload, ...)``
# the ``_foreach_*`` ops recorded as one node each (``lazy.foreach_nodes``): their element op's
# lowering over the lists, added as each is first recorded. Not in LOWERINGS: the dispatcher
# records an op of that table as it comes, and a foreach op is checked first.
FOREACH_LOWERINGS: dict[Any, Fn] = {}


def lowering_of(func: Any) -> Fn:
    """The lowering of a recorded node's op."""
    fn = LOWERINGS.get(func)
    return fn if fn is not None else FOREACH_LOWERINGS[func]


# checks of an op's arguments eager makes that its meta kernel does not (on an argument's
# value: a negative integer exponent), run with the meta kernel's arguments when it runs
ARGUMENT_CHECKS: dict[Any, Fn] = {}
argument_check = registrar(ARGUMENT_CHECKS, "an argument check")
# ops lowered for some arguments only: ``condition(*args, **kwargs)`` (meta tensors, or
# Dynamo's fakes) says whether these are; for the others eager's kernel runs on the CPU
LOWERED_IF: dict[Any, Fn] = {}
lowered_if = registrar(LOWERED_IF, "a lowering condition")
# shape inference for ops whose meta kernel refuses what their eager kernel takes
META_KERNELS: dict[Any, Fn] = {}
meta_kernel = registrar(META_KERNELS, "a meta kernel")
# the same, for math on low-precision floats (elementwise, reductions, special functions)
reg_opmath = registrar(LOWERINGS, "a lowering", opmath)


def norm_dim(dim: int, ndim: int) -> int:
    return dim % ndim if ndim else 0


def norm_dims(dim: Any, ndim: int) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(sorted(norm_dim(d, ndim) for d in dim))


def jdt(dtype: Any) -> Any:
    return None if dtype is None else jax_dtype(dtype)


def lowest(dtype: Any) -> Any:
    """The identity of ``max`` in ``dtype``: -inf, the smallest integer, or False."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf
    return False if dtype == jnp.bool_ else jnp.iinfo(dtype).min


def highest(dtype: Any) -> Any:
    """The identity of ``min`` in ``dtype``: inf, the largest integer, or True."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.inf
    return True if dtype == jnp.bool_ else jnp.iinfo(dtype).max


def upcast(x: Any) -> Any:
    """Upcast low-precision floats for reductions/normalizations."""
    return x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x


def real_sign(x: Any) -> Any:
    """Eager's sign of real values, ``(0 < x) - (x < 0)``: 0 for NaN and for -0.0 (+0.0)."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def as_shape(size: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in size)


def scaled(b: Any, alpha: Any) -> Any:
    """``b * alpha`` as eager scales: an integer or bool ``b`` by ``alpha`` converted to its
    dtype first (``value=2.5`` multiplies int64 values by 2; ``alpha=-1`` on bools is True)."""
    if isinstance(alpha, int) and alpha == 1:
        return b
    dt = getattr(b, "dtype", None)
    if dt is not None and not jnp.issubdtype(dt, jnp.inexact):
        alpha = cast(jnp.asarray(alpha), dt)
    return b * alpha


def scalar_as_vector(*ops: Any) -> None:
    """Lower ``ops`` on a 0-d first input as on a 1-element vector (torch accepts dims 0 and -1
    of a 0-d tensor); the executor reshapes the results to the shapes torch predicted."""
    for op in ops:
        fn = LOWERINGS[op]

        def lowered(x: Any, *args: Any, _fn: Fn = fn, **kw: Any) -> Any:
            if getattr(x, "ndim", None) != 0:
                return _fn(x, *args, **kw)
            vec = [a.reshape(1) if getattr(a, "ndim", None) == 0 else a for a in args]
            return _fn(x.reshape(1), *vec, **kw)

        LOWERINGS[op] = lowered
