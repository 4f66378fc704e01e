"""The status page's time series: a bounded ring of samples taken every interval.

A sample holds cumulative figures (Get hits and misses, requests, compile seconds
saved) and levels (store bytes, entries); `series` turns the ring into what the
page draws and /status.json shows: per-interval hit rate and request rate, saved
seconds and store size over time. Memory only: a restart starts a new history.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("xlacache.server")

HISTORY_SAMPLES = 720  # 6 hours at the default 30 s


@dataclass(frozen=True)
class Sample:
    time: float
    hits: float  # cumulative since the server started
    misses: float
    requests: float
    saved_seconds: float  # compile seconds the stored entries saved (hits x compile time)
    store_bytes: int
    entries: int


class History:
    """Samples from `take()` every `interval` seconds (a daemon thread), newest last."""

    def __init__(
        self, take: Callable[[], Sample], interval: float, size: int = HISTORY_SAMPLES
    ) -> None:
        self.take = take
        self.interval = interval
        self._ring: deque[Sample] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="xlacache-history", daemon=True)

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def sample(self) -> None:
        try:
            sample = self.take()
        except Exception:  # noqa: BLE001 - a missed sample is a gap in a chart, no more
            log.exception("taking a status sample failed")
            return
        with self._lock:
            self._ring.append(sample)

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            self.sample()

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._ring)

    def series(self) -> dict:
        """Columns of equal length, one row per sample (the first has no rates: null)."""
        samples = self.samples()
        hit_rate: list[float | None] = []
        request_rate: list[float | None] = []
        for before, now in zip([None, *samples], samples, strict=False):
            if before is None:
                hit_rate.append(None)
                request_rate.append(None)
                continue
            gets = (now.hits - before.hits) + (now.misses - before.misses)
            hit_rate.append(round((now.hits - before.hits) / gets, 4) if gets > 0 else None)
            seconds = now.time - before.time
            rate = (now.requests - before.requests) / seconds if seconds > 0 else None
            request_rate.append(None if rate is None else round(rate, 3))
        return {
            "interval": self.interval,
            "time": [round(s.time, 3) for s in samples],
            "saved_seconds": [round(s.saved_seconds, 3) for s in samples],
            "hit_rate": hit_rate,
            "request_rate": request_rate,
            "store_bytes": [s.store_bytes for s in samples],
            "entries": [s.entries for s in samples],
        }
