"""Random ops on the device RNG: ``random`` nodes keyed by the epoch's RNG leaf (``rng.py``).

Handles the in-place fills (``normal_``, ``uniform_``, ``bernoulli_``...), ``bernoulli``,
``rand_like``/``randn_like`` and ``native_dropout``; ``factories.py`` uses ``random_tensor``
for ``torch.rand``/``torch.randn``. The lowering is ``lowering.random.lower_random``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from . import rng
from .dispatch import SPECIAL, special
from .graph import RANDOM, Node, placeholder
from .lowering.random import CHECKED_DRAWS, check_numbers
from .record import assign, value
from .tensor import LazyTensor, wrap

aten = torch.ops.aten


def random_tensor(kind: str, shape: tuple, dtype: torch.dtype, params: tuple, kw: dict) -> Any:
    """A lazy tensor of random numbers drawn from the device RNG."""
    params = (*params, *[kw[k] for k in sorted(kw) if k != "generator"])
    check_numbers(kind, params)
    leaf, idx = rng.key_for(kw.get("generator"))
    inputs: list[tuple[Node, int]] = [(leaf, 0)]
    static = []
    for p in params:
        if isinstance(p, LazyTensor):
            inputs.append(value(p))
            static.append(placeholder(len(inputs) - 1))
        else:
            static.append(p)
    shape = tuple(shape)
    attrs = (kind, idx, shape, dtype, tuple(static))
    checks = CHECKED_DRAWS.get(kind) if len(inputs) > 1 else None  # its tensors' values
    node = Node(RANDOM, tuple(inputs), attrs, ((shape, dtype),), checks)
    return wrap(torch.empty(shape, dtype=dtype, device="meta"), (node, 0))


def _fill(kind: str, args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    assign(t, random_tensor(kind, tuple(t.shape), t.dtype, args[1:], kwargs))
    return t


for _name in ("normal_", "uniform_", "bernoulli_", "exponential_", "random_", "log_normal_"):
    _packet = getattr(aten, _name)
    for _ov in _packet.overloads():
        op_info = getattr(_packet, _ov)
        if "out" not in _ov:
            SPECIAL[op_info] = partial(_fill, _name)


@special(aten.bernoulli.p)
def _bernoulli_p(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    gen = {"generator": kwargs.get("generator")}
    return random_tensor("bernoulli_", tuple(t.shape), t.dtype, (p,), gen)


@special(aten.bernoulli.default)
def _bernoulli(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    gen = {"generator": kwargs.get("generator")}
    return random_tensor("bernoulli_tensor", tuple(t.shape), t.dtype, (t,), gen)


@special(aten.bernoulli.Tensor)
def _bernoulli_tensor_p(args: tuple, kwargs: dict) -> LazyTensor:
    t, p = args[0], args[1] if len(args) > 1 else kwargs["p"]
    gen = {"generator": kwargs.get("generator")}
    return random_tensor("bernoulli_", tuple(t.shape), t.dtype, (p,), gen)


@special(aten.native_dropout.default)
def _native_dropout(args: tuple, kwargs: dict) -> Any:
    x, p, train = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("train")
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    keep = random_tensor("bernoulli_", tuple(x.shape), torch.bool, (1.0 - p,), {})
    out = x * keep * (1.0 / (1.0 - p))
    return out, keep


def _like(kind: str, args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    dtype = kwargs.get("dtype") or t.dtype
    return random_tensor(kind, tuple(t.shape), dtype, (), {})


@special(aten.normal_functional.default)
def _normal_functional(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    mean = args[1] if len(args) > 1 else kwargs.get("mean", 0.0)
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    gen = {"generator": kwargs.get("generator")}
    return random_tensor("normal_", tuple(t.shape), t.dtype, (mean, std), gen)


@special(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor)
def _normal(args: tuple, kwargs: dict) -> LazyTensor:
    """``torch.normal`` with a tensor mean or std: one draw, its std checked on the device."""
    mean = args[0] if args else kwargs.get("mean", 0.0)
    std = args[1] if len(args) > 1 else kwargs.get("std", 1.0)
    meta = [a._c._meta if isinstance(a, LazyTensor) else a for a in (mean, std)]
    out = torch.normal(*meta)
    gen = {"generator": kwargs.get("generator")}
    return random_tensor("normal_", tuple(out.shape), out.dtype, (mean, std), gen)


special(aten.rand_like.default)(partial(_like, "uniform_"))
special(aten.randn_like.default)(partial(_like, "normal_"))
