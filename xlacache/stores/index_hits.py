"""Hits counted in memory and written by a background thread: reads never write.

A local hit only reads and verifies a file; `HitBuffer.note` adds it to a buffer, and a
daemon thread (started on the first hit, again in a forked child) writes the buffer
every FLUSH_SECONDS through the index's `write` callback, waiting at most
FLUSH_BUSY_SECONDS for the write lock. A flush that loses that race keeps its hits for
the next one (`IndexBusyError`); flushes take turns, so the last one (at close or exit)
also writes what a running one puts back. A hit count lost for good (the buffer full,
the last flush failing) costs the LRU order a little accuracy, never a read. Any other
failure of a background flush is hidden from training: `counters.hidden` (strict mode
reports it).

In a forked child the buffer starts empty, with no thread (the parent flushes its own
hits): `after_fork`, which `stores.index_db` calls with its connections' reset.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from xlacache import counters
from xlacache.errors import IndexBusyError, IndexClosedError, StoreIndexError

FLUSH_SECONDS = 1.0  # how often buffered hits are written
FLUSH_BUSY_SECONDS = 0.1  # a background flush waits this long for the write lock
MAX_PENDING_HITS = 100_000  # keys with buffered hits; hits of further keys are dropped

Pending = dict[str, list]  # key -> [hits, last hit time]
Write = Callable[[Pending, float], None]  # (hits, busy seconds): one write transaction


class HitBuffer:
    """Hits by key, buffered and written in the background (see the module docstring)."""

    def __init__(self, write: Write, name: str = "xlacache-index-hits") -> None:
        self._write = write
        self._name = name
        self._closed = False
        self.after_fork()

    def check_fork(self) -> None:
        """In a forked child (the first call there): start afresh (`after_fork`)."""
        if os.getpid() != self._pid:
            self.after_fork()

    def after_fork(self) -> None:
        """Fresh lock, buffer and thread: at creation, and in a forked child."""
        self._pid = os.getpid()
        self._pending: Pending = {}
        self._lock = threading.Lock()
        # One flush at a time: a last flush (at close) waits for a running one, and so
        # writes what that one puts back when it fails, instead of finding nothing.
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def note(self, key: str, now: float | None = None) -> None:
        """Count a hit of `key` (at `now`); the background thread writes it."""
        if self._closed:
            return
        now = time.time() if now is None else now
        self.check_fork()
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None:
                pending[0] += 1
                pending[1] = max(pending[1], now)
            elif len(self._pending) < MAX_PENDING_HITS:
                self._pending[key] = [1, now]
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def flush(self, busy_seconds: float = FLUSH_BUSY_SECONDS) -> None:
        """Write buffered hits now; if that fails (the write lock stayed busy past
        `busy_seconds`) they stay buffered for the next flush and the error is raised."""
        with self._flushing:
            pending = self.take()
            if not pending:
                return
            try:
                self._write(pending, busy_seconds)
            except StoreIndexError:
                self.requeue(pending)
                raise

    def take(self) -> Pending:
        """The buffered hits, removed from the buffer (a write that includes them)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def requeue(self, pending: Pending) -> None:
        """Put back hits a failed write took."""
        with self._lock:
            for key, (hits, when) in pending.items():
                mine = self._pending.setdefault(key, [0, when])
                mine[0] += hits
                mine[1] = max(mine[1], when)

    def of(self, key: str) -> tuple[int, float]:
        """(hits, last hit time) buffered for `key`."""
        with self._lock:
            hits, when = self._pending.get(key, (0, 0.0))
        return hits, when

    def total(self) -> int:
        """Hits buffered, all keys together."""
        with self._lock:
            return sum(hits for hits, _ in self._pending.values())

    def close(self) -> None:
        """Stop the thread (its next wake ends it); buffered hits stay for a last flush."""
        self._closed = True
        self._wake.set()

    @counters.background("index.flush")
    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(FLUSH_SECONDS)
            if self._closed:
                return
            try:
                self.flush()
            except (IndexBusyError, IndexClosedError):
                pass  # busy: the next flush writes them; closed: done
            except StoreIndexError as exc:
                counters.hidden("index.flush", exc)
