"""Checks the device ran, read back as CUDA reports a device-side assert.

A program whose graph holds an op that eager checks on values (``lowering.checks``: indices
out of range, probabilities outside [0, 1], integer division by zero, a random draw's
parameters) returns one more value:
which checks failed (eager raises there; XLA clamps an index, fills a gather, computes the log
of a negative number). The runtime keeps those outputs and reads them when values come back to
the host (``.cpu()``, ``.item()``, printing: the read waits for the device anyway), at
``wait_device_ops``, and, for those already computed, at each ``sync``. A failed check raises
``DeviceCheckError`` (``DeviceIndexError`` for an index); values computed from the bad input
are wrong, as after a CUDA assert.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from . import metrics
from .lowering.checks import (
    BAG_OFFSETS,
    BERNOULLI_P,
    GROUP_OFFSETS,
    INDEX,
    INPUT_PROBABILITY,
    NORMAL_STD,
    TARGET_PROBABILITY,
    ZERO_DIVISION,
)

# outputs kept before the oldest is read (it ran long ago: reading it does not wait)
MAX_PENDING = 256

_pending: deque[Any] = deque()
_lock = threading.Lock()


class DeviceCheckError(RuntimeError):
    """A check eager makes on values failed in a program that ran on the device."""


class DeviceIndexError(DeviceCheckError, IndexError):
    """An index out of range in a program that ran on the device."""


_ON_DEVICE = "in a program that ran on the device; values computed from it are wrong"
FAILURES = {  # by bit, first the first raised
    INDEX: (
        DeviceIndexError,
        "xlacache.lazy: an index was out of range (indexing, index_put, gather, scatter, "
        "index_select, embedding, take, put, a one_hot class, or an nll_loss/cross_entropy "
        f"or multilabel_margin_loss target; eager raises there) {_ON_DEVICE}",
    ),
    INPUT_PROBABILITY: (
        DeviceCheckError,
        "xlacache.lazy: all elements of input should be between 0 and 1 "
        f"(binary_cross_entropy) {_ON_DEVICE}",
    ),
    TARGET_PROBABILITY: (
        DeviceCheckError,
        "xlacache.lazy: all elements of target should be between 0 and 1 "
        f"(binary_cross_entropy) {_ON_DEVICE}",
    ),
    ZERO_DIVISION: (
        DeviceCheckError,
        f"xlacache.lazy: ZeroDivisionError (an integer division or remainder by zero) {_ON_DEVICE}",
    ),
    BERNOULLI_P: (
        DeviceCheckError,
        "xlacache.lazy: bernoulli expects all elements of p to be in [0, 1] (eager: Expected "
        f"p_in >= 0 && p_in <= 1 to be true, but got false) {_ON_DEVICE}",
    ),
    NORMAL_STD: (
        DeviceCheckError,
        f"xlacache.lazy: normal expects all elements of std >= 0.0 {_ON_DEVICE}",
    ),
    GROUP_OFFSETS: (
        DeviceCheckError,
        "xlacache.lazy: a grouped matmul's offsets (_grouped_mm, transformers' "
        "grouped_mm_fallback) were negative or decreasing, where eager's result depends on "
        f"the order it writes groups in {_ON_DEVICE}",
    ),
    BAG_OFFSETS: (
        DeviceCheckError,
        "xlacache.lazy: embedding_bag's offsets must start at 0, not decrease, and not pass "
        "the input's length (eager raises there), and with include_last_offset end at it "
        f"{_ON_DEVICE}",
    ),
}


def note(output: Any) -> None:
    """Keep a program's check output until it is read."""
    with _lock:
        _pending.append(output)
        old = _pending.popleft() if len(_pending) > MAX_PENDING else None
    bits = 0 if old is None else _bits(old)
    if bits:
        _fail(bits)


def raise_if_set(wait: bool = True) -> None:
    """Read the kept outputs (only those already computed unless ``wait``); raise if a
    check failed."""
    bits = 0
    while True:
        with _lock:
            if not _pending or not (wait or _pending[0].is_ready()):
                break
            output = _pending.popleft()
        bits |= _bits(output)
    if bits:
        _fail(bits)


def _bits(output: Any) -> int:
    """A check output's value (a mesh program's is one value every process holds a copy of)."""
    if not output.is_fully_addressable:
        output = output.addressable_data(0)
    return int(np.asarray(output))


def _fail(bits: int) -> None:
    with _lock:
        _pending.clear()
    metrics.counter_inc("DeviceCheckError")
    kind = min(k for k in FAILURES if bits >> k & 1)
    error, message = FAILURES[kind]
    raise error(message)
