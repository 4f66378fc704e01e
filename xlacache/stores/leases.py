"""Leases: one holder at a time for a cache key, so a program is compiled once (single-flight).

A `LeaseTable` grants the lease on a name (a cache key) to one holder. The holder renews
it while it compiles (`HeldLease` does that on a thread, every ttl/3) and releases it
once the entry is stored; a lease that is not renewed for `ttl` seconds expires, so a
holder that hangs loses it and a waiter takes it over. A holder that dies is noticed at
once where the backend can see it (a directory's flock, a server's connection).

Waiting for a holder is `LeaseTable.wait`: it returns as soon as the lease ends or the
holder's entry is stored (`Wake`), or when its time is up. Backends that can be told
block (a directory: on the holder's flock; a server: a `LeaseWait` that returns when the
entry lands); the others poll (`poll_interval`: often while a compile is young, then
less, under a per-process request rate). Every wait has a deadline: see
`xlacache.flight`.

Backends, chosen by the store (`Store.leases()`):

- `DirLeases` (`stores/dir_leases.py`): processes sharing one cache directory. A lock
  file per key, held with flock(2): the kernel drops the lock the moment its holder
  dies, and a waiter blocked on it wakes at once; a holder that hangs stops renewing the
  time in its file and is outlasted by the ttl.
- `MemoryLeases`: the table of one `xlacache serve` over a directory, with expiry
  (clients reach it through the Lease, LeaseHold and LeaseWait RPCs: `stores/remote_leases.py`).
- `GCSLeases` (`stores/gcs_leases.py`): lease objects in the bucket, created with
  ifGenerationMatch=0 and renewed or taken over with a generation precondition: what
  several server replicas over one bucket, and clients of the bucket, agree on.

Holders are named by a unique id per attempt (`new_holder`), never by process alone,
so two threads of one process compiling one key do not both hold it.
"""

from __future__ import annotations

import abc
import enum
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from xlacache import counters
from xlacache.errors import kind_of
from xlacache.key import check_key
from xlacache.rates import Rate, RateLimiter

DEFAULT_TTL = 30.0  # seconds a lease lives unless renewed
MIN_TTL = 1.0
MAX_TTL = 600.0
_FORGET_AFTER = 60.0  # seconds an expired lease is kept, so a late taker sees it was taken over
HOST = socket.gethostname()

# Polling (backends that cannot be told): every POLL_MIN seconds while a compile is young,
# then a tenth of its age, at most POLL_MAX; one process polls at most MAX_POLL_RATE
# times a second, all its waits together.
POLL_MIN = 0.05
POLL_MAX = 1.0
MAX_POLL_RATE = 20.0


def new_holder() -> str:
    """A unique holder id: host, process, and a random part (one per attempt)."""
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def clamp_ttl(ttl: float) -> float:
    return min(MAX_TTL, max(MIN_TTL, float(ttl)))


def poll_interval(age: float) -> float:
    """Seconds until the next look at a lease whose compile has run `age` seconds: short
    while it is young (most compiles are), a tenth of its age later (a wake costs at most
    ~10 % of the compile), never more than POLL_MAX."""
    return min(POLL_MAX, max(POLL_MIN, age / 10))


@dataclass(frozen=True)
class Grant:
    """The answer to an acquire."""

    granted: bool
    taken_over: bool = False  # granted, and another holder's expired lease was replaced
    holder: str = ""  # who holds the lease now (the caller when granted; "" if unknown)


class LeaseState(NamedTuple):
    """What a look at a lease says."""

    holder: str | None  # the live holder, or None
    ended: Wake  # not live: how it ended (RELEASED or ABANDONED)
    age: float | None = None  # live: seconds since it was taken, if known
    expires_in: float | None = None  # live: seconds until it expires unrenewed, if known


class Wake(enum.Enum):
    """Why a wait on a lease ended."""

    STORED = "stored"  # the holder's entry was stored
    RELEASED = "released"  # the holder let go (after storing its entry, or storing none)
    ABANDONED = "abandoned"  # the holder died or stalled: its lease ended without a release
    HELD = "held"  # still held when the wait's time was up


@dataclass(frozen=True)
class Waited:
    """The end of one `LeaseTable.wait`."""

    wake: Wake
    pushed: bool = False  # the backend said so (a wake), rather than a poll finding it
    holder: str = ""  # HELD: who holds it


class LeaseTable(abc.ABC):
    """Exclusive, expiring leases on names (cache keys: `key.check_key`, InvalidKeyError),
    by holder id. Calls may raise CacheError or OSError (the caller then compiles without
    single-flight)."""

    # The process's polls, all tables and waits together: a look at most every
    # 1/MAX_POLL_RATE seconds (`RateLimiter.reserve`: how long until the next may go).
    polls = RateLimiter(Rate(MAX_POLL_RATE, burst=1))

    @abc.abstractmethod
    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        """Take the lease unless another holder has a live one; taking over an expired
        one is granted with taken_over=True. Acquiring a lease one holds renews it."""

    @abc.abstractmethod
    def renew(self, name: str, holder: str, ttl: float) -> bool:
        """Extend the holder's lease to ttl from now; False if it no longer holds it."""

    @abc.abstractmethod
    def release(self, name: str, holder: str) -> None:
        """Give the lease up (nothing happens if the holder no longer has it)."""

    @abc.abstractmethod
    def holder(self, name: str) -> str | None:
        """The live holder of the lease, or None. Read-only: readers call only this."""

    def state(self, name: str) -> LeaseState:
        """A look at the lease (read-only). The default knows only `holder`."""
        return LeaseState(self.holder(name), Wake.RELEASED)

    def wait(self, name: str, timeout: float, free: bool = False) -> Waited:
        """Wait until the lease on `name` is not live any more (or its entry is stored),
        at most `timeout` seconds. Read-only: readers wait too. `free`: the caller saw
        nobody hold it, and waits for someone to take it (HELD, with the holder) or for
        its entry.

        This default polls `state` (`poll_interval`, paced by MAX_POLL_RATE per process;
        each look is counted in stats()["lease_polls"]); backends that can be told block.
        A free lease is looked at once, after one interval (its entry may have come: the
        caller looks).
        """
        start = time.monotonic()
        while True:
            if free:
                time.sleep(min(timeout, max(poll_interval(0.0), self.polls.reserve())))
            current, ended, age, expires_in = self.state(name)
            counters.add("lease_polls")
            if current is None or free:
                return Waited(ended if current is None else Wake.HELD, holder=current or "")
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                return Waited(Wake.HELD, holder=current)
            age = time.monotonic() - start if age is None else age
            interval = poll_interval(age)
            if expires_in is not None:  # look again just as it would expire unrenewed
                interval = min(interval, max(POLL_MIN, expires_in))
            time.sleep(min(left, max(interval, self.polls.reserve())))

    def expire(self, name: str, holder: str) -> None:
        """End the holder's lease as if it had expired (its holder is gone: the next
        acquire is a takeover). The default releases it."""
        self.release(name, holder)

    def notify(self, name: str) -> None:  # noqa: B027 - tables that do not block need none
        """The entry `name` was stored: wake the waits blocked here on its lease."""

    def report_wait(  # noqa: B027
        self, name: str, loaded: bool, seconds: float, wake_seconds: float
    ) -> None:
        """A wait on this lease is over (for a server's figures); never raises."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (not the leases: holders release those)."""


class MemoryLeases(LeaseTable):
    """Leases in this process's memory, with expiry (the table of one server).

    `wait` blocks on a condition that release, expiry and `notify` (an entry stored:
    the server calls it) wake."""

    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, float, float]] = {}  # name -> (holder, expiry, since)
        self._changed = threading.Condition()
        self._notices: dict[str, list[int]] = {}  # name -> [entries stored, waiters], waited on
        self._next_sweep = time.monotonic() + _FORGET_AFTER

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        check_key(name)
        now = time.monotonic()
        with self._changed:
            current = self._leases.get(name)
            taken_over = False
            since = now
            if current is not None:
                if current[0] != holder:
                    if current[1] >= now:
                        return Grant(False, holder=current[0])
                    taken_over = True
                else:
                    since = current[2]
            self._leases[name] = (holder, now + clamp_ttl(ttl), since)
            self._sweep(now)
            self._changed.notify_all()  # readers waiting for a holder to come
        return Grant(True, taken_over=taken_over, holder=holder)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        now = time.monotonic()
        with self._changed:
            current = self._leases.get(name)
            if current is None or current[0] != holder or current[1] < now:
                return False
            self._leases[name] = (holder, now + clamp_ttl(ttl), current[2])
            return True

    def release(self, name: str, holder: str) -> None:
        with self._changed:
            current = self._leases.get(name)
            if current is not None and current[0] == holder:
                del self._leases[name]
                self._changed.notify_all()

    def expire(self, name: str, holder: str) -> None:
        with self._changed:
            current = self._leases.get(name)
            if current is not None and current[0] == holder:
                self._leases[name] = (holder, time.monotonic() - 1e-3, current[2])
                self._changed.notify_all()

    def holder(self, name: str) -> str | None:
        return self.state(name)[0]

    def state(self, name: str) -> LeaseState:
        now = time.monotonic()
        with self._changed:
            current = self._leases.get(name)
        if current is None:
            return LeaseState(None, Wake.RELEASED)
        if current[1] < now:
            return LeaseState(None, Wake.ABANDONED)
        return LeaseState(current[0], Wake.HELD, now - current[2], current[1] - now)

    def notify(self, name: str) -> None:
        """The entry `name` was stored: wake its waiters."""
        with self._changed:
            if name in self._notices:
                self._notices[name][0] += 1
                self._changed.notify_all()

    def wait(self, name: str, timeout: float, free: bool = False) -> Waited:
        deadline = time.monotonic() + timeout
        with self._changed:
            notices = self._notices.setdefault(name, [0, 0])  # [stored notices, waiters]
            seen = notices[0]
            notices[1] += 1
            try:
                while True:
                    if notices[0] != seen:
                        return Waited(Wake.STORED, pushed=True)
                    current = self._leases.get(name)
                    now = time.monotonic()
                    live = current is not None and current[1] >= now
                    if free and live:
                        return Waited(Wake.HELD, pushed=True, holder=current[0])  # taken
                    if not free and not live:
                        ended = Wake.RELEASED if current is None else Wake.ABANDONED
                        return Waited(ended, pushed=True)
                    if now >= deadline:
                        if live:
                            return Waited(Wake.HELD, holder=current[0])
                        return Waited(Wake.RELEASED if current is None else Wake.ABANDONED)
                    until = deadline if free else min(deadline, current[1])
                    self._changed.wait(until - now + 1e-3)
            finally:
                notices[1] -= 1
                if not notices[1]:
                    del self._notices[name]

    def __len__(self) -> int:
        return len(self._leases)

    def _sweep(self, now: float) -> None:
        """Forget leases expired long ago (a full pass at most once a minute)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + _FORGET_AFTER
        for name in [n for n, (_, exp, _) in self._leases.items() if exp < now - _FORGET_AFTER]:
            del self._leases[name]


class HeldLease:
    """A granted lease, renewed on a daemon thread every ttl/3 until `release`.

    A renewal that fails (the backend unreachable) is retried at the next beat; one the
    backend refuses (another holder took the lease over) sets `lost` and stops. Losing
    the lease changes nothing for the holder: it finishes and stores its entry (entries
    are create-once, so two compilers of one key leave one entry).
    """

    def __init__(
        self, table: LeaseTable, name: str, holder: str, ttl: float, taken_over: bool = False
    ) -> None:
        self.table = table
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.taken_over = taken_over
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="xlacache-lease", daemon=True)
        self._thread.start()

    @counters.background("lease.renew")
    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.table.renew(self.name, self.holder, self.ttl):
                    self.lost = True
                    return
            except Exception as exc:  # noqa: BLE001 - retried at the next beat
                counters.record_error(kind_of(exc), exc)

    def release(self) -> None:
        """Stop renewing and give the lease up; failures are counted, never raised."""
        self._stop.set()
        try:
            self.table.release(self.name, self.holder)
        except Exception as exc:  # noqa: BLE001 - the lease then expires by itself
            counters.record_error(kind_of(exc), exc)
