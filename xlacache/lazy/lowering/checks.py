"""Checks inside programs: where eager raises on values (an index out of range, a
probability outside [0, 1], an integer division by zero, a negative standard deviation), XLA
computes on (it clamps an index, fills a gather, takes the log of a negative number, returns
some integer, draws with the parameters given).

A lowering that eager checks calls ``check`` (``in_range`` for indices); while a graph is
being lowered (``collecting``), each call adds a flag to the program, and the program returns
one more output: an int32 whose bit ``kind`` says a check of that kind failed. The runtime
reads it when values come back to the host (``lazy.device_checks``), as CUDA reports a
device-side assert, and raises. Graphs without such ops (``CHECKED_OPS``) have no extra output.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp

# the kinds of check (bits of a program's check output; messages in ``lazy.device_checks``)
INDEX = 0  # an index out of range
INPUT_PROBABILITY = 1  # binary_cross_entropy's input outside [0, 1]
TARGET_PROBABILITY = 2  # binary_cross_entropy's target outside [0, 1]
ZERO_DIVISION = 3  # an integer division or remainder by zero
BERNOULLI_P = 4  # bernoulli's probabilities (a tensor) outside [0, 1]
NORMAL_STD = 5  # normal's standard deviations (a tensor) below 0
GROUP_OFFSETS = 6  # a grouped product's offsets negative or decreasing
BAG_OFFSETS = 7  # embedding_bag's offsets not from 0, decreasing, or past the input

CHECKED_OPS: set[Any] = set()  # aten overloads whose lowering calls check
SIGNATURE = [[], "int32"]  # the check output, as an executable's signature lists it

_local = threading.local()


def checked(*ops: Any) -> None:
    """Say that these ops' lowerings check values (their graphs get a check output)."""
    CHECKED_OPS.update(ops)


@contextlib.contextmanager
def collecting() -> Iterator[list[tuple[int, Any]]]:
    """The flags ``check`` adds while a program is traced."""
    previous = getattr(_local, "flags", None)
    _local.flags = flags = []
    try:
        yield flags
    finally:
        _local.flags = previous


def check(kind: int, bad: Any) -> None:
    """Flag a failed check of ``kind`` where any element of ``bad`` is true."""
    flags = getattr(_local, "flags", None)
    if flags is not None:
        flags.append((kind, jnp.any(bad)))


def in_range(index: Any, size: int, negative: bool = False) -> None:
    """Flag entries of ``index`` outside ``[0, size)`` (``[-size, size)`` with ``negative``)."""
    if not hasattr(index, "dtype") or not jnp.issubdtype(index.dtype, jnp.integer):
        return
    low = -size if negative else 0
    check(INDEX, (index < low) | (index >= size))


def probability(kind: int, p: Any) -> None:
    """Flag values of ``p`` outside ``[0, 1]`` (NaN included, as eager's check)."""
    check(kind, ~((p >= 0) & (p <= 1)))


def check_output(flags: list[tuple[int, Any]]) -> Any:
    """The program's check output: bit ``kind`` set where a check of that kind failed."""
    out = jnp.zeros((), jnp.int32)
    for kind, failed in flags:
        out = out | (failed.astype(jnp.int32) << kind)
    return out


def returning_checks(run: Callable[..., list]) -> Callable[..., list]:
    """``run`` (a program's function, returning its outputs) with its check output last."""

    def fn(*args: Any) -> list:
        with collecting() as flags:
            out = run(*args)
        return [*out, check_output(flags)]

    return fn
