"""This process's cache figures, and the one way cache failures are reported.

Every failure the cache absorbs goes through `record_error(kind, exc)`: it is
counted by kind and warned about once per kind, so a sick cache is visible without
flooding the training log.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import Counter

from xlacache.errors import StrictModeError


class CacheWarning(UserWarning):
    """A cache problem that training carried on through (compiling instead)."""


_lock = threading.Lock()
_counters: Counter[str] = Counter()
_errors: Counter[str] = Counter()
_miss_reasons: Counter[str] = Counter()
_warned: set[str] = set()

# Every figure stats() reports, always (zero until counted), with what it counts: the
# README's table of them is checked against this one (tests/test_docs.py).
FIELDS = {
    "hits": "compile requests answered by the cache",
    "misses": "compile requests the cache could not answer (then compiled)",
    "writes": "entries stored",
    "remote_hits": "hits that came from the shared store (server or bucket)",
    "prefetch_hits": "hits that took an executable loaded ahead (prefetch)",
    "uploads": "entries uploaded to the shared store in the background",
    "uploads_dropped": "uploads given up (queue full, shared store refusing or down)",
    "bytes_read": "entry bytes read for hits",
    "bytes_written": "entry bytes stored",
    "compile_seconds": "seconds spent compiling on misses",
    "compile_seconds_saved": "compile seconds the hits' entries had cost",
    "load_seconds": "seconds spent loading executables from entries",
    "compiles_avoided": "waits that ended loading another worker's entry (single-flight)",
    "wait_seconds": "seconds spent waiting on other workers' compiles",
    "wake_seconds": "from a holder's entry being created to its load here (those waits)",
    "lease_wakes": "waits the store ended by telling us (the entry landed, the lease ended)",
    "lease_polls": "looks at a lease a wait made on its own (a bucket; a busy server)",
    "leases_taken_over": "leases taken from a holder that died or stalled",
    "wait_timeouts": "waits that reached max_wait (then compiled here)",
    "coalesced_reads": "requests that took an entry another read was fetching already",
    "alias_hits": "executables loaded by alias, without lowering (xlacache.executables)",
    "alias_misses": "alias lookups that found nothing usable",
    "alias_writes": "alias entries stored",
    "kept_unsigned": "executables kept in memory only: a process that trusts keys but has no "
    "trusted signing key stores nothing (it would refuse it)",
    "miss_reports": "explained misses reported to the shared store",
    "miss_reports_dropped": "explained misses not reported (rate limit, refused)",
    "evictions": "local entries evicted by max_size or max_age",
    "index_drift": "index rows added or dropped to match the entry files",
    "gcs_retries": "Cloud Storage requests retried",
    "gcs_touch_failures": "Cloud Storage use records (last_used, hits) that failed",
}


def add(name: str, amount: float = 1) -> None:
    with _lock:
        _counters[name] += amount


def record_error(kind: str, exc: BaseException | str, message: str | None = None) -> None:
    """Count a cache failure of `kind` ('io', 'corrupt', 'remote', ...) and warn once
    (`message` says what happens instead, where the general words would mislead)."""
    with _lock:
        _errors[kind] += 1
        first = kind not in _warned
        _warned.add(kind)
    if first:
        warnings.warn(
            message
            or f"xlacache: {kind} error ({exc}); training goes on, compiling where the cache "
            f"cannot serve. Further {kind} errors are counted in xlacache.stats(), not shown.",
            CacheWarning,
            stacklevel=3,
        )


def strict_mode() -> bool:
    """Whether fallbacks raise instead of hiding exceptions (``XLACACHE_STRICT=1``)."""
    return os.environ.get("XLACACHE_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def hidden(where: str, exc: BaseException) -> None:
    """Call where a fallback is about to hide `exc` (lazy running instead of compiling, a
    skipped prefetch, a dropped record...): raises StrictModeError in strict mode."""
    if strict_mode():
        raise StrictModeError(where, exc) from exc


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


class Tally:
    """One object's own figures (a cache's `stats()`), each also counted process-wide."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._figures: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._figures[name] += amount
        add(name, amount)

    def snapshot(self, reset: bool = False) -> dict[str, float]:
        """Every name (zero until counted); `reset` starts again from zero."""
        with self._lock:
            figures = {name: self._figures.get(name, 0) for name in self.names}
            if reset:
                self._figures.clear()
        return figures
