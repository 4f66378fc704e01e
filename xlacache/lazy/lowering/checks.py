"""Index checks inside programs: eager raises for an index out of range, XLA clamps or fills.

A lowering that takes indices calls ``in_range``; while a graph is being lowered
(``collecting``), each call adds a flag "some index is out of range" to the program, and the
program returns their ``any`` as one more output. The runtime reads that output when values
come back to the host (``lazy.device_checks``), as CUDA reports a device-side assert, and
raises. Graphs without such ops (``CHECKED_OPS``) have no extra output.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp

CHECKED_OPS: set[Any] = set()  # aten overloads whose lowering calls in_range

_local = threading.local()


def checked(*ops: Any) -> None:
    """Say that these ops' lowerings check their indices (their graphs get a flag output)."""
    CHECKED_OPS.update(ops)


@contextlib.contextmanager
def collecting() -> Iterator[list[Any]]:
    """The flags ``in_range`` adds while a program is traced."""
    previous = getattr(_local, "flags", None)
    _local.flags = flags = []
    try:
        yield flags
    finally:
        _local.flags = previous


def in_range(index: Any, size: int, negative: bool = False) -> None:
    """Flag entries of ``index`` outside ``[0, size)`` (``[-size, size)`` with ``negative``)."""
    flags = getattr(_local, "flags", None)
    if flags is None or not hasattr(index, "dtype") or not jnp.issubdtype(index.dtype, jnp.integer):
        return
    low = -size if negative else 0
    flags.append(jnp.any((index < low) | (index >= size)))


def any_flag(flags: list[Any]) -> Any:
    """The program's check output: True when some index was out of range."""
    return jnp.any(jnp.stack(flags)) if flags else jnp.zeros((), jnp.bool_)
