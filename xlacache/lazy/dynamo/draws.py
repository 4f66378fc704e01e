"""Random draws in compiled graphs: the ops AOTAutograd's graphs draw with (dropout is
``rand_like``), each lowered as the lazy runtime's draw of its kind (``lower_random``), keyed
by the call's key (``rng.compiled_key``, an input of the program) and the draw's number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..lowering import lower_random

aten = torch.ops.aten

# each op: the lazy runtime's kind of draw, and its parameters from the node's arguments
RANDOM: dict[Any, tuple[str, Callable[..., tuple]]] = {
    aten.rand_like.default: ("uniform_", lambda x, **kw: ()),
    aten.randn_like.default: ("normal_", lambda x, **kw: ()),
    aten.rand.default: ("uniform_", lambda size, **kw: ()),
    aten.randn.default: ("normal_", lambda size, **kw: ()),
    aten.bernoulli.p: ("bernoulli_", lambda x, p=0.5, **kw: (p,)),
    aten.bernoulli.default: ("bernoulli_tensor", lambda x, **kw: (x,)),
    aten.uniform.default: ("uniform_", lambda x, lo=0.0, hi=1.0, **kw: (lo, hi)),
    aten.exponential.default: ("exponential_", lambda x, lambd=1.0, **kw: (lambd,)),
}
COMPILED_STREAM = 0x636F6D70  # folded into the call's key: apart from the lazy graphs' draws


def draw(op: Any, index: int, out: tuple) -> Callable[..., Any]:
    """The lowering of the ``index``-th random draw of a graph, whose result is ``out``."""
    kind, params = RANDOM[op]

    def lowered(key: Any, *args: Any, **kwargs: Any) -> Any:  # ``generator``: None (plan)
        return lower_random(
            key, kind=kind, index=index, shape=out[0], dtype=out[1], params=params(*args, **kwargs)
        )

    return lowered
