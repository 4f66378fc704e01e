"""What every networked store shares: backoff with jitter and a circuit breaker.

Transport-neutral (no gRPC, no HTTP): `GrpcStore` and the GCS object layer both use
it, so a GCS user never imports gRPC and the two back off alike.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay n is about initial * multiplier**n, capped at `maximum`, times a random
    factor in [jitter_low, jitter_high] (so clients that failed together spread out)."""

    initial: float = 1.0
    maximum: float = 60.0
    multiplier: float = 2.0
    jitter_low: float = 0.8
    jitter_high: float = 1.2

    def delay(self, attempt: int) -> float:
        ceiling = min(self.maximum, self.initial * self.multiplier**attempt)
        return ceiling * random.uniform(self.jitter_low, self.jitter_high)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of a transient failure: at most `attempts` tries, exponential backoff with
    jitter between them (attempt n waits about initial * multiplier**n)."""

    attempts: int = 8
    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0

    def delay(self, attempt: int) -> float:
        backoff = Backoff(self.initial, self.maximum, self.multiplier, 0.5, 1.0)
        return backoff.delay(attempt)


class CircuitBreaker:
    """Closed -> open after `threshold` consecutive failures; one trial call after backoff.

    While open, `allow()` says no without calling anything, so a dead endpoint costs
    one deadline, not one per call; each reopening doubles the wait (base .. cap).
    """

    def __init__(self, threshold: int = 3, base: float = 1.0, cap: float = 60.0) -> None:
        self.threshold = threshold
        self.backoff = Backoff(initial=base, maximum=cap)
        self._failures = 0
        self._opens = 0
        self._open_until = 0.0
        self._trial_running = False
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        return time.monotonic() < self._open_until

    def allow(self) -> bool:
        """May a call go out now? (While open, no; after, one trial at a time.)"""
        with self._lock:
            if self._failures < self.threshold:
                return True
            if time.monotonic() < self._open_until or self._trial_running:
                return False
            self._trial_running = True
            return True

    def success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opens = 0
            self._trial_running = False

    def failure(self, trip_now: bool = False) -> None:
        with self._lock:
            self._trial_running = False
            self._failures = max(self._failures + 1, self.threshold if trip_now else 0)
            if self._failures >= self.threshold:
                self._open_until = time.monotonic() + self.backoff.delay(self._opens)
                self._opens += 1
