"""What keeps the daemon's memory and time bounded under load."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable


class ByteBudget:
    """Bytes of upload buffers that may be held at once; callers wait for room."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._cond = threading.Condition()

    @property
    def used(self) -> int:
        return self._used

    def acquire(self, amount: int, timeout: float) -> bool:
        """Reserve `amount` bytes, waiting up to `timeout` seconds; False if no room came."""
        if amount > self.capacity:
            return False
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._used + amount > self.capacity:
                left = deadline - time.monotonic()
                timed_out = left <= 0 or not self._cond.wait(left)
                if timed_out and self._used + amount > self.capacity:
                    return False
            self._used += amount
            return True

    def release(self, amount: int) -> None:
        with self._cond:
            self._used -= amount
            self._cond.notify_all()


class Watchdog:
    """Calls a function once a deadline passes, unless cancelled first (one thread for all)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="xlacache-watchdog", daemon=True)
        self._thread.start()

    def schedule(self, seconds: float, fn: Callable[[], None]) -> int:
        ticket = next(self._ids)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + seconds, ticket, fn))
            self._cond.notify()
        return ticket

    def cancel(self, ticket: int) -> None:
        with self._cond:
            self._cancelled.add(ticket)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    if self._heap and self._heap[0][1] in self._cancelled:
                        self._cancelled.discard(heapq.heappop(self._heap)[1])
                        continue
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._stopped:
                    return
                _, _, fn = heapq.heappop(self._heap)
            with contextlib.suppress(Exception):  # a failing callback must not stop the watchdog
                fn()
