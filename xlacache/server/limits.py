"""What keeps the daemon's memory and time bounded under load."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator


class ByteBudget:
    """Bytes that may be held at once (uploads received, not yet stored); callers wait
    for room. `holder()` takes bytes as they arrive and gives them all back at the end."""

    def __init__(self, capacity: int, on_change: Callable[[int], None] | None = None) -> None:
        self.capacity = capacity
        self._used = 0
        self._cond = threading.Condition()
        self._on_change = on_change  # told the bytes used after each change (a gauge)

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
            if self._on_change:
                self._on_change(self._used)
            return True

    def release(self, amount: int) -> None:
        if not amount:
            return
        with self._cond:
            self._used -= amount
            self._cond.notify_all()
            if self._on_change:
                self._on_change(self._used)

    @contextlib.contextmanager
    def holder(self) -> Iterator[Holder]:
        """A Holder whose bytes are all released when the block ends."""
        holder = Holder(self)
        try:
            yield holder
        finally:
            self.release(holder.held)


class Holder:
    """Bytes one caller holds in a ByteBudget (see ByteBudget.holder)."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, amount: int, timeout: float) -> bool:
        if not self.budget.acquire(amount, timeout):
            return False
        self.held += amount
        return True


class Slots:
    """At most `capacity` holders at once; never waits (a full house is refused)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def try_acquire(self) -> bool:
        with self._lock:
            if self._used >= self.capacity:
                return False
            self._used += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._used -= 1


class IdleMonitor:
    """Cancels calls that make no progress for `timeout` seconds (one thread for all).

    A call is watched from `watch()` to `unwatch()`; each message in or out calls
    `touch()` on its Progress, which costs one store of a float.
    """

    def __init__(self, timeout: float, on_idle: Callable[[], None] | None = None) -> None:
        self.timeout = timeout
        self._on_idle = on_idle
        self._watched: set[Progress] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xlacache-idle", daemon=True)
        if timeout > 0:
            self._thread.start()

    def watch(self, cancel: Callable[[], None]) -> Progress:
        progress = Progress(cancel)
        if self.timeout > 0:
            with self._lock:
                self._watched.add(progress)
        return progress

    def unwatch(self, progress: Progress) -> None:
        with self._lock:
            self._watched.discard(progress)

    def stop(self) -> None:
        self._stopped.set()

    def sweep(self) -> int:
        """Cancel the watched calls idle past the timeout; how many."""
        limit = time.monotonic() - self.timeout
        with self._lock:
            idle = [p for p in self._watched if p.last < limit]
            self._watched.difference_update(idle)
        for progress in idle:
            if self._on_idle:
                self._on_idle()
            with contextlib.suppress(Exception):  # the call may be over already
                progress.cancel()
        return len(idle)

    def _run(self) -> None:
        while not self._stopped.wait(min(1.0, self.timeout / 4)):
            self.sweep()


class Progress:
    """When a watched call last moved (see IdleMonitor)."""

    __slots__ = ("cancel", "last")

    def __init__(self, cancel: Callable[[], None]) -> None:
        self.cancel = cancel
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()


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
            if self._heap[0][1] == ticket:  # the new first deadline: the thread must know
                self._cond.notify()
        return ticket

    def cancel(self, ticket: int) -> None:
        with self._cond:
            self._cancelled.add(ticket)
            if len(self._cancelled) > 64 and 2 * len(self._cancelled) > len(self._heap):
                # Most of the heap is cancelled: drop those now (O(n), amortized over the
                # cancels), not when each deadline comes (minutes later).
                self._heap = [e for e in self._heap if e[1] not in self._cancelled]
                heapq.heapify(self._heap)
                self._cancelled.clear()

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
