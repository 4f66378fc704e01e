"""Counters and timing metrics, under torch_xla's names.

Counters: ``UncachedCompile`` (an XLA compile really ran), ``CachedCompile`` (a graph found in the
in-memory compiled-graph cache, as in torch_xla), ``PersistentCacheHit`` / ``PersistentCacheMiss``
(the xlacache store answered / did not answer a compile), ``TransferToDevice``,
``TransferFromDevice``, ``MarkStep``, ``aten::<op>`` (CPU fallbacks). Timings (nanoseconds, as in
torch_xla): ``TraceTime`` (recording ops), ``LoweringTime``, ``CompileTime``, ``ExecuteTime``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from .state import STATE

_counters: dict[str, int] = STATE.counters
_metrics: dict[str, list] = STATE.metrics  # name -> [count, accumulator, deque of recent samples]
_MAX_SAMPLES = 1000


def counter_inc(name: str, n: int = 1) -> None:
    _counters[name] = _counters.get(name, 0) + n


def counter_value(name: str) -> int | None:
    """The counter's value, or None if it was never incremented (as torch_xla)."""
    return _counters.get(name)


def counter_names() -> list[str]:
    return sorted(_counters)


def metric_add(name: str, value_ns: int) -> None:
    m = _metrics.get(name)
    if m is None:
        m = _metrics[name] = [0, 0, deque(maxlen=_MAX_SAMPLES)]
    m[0] += 1
    m[1] += int(value_ns)
    m[2].append(int(value_ns))


def metric_data(name: str) -> tuple[int, int, list[int]] | None:
    """``(number of samples, accumulated value, recent samples)`` or None (as torch_xla)."""
    m = _metrics.get(name)
    return None if m is None else (m[0], m[1], list(m[2]))


def metric_names() -> list[str]:
    return sorted(_metrics)


@contextmanager
def timed(name: str) -> Iterator[None]:
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        metric_add(name, time.perf_counter_ns() - t0)


def clear_counters() -> None:
    """Forget every counter (``met.clear_counters``); metrics stay."""
    _counters.clear()


def clear_metrics() -> None:
    """Forget every timing metric (``met.clear_metrics``); counters stay."""
    _metrics.clear()


def clear_all() -> None:
    clear_counters()
    clear_metrics()


def executed_fallback_ops() -> list[str]:
    """Ops that ran on CPU since counters were cleared, e.g. ``aten::nonzero`` (as torch_xla),
    libraries' ops too (``transformers::...``): each counted under its qualified name."""
    return [name for name in counter_names() if "::" in name]


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f}ms"
    return f"{ns / 1e3:.3f}us"


def short_metrics_report() -> str:
    keys = ("CompileTime", "ExecuteTime", "TraceTime")
    lines = [f"{k}: {_fmt_ns(metric_data(k)[1])}" for k in keys if metric_data(k)]
    lines += [f"{k}: {_counters[k]}" for k in sorted(_counters)]
    return "\n".join(lines) + "\n"


def metrics_report() -> str:
    """A text report in torch_xla's layout: metrics, then counters."""
    out: list[str] = []
    for name in metric_names():
        n, acc, samples = metric_data(name)  # type: ignore[misc]
        srt = sorted(samples)
        fmt = _fmt_ns if name.endswith("Time") else str
        pct = ", ".join(
            f"{p}%={fmt(srt[min(len(srt) - 1, int(len(srt) * p / 100))])}"
            for p in (1, 5, 10, 20, 50, 80, 90, 95, 99)
        )
        out += [
            f"Metric: {name}",
            f"  TotalSamples: {n}",
            f"  Accumulator: {fmt(acc)}",
            f"  Percentiles: {pct}",
        ]
    for name in counter_names():
        out += [f"Counter: {name}", f"  Value: {_counters[name]}"]
    return "\n".join(out) + "\n"
