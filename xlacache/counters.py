"""This process's cache figures, and the one way cache failures are reported.

Every failure the cache absorbs goes through `record_error(kind, exc)`: it is
counted by kind and warned about once per kind, so a sick cache is visible without
flooding the training log.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter


class CacheWarning(UserWarning):
    """A cache problem that training carried on through (compiling instead)."""


_lock = threading.Lock()
_counters: Counter[str] = Counter()
_errors: Counter[str] = Counter()
_miss_reasons: Counter[str] = Counter()
_warned: set[str] = set()

# The figures stats() always reports, so scripts can rely on the keys.
FIELDS = (
    "hits",
    "misses",
    "writes",
    "remote_hits",
    "prefetch_hits",
    "uploads",
    "uploads_dropped",
    "bytes_read",
    "bytes_written",
    "compile_seconds",
    "compile_seconds_saved",
    "load_seconds",
    "compiles_avoided",  # waits that ended loading another worker's entry (single-flight)
    "wait_seconds",  # time spent waiting on other workers' compiles
    "wake_seconds",  # from a holder's entry being created to its load here (those waits)
    "lease_wakes",  # waits the store ended by telling us (the entry landed, the lease ended)
    "lease_polls",  # looks at a lease a wait made on its own (a bucket; a busy server)
    "leases_taken_over",  # leases taken from a holder that died or stalled
    "wait_timeouts",  # waits that reached max_wait (then compiled here)
    "coalesced_reads",  # requests that took an entry another read was fetching already
)


def add(name: str, amount: float = 1) -> None:
    with _lock:
        _counters[name] += amount


def record_error(kind: str, exc: BaseException | str) -> None:
    """Count a cache failure of `kind` ('io', 'corrupt', 'remote', ...) and warn once."""
    with _lock:
        _errors[kind] += 1
        first = kind not in _warned
        _warned.add(kind)
    if first:
        warnings.warn(
            f"xlacache: {kind} error ({exc}); training goes on, compiling where the cache "
            f"cannot serve. Further {kind} errors are counted in xlacache.stats(), not shown.",
            CacheWarning,
            stacklevel=3,
        )


def count_miss_reason(reason: str) -> None:
    """Count an explained miss by reason (xlacache.explain, with XLACACHE_EXPLAIN=1)."""
    with _lock:
        _miss_reasons[reason] += 1


def snapshot() -> dict:
    """This process's figures: counters by name, errors by kind, explained misses by reason."""
    with _lock:
        figures: dict = {name: _counters.get(name, 0) for name in FIELDS}
        figures.update({k: v for k, v in _counters.items() if k not in figures})
        figures["errors"] = dict(_errors)
        figures["misses_by_reason"] = dict(_miss_reasons)
    return figures


def reset() -> None:
    """Forget all figures (tests, and processes that report per phase)."""
    with _lock:
        _counters.clear()
        _errors.clear()
        _miss_reasons.clear()
        _warned.clear()
