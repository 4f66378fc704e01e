"""Index checks the device ran, read back as CUDA reports a device-side assert.

A program whose graph holds an op that takes indices (``lowering.checks``) returns one more
value: whether some index was out of range (eager raises ``IndexError`` there; XLA clamps the
index or fills the result). The runtime keeps those flags and reads them when values come back
to the host (``.cpu()``, ``.item()``, printing: the read waits for the device anyway), at
``wait_device_ops``, and, for flags already computed, at each ``sync``. A set flag raises
``DeviceIndexError``; the values computed from that index are wrong, as after a CUDA assert.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from . import metrics

# flags kept before the oldest is read (it ran long ago: reading it does not wait)
MAX_PENDING = 256

_pending: deque[Any] = deque()
_lock = threading.Lock()


class DeviceIndexError(IndexError, RuntimeError):
    """An index out of range in a program that ran on the device."""


MESSAGE = (
    "xlacache.lazy: an index was out of range in a program that ran on the device (indexing, "
    "index_put, gather, scatter, index_select, embedding, take, put, or an nll_loss/"
    "cross_entropy target); eager raises IndexError there, and values computed from it are wrong"
)


def note(flag: Any) -> None:
    """Keep a program's check output until it is read."""
    with _lock:
        _pending.append(flag)
        old = _pending.popleft() if len(_pending) > MAX_PENDING else None
    if old is not None and bool(np.asarray(old)):
        _fail()


def raise_if_set(wait: bool = True) -> None:
    """Read the kept flags (only those already computed unless ``wait``); raise if one is set."""
    bad = False
    while True:
        with _lock:
            if not _pending or not (wait or _pending[0].is_ready()):
                break
            flag = _pending.popleft()
        bad = bad or bool(np.asarray(flag))
    if bad:
        _fail()


def _fail() -> None:
    with _lock:
        _pending.clear()
    metrics.counter_inc("DeviceIndexError")
    raise DeviceIndexError(MESSAGE)
