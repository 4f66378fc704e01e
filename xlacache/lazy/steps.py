"""torch_xla's step helpers: ``torch_xla.compile``, ``xm.add_step_closure``, ``xm.RateTracker``,
``xu.SampleGenerator``.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from xlacache.lazy_settings import lazy_setting

from . import _device, closures, metrics
from .executor import set_allow_execution, sync
from .state import STATE
from .tensor import restore_gc


def add_step_closure(
    closure: Callable[..., Any], args: tuple = (), run_async: bool = False
) -> None:
    """``xm.add_step_closure``: run ``closure(*args)`` after the next ``sync()``, when the
    tensors it reads are device data (one graph per step, however many closures read it)."""
    closures.add(closure, args, run_async)


def reset_runtime() -> None:
    """Put the runtime back as a new process has it: compiled graphs, counters and timings,
    dispatch routes and recording caches, the device RNG stream (restarted from
    ``torch.initial_seed()``), queued step closures, warnings given once, ``compile``'s
    execution guard. Live tensors keep their values (pending ones run at the next barrier);
    the multi-process job, SPMD's mesh and the persistent cache stay (``state.py``). What the
    device installed in torch's global functions is undone (``xl.uninstall``); the next
    ``xl.device()`` installs it again."""
    with STATE.lock:
        restore_gc()
        STATE.reset()
    _device.deactivate()


def _new_graphs() -> int:
    return (metrics.counter_value("UncachedCompile") or 0) + (
        metrics.counter_value("PersistentCacheHit") or 0
    )


class _Compiled:
    """What ``compile`` returns: a decorator result and a context manager."""

    def __init__(self, fn: Callable[..., Any] | None, full_graph: bool, allowed: int | None):
        self._fn = fn
        self._full_graph = full_graph
        self._allowed = allowed
        self._graphs = 0
        if fn is not None:
            functools.update_wrapper(self, fn)

    @contextlib.contextmanager
    def _scope(self) -> Iterator[None]:
        sync()  # what was pending before belongs to no compiled function
        prev = set_allow_execution(not self._full_graph) if self._full_graph else None
        try:
            yield
        finally:
            if prev is not None:
                set_allow_execution(prev)
        before = _new_graphs()
        sync()
        self._graphs += _new_graphs() - before
        if self._allowed is not None and self._graphs > self._allowed:
            raise RuntimeError(
                f"xlacache.lazy: {self._graphs} different graphs compiled for "
                f"{getattr(self._fn, '__name__', 'this block')}; at most {self._allowed} allowed "
                "(num_different_graphs_allowed)"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:
            raise TypeError("compile() without a function is a context manager: use `with`")
        with self._scope():
            return self._fn(*args, **kwargs)

    def __enter__(self) -> None:
        self._cm = self._scope()
        self._cm.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


def compile(
    f: Callable[..., Any] | None = None,
    full_graph: bool = False,
    name: str | None = None,
    num_different_graphs_allowed: int | None = None,
) -> Any:
    """``torch_xla.compile``: trace ``f`` (or a ``with`` block) and run it as one graph.

    Pending work is synced first; at the end the traced graph is compiled (or found in the
    caches) and run. ``full_graph=True`` makes any graph that would run before the end an error
    (``.item()``, printing, an op that falls back to CPU). ``num_different_graphs_allowed``
    bounds how many different graphs ``f`` may compile over its calls. ``name`` is accepted for
    torch_xla compatibility.
    """
    return _Compiled(f, full_graph, num_different_graphs_allowed)


class RateTracker:
    """``xm.RateTracker``: examples (or steps) per second, smoothed, and since creation."""

    def __init__(self, smooth_factor: float | None = None) -> None:
        if smooth_factor is None:
            smooth_factor = lazy_setting("rate_tracker_smoothing")
        self._smooth = smooth_factor
        self._start = self._last = time.time()
        self._since_last = 0.0
        self._total = 0.0
        self._rate: float | None = None

    def add(self, count: float) -> None:
        self._since_last += count

    def rate(self) -> float:
        """Rate since the previous ``rate()`` call, smoothed with the previous rate."""
        now = time.time()
        elapsed = now - self._last
        if elapsed <= 0:
            return 0.0
        current = self._since_last / elapsed
        if self._rate is not None:
            current = (1 - self._smooth) * current + self._smooth * self._rate
        self._rate = current
        self._total += self._since_last
        self._since_last = 0.0
        self._last = now
        return current

    def global_rate(self) -> float:
        elapsed = time.time() - self._start
        return (self._total + self._since_last) / elapsed if elapsed > 0 else 0.0


class SampleGenerator:
    """``xu.SampleGenerator``: yields the same ``data`` ``sample_count`` times (fake data)."""

    def __init__(self, data: Any, sample_count: int) -> None:
        self._data = data
        self._count = int(sample_count)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self._count):
            yield self._data
