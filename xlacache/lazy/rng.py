"""Device RNG state, seeded by ``torch.manual_seed``.

Random ops recorded during one trace epoch (the ops between two barriers) share one RNG leaf that
holds ``(seed, epoch)`` and differ by their index within the epoch, which is a static attribute.
So a steady loop sees the same graph every step (no recompilation) while every step draws new
numbers: the epoch is a graph input.
"""

from __future__ import annotations

import numpy as np
import torch

from .graph import Node, rng_node

_state = {"torch_seed": None, "seed": 0, "epoch": 0, "index": 0}
_leaf: list[Node | None] = [None]


def _check_seed() -> None:
    s = torch.initial_seed()
    if s != _state["torch_seed"]:  # torch.manual_seed was called: restart the device stream
        _state.update(torch_seed=s, seed=s & 0xFFFFFFFF, epoch=0, index=0)
        _leaf[0] = None


def next_key() -> tuple[Node, int]:
    """The epoch's RNG leaf and the next op index within the epoch."""
    _check_seed()
    if _leaf[0] is None:
        key = np.array([_state["seed"], _state["epoch"]], dtype=np.uint32)
        _leaf[0] = rng_node(key)
    i = _state["index"]
    _state["index"] = i + 1
    return _leaf[0], i


def new_epoch() -> None:
    """Called at every barrier that runs pending ops."""
    if _leaf[0] is not None:
        _state["epoch"] += 1
        _state["index"] = 0
        _leaf[0] = None


def set_seed(seed: int) -> None:
    """Reseed the device stream (``xm.set_rng_state``)."""
    _state.update(torch_seed=torch.initial_seed(), seed=seed & 0xFFFFFFFF, epoch=0, index=0)
    _leaf[0] = None


def get_seed() -> int:
    _check_seed()
    return int(_state["seed"])


def hook_manual_seed() -> None:
    """Make ``torch.manual_seed`` also restart the device stream (same seed, same numbers)."""
    import torch.random

    orig = torch.random.manual_seed
    if getattr(orig, "_xlacache_lazy", False):
        return

    def manual_seed(seed: int) -> torch.Generator:
        gen = orig(seed)
        set_seed(int(seed))
        return gen

    manual_seed._xlacache_lazy = True  # type: ignore[attr-defined]
    manual_seed.__doc__ = orig.__doc__
    torch.random.manual_seed = manual_seed
    torch.manual_seed = manual_seed
