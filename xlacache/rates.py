"""The one rate limiter: a token bucket per caller.

The server holds each method with a `Rate` to it per token (`server.service.METHODS`,
enforced by `server.rpc.Gate`: RESOURCE_EXHAUSTED, reason `rate_limited`); a client
holds the misses it reports to it (`explain.Explainer`, one caller) with `allow`, and
paces the looks its lease waits make (`stores.leases.LeaseTable.polls`) with `reserve`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Rate:
    """`per_second` calls on average, `burst` at once (a token bucket)."""

    per_second: float
    burst: int


class RateLimiter:
    """A token bucket per caller (a token's name; "" for a process's own calls)."""

    MAX_CALLERS = 10_000  # buckets kept; beyond, the oldest are forgotten (they refill)

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, at)
        self._lock = threading.Lock()

    def allow(self, caller: str = "") -> bool:
        """Whether `caller` may make one more call now (taking a token if so)."""
        return self._take(caller, wait=False) == 0.0

    def reserve(self, caller: str = "") -> float:
        """Take `caller`'s next token, now or in the future: the seconds to wait before
        using it (0: at once). Reservations are handed out in order, so the callers that
        wait share the rate."""
        return self._take(caller, wait=True)

    def _take(self, caller: str, wait: bool) -> float:
        """Seconds until `caller`'s token is due (0: taken now); -1: none, and `wait` is
        off (nothing taken). A reserved token may leave the bucket below zero."""
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(caller, (float(self.rate.burst), now))
            tokens = min(float(self.rate.burst), tokens + (now - at) * self.rate.per_second)
            if tokens >= 1.0:
                due = 0.0
            else:  # a rate of 0: never again
                due = (1.0 - tokens) / self.rate.per_second if self.rate.per_second > 0 else 1e18
            if due == 0.0 or wait:
                tokens -= 1.0
            self._buckets[caller] = (tokens, now)
            if len(self._buckets) > self.MAX_CALLERS:
                self._buckets.pop(next(iter(self._buckets)))
            return due if wait or due == 0.0 else -1.0
