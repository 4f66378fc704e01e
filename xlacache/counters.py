"""This process's cache figures, and the one way cache failures are reported.

Every failure the cache absorbs goes through `record_error(kind, exc)`: it is
counted by kind and warned about once per kind, so a sick cache is visible without
flooding the training log.

Strict mode (the `strict` setting, ``XLACACHE_STRICT=1``): every fallback that would
hide an exception calls `hidden(where, exc)` first (`record_error` does), which raises
`StrictModeError` instead. A background thread (an upload, the index's hit flusher, a
lease's renewals, prefetch, a job manifest's writer: each runs under `background`)
that raised would only end itself, so there the error is kept and the thread carries
on as without strict mode; the next foreground call raises it (`raise_deferred`: a
compile request, `xlacache.stats()`; the test suite checks after every test).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from xlacache.errors import CacheError, StrictModeError

R = TypeVar("R")


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
    "job_records_dropped": "job manifest updates given up (lost every race with other writers)",
}


def add(name: str, amount: float = 1) -> None:
    with _lock:
        _counters[name] += amount


def record_error(kind: str, exc: BaseException | str, message: str | None = None) -> None:
    """Count a cache failure of `kind` ('io', 'corrupt', 'remote', ...) and warn once
    (`message` says what happens instead, where the general words would mislead).
    Strict mode raises StrictModeError(kind) instead (`hidden`)."""
    hidden(kind, exc if isinstance(exc, BaseException) else CacheError(exc))
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


_strict: bool | None = None  # the resolved `strict` setting, once initialize_cache ran
# the `strict` setting as the environment gives it: `config` (a layer above) installs its
# reader at import (`read_strict_from`), so the variable and its parsing stay in its table
_strict_in_env: Callable[[], bool] = bool
_deferred: list[StrictModeError] = []  # raised in background threads, not yet raised again
_MAX_DEFERRED = 16
_thread = threading.local()  # .background: this thread runs under `background`


def strict_mode() -> bool:
    """Whether fallbacks raise instead of hiding exceptions: the `strict` setting
    (`config.SETTINGS`) as initialize_cache resolved it, else as the environment gives
    it (``XLACACHE_STRICT``)."""
    if _strict is not None:
        return _strict
    return _strict_in_env()


def read_strict_from(reader: Callable[[], bool]) -> None:
    """Where `strict_mode` reads the environment's `strict` setting (config, at import)."""
    global _strict_in_env
    _strict_in_env = reader


def set_strict(value: bool | None) -> None:
    """Take the resolved `strict` setting (initialize_cache); None: the environment's."""
    global _strict
    _strict = value


def hidden(where: str, exc: BaseException) -> None:
    """Call where a fallback is about to hide `exc` (lazy running instead of compiling, a
    skipped prefetch, a dropped record...): raises StrictModeError in strict mode (a
    StrictModeError passes unchanged). In a `background` thread the error is kept for
    `raise_deferred` instead, and the caller carries on with its fallback."""
    if isinstance(exc, StrictModeError):
        error = exc
    elif not strict_mode():
        return
    else:
        error = StrictModeError(where, exc)
        error.__cause__ = exc
    if getattr(_thread, "background", False):
        with _lock:
            if len(_deferred) < _MAX_DEFERRED:
                _deferred.append(error)
        return
    raise error


def background(where: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate a background thread's target: strict errors in it are deferred to the
    foreground (`hidden`); an exception that escapes it is one too (then re-raised)."""

    def wrap(target: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(target)
        def run(*args, **kwargs) -> R:
            outer = getattr(_thread, "background", False)
            _thread.background = True
            try:
                return target(*args, **kwargs)
            except Exception as exc:
                hidden(where, exc)  # deferred: the thread's own end is no report
                raise
            finally:
                _thread.background = outer

        return run

    return wrap


def take_deferred() -> list[StrictModeError]:
    """The strict errors background threads kept, forgotten here (tests, `raise_deferred`)."""
    with _lock:
        errors = list(_deferred)
        _deferred.clear()
    return errors


def raise_deferred() -> None:
    """Raise the first strict error a background thread kept (strict mode's foreground
    calls: a compile request, `xlacache.stats()`); nothing when there is none."""
    if _deferred and (errors := take_deferred()):
        raise errors[0]


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
