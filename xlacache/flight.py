"""Single-flight: workers that miss one key at once compile it once, the others wait.

After a miss, `CompilationCache` flies one `Flight` for the key. A writer takes the key's
lease from the store's `LeaseTable` and compiles (`Landing.LEAD`), or waits while another
holds it: `LeaseTable.wait` returns when the holder's entry is stored or its lease ends
(a directory's flock, a server's LeaseWait; a bucket's is polled), and the flight loads
the entry (`Landing.LOADED`). A holder that died (its lease abandoned) is taken over by
exactly one waiter (one acquire wins); one that let go without storing an entry (its
compile was too quick to keep, or storing failed) leaves every waiter to compile at once
(`Landing.COMPILE`), none holding the lease, so they do not compile one after another.

A reader takes no lease. It waits while a holder is alive and, when none is, up to its
writer grace for one to appear (the writer of its pod compiles the same programs; only
a grace that runs out is a warning); once a grace passes with no writer in sight it stops
waiting for one until it sees a holder again (`WriterWatch`). Every wait ends by `max_wait`; any
lease failure means compiling without one, counted like any cache error.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from xlacache import counters
from xlacache.errors import kind_of
from xlacache.stores.leases import (
    DEFAULT_TTL,
    Grant,
    HeldLease,
    LeaseTable,
    Wake,
    new_holder,
)

log = logging.getLogger("xlacache")

T = TypeVar("T")


@dataclass(frozen=True)
class SingleFlight:
    """How workers that miss one key at once share one compile. Times in seconds."""

    ttl: float = DEFAULT_TTL  # a holder's lease expires this long after its last renewal
    max_wait: float = 1800.0  # the longest a worker waits for another's compile
    writer_grace: float = 0.0  # a reader waits this long for a writer to take a free key


class Found(enum.Enum):
    """What looking a key up in the store gave."""

    LOADED = "loaded"  # an executable
    ABSENT = "absent"  # no entry
    FAILED = "failed"  # an entry that failed (corrupt, untrusted, not loadable): counted


@dataclass(frozen=True)
class Lookup(Generic[T]):
    found: Found
    value: T | None = None
    created: float | None = None  # the loaded entry's creation time (unix; wake latency)


ABSENT: Lookup = Lookup(Found.ABSENT)
FAILED: Lookup = Lookup(Found.FAILED)


class Landing(enum.Enum):
    """How a flight ended: what the worker does next."""

    LOADED = "loaded"  # another worker's entry was loaded: use `value`
    LEAD = "lead"  # compile under `lease`, publish the entry, release
    COMPILE = "compile"  # compile without a lease


@dataclass(frozen=True)
class Landed(Generic[T]):
    landing: Landing
    value: T | None = None
    lease: HeldLease | None = None


class WriterWatch:
    """A reader's memory of its pod's writer: after a writer grace passed with no writer
    compiling, later misses do not wait for one until a holder is seen again."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._absent = False
        self._lock = threading.Lock()

    def current_grace(self) -> float:
        with self._lock:
            return 0.0 if self._absent else self.grace

    def seen(self) -> None:
        with self._lock:
            self._absent = False

    def gave_up(self) -> None:
        with self._lock:
            self._absent = True


class Flight(Generic[T]):
    """One worker's single-flight for one missed key: `run()` once.

    `load()` looks the key up in the store (and loads it). The flight owns its wait state
    (since when, whether a holder was seen, how the last one ended) and its figures:
    wait_seconds, compiles_avoided, lease_wakes, wake_seconds (from the entry's creation to
    its load here), leases_taken_over, wait_timeouts.
    """

    def __init__(
        self,
        settings: SingleFlight,
        table: LeaseTable,
        key: str,
        load: Callable[[], Lookup[T]],
        *,
        readonly: bool,
        writers: WriterWatch | None = None,
        label: str = "",
    ) -> None:
        self.settings = settings
        self.table = table
        self.key = key
        self.load = load
        self.readonly = readonly
        self.writers = writers
        self.name = label or key[:16]
        self.holder = new_holder()
        self.start = time.monotonic()
        self.grace_from = self.start  # a writer may still come (a reader's grace)
        self.waited = False
        self.seen_holder = False
        self.abandoned = False  # the last holder seen died or stalled (not released)
        self.released_empty = False  # the last holder let go without an entry
        self.awaiting_writer = False  # a reader logged that it waits for a writer

    def run(self) -> Landed[T]:
        while True:
            try:
                grant, current = self._look()
            except Exception as exc:  # noqa: BLE001 - no single-flight, not no training
                counters.record_error(kind_of(exc), exc)
                return self._end(Landing.COMPILE)
            if grant is not None:
                return self._lead(grant)
            landed = self._no_holder() if current is None else self._wait_on(current)
            if landed is not None:
                return landed

    def _look(self) -> tuple[Grant | None, str | None]:
        """(our grant, None), or (None, the live holder or None)."""
        if self.readonly:
            return None, self.table.holder(self.key)
        grant = self.table.acquire(self.key, self.holder, self.settings.ttl)
        if grant.granted:
            return grant, None
        return None, grant.holder or "unknown"

    def _wait_on(self, current: str) -> Landed[T] | None:
        """Wait for the live holder `current`; a landing, or None to look again."""
        if self.writers is not None:
            self.writers.seen()
        if not self.seen_holder:
            log.debug("xlacache: waiting for %s to compile %s", current, self.name)
        self.seen_holder = True
        self.abandoned = self.released_empty = False
        left = self.start + self.settings.max_wait - time.monotonic()
        if left <= 0:
            return self._timed_out()
        try:
            waited = self.table.wait(self.key, left)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return self._end(Landing.COMPILE)
        self.waited = True
        if waited.wake is Wake.HELD:
            return None  # time is up: the next pass says so
        if waited.pushed:
            counters.add("lease_wakes")
        if waited.wake is Wake.ABANDONED:
            self.abandoned = True  # one waiter takes it over at its next acquire
            self.grace_from = time.monotonic()
            return None
        found = self.load()
        if found.found is not Found.ABSENT:
            return self._end_lookup(found)
        self.released_empty = True  # let go without an entry: see _lead
        return None

    def _no_holder(self) -> Landed[T] | None:
        """A reader with nobody compiling the key: look once more and compile, or wait a
        while for a writer to take it."""
        if self.seen_holder and not self.abandoned:  # the holder let go: nothing to wait for
            return self._end_lookup(self._recheck())
        grace = self.writers.current_grace() if self.writers is not None else 0.0
        waited_for = time.monotonic() - self.grace_from
        if waited_for >= grace:
            if self.awaiting_writer:
                log.warning(
                    "xlacache: no writer compiled %s within %g s; compiling it here (a "
                    "reader stores nothing), and not waiting for a writer again until one "
                    "shows up", self.name, grace,
                )  # fmt: skip
                if self.writers is not None:
                    self.writers.gave_up()
            return self._end_lookup(self._recheck())
        if not self.awaiting_writer:  # the usual case in a healthy pod: debug, not a warning
            self.awaiting_writer = True
            log.debug(
                "xlacache: reader waiting up to %g s for a writer to start compiling %s "
                "(writer_grace)", grace, self.name,
            )  # fmt: skip
        try:  # until a writer takes the lease, or its entry comes
            waited = self.table.wait(self.key, grace - waited_for, free=True)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)
            return self._end(Landing.COMPILE)
        self.waited = True
        if waited.pushed:
            counters.add("lease_wakes")
        if waited.wake is Wake.HELD and waited.holder:
            return None  # a writer took it: wait on it
        found = self.load()
        return None if found.found is Found.ABSENT else self._end_lookup(found)

    def _lead(self, grant: Grant) -> Landed[T]:
        """We hold the lease: the entry may have arrived meanwhile; else compile under it."""
        if grant.taken_over:
            counters.add("leases_taken_over")
        lease = HeldLease(self.table, self.key, self.holder, self.settings.ttl, grant.taken_over)
        found = self._recheck()  # stored between our lookup and the grant?
        if found.found is Found.LOADED:
            lease.release()
            return self._end_lookup(found)
        let_go = self.released_empty or (self.seen_holder and not self.abandoned)
        if let_go and not grant.taken_over:
            # The holder we waited on let go without storing: compile without holding the
            # lease, so the other waiters do not compile one after another.
            lease.release()
            return self._end(Landing.COMPILE)
        self._end(Landing.LEAD)
        return Landed(Landing.LEAD, lease=lease)

    def _recheck(self) -> Lookup[T]:
        """Look again for an entry stored since (one that fails counts as absent: the
        failure is counted, and the compile replaces it)."""
        found = self.load()
        return ABSENT if found.found is Found.FAILED else found

    def _timed_out(self) -> Landed[T]:
        seconds = time.monotonic() - self.start
        counters.add("wait_timeouts")
        counters.record_error("wait_timeout", f"waited {seconds:.0f} s for {self.key}")
        return self._end(Landing.COMPILE)

    def _end_lookup(self, found: Lookup[T]) -> Landed[T]:
        if found.found is Found.LOADED:
            return self._end(Landing.LOADED, found)
        return self._end(Landing.COMPILE)

    def _end(self, landing: Landing, found: Lookup[T] | None = None) -> Landed[T]:
        """Count a wait that is over (loaded: a compile avoided, and how long the entry
        took from its creation to here)."""
        if self.waited:
            seconds = time.monotonic() - self.start
            counters.add("wait_seconds", seconds)
            loaded = landing is Landing.LOADED
            wake = 0.0
            if loaded and found is not None:
                counters.add("compiles_avoided")
                if found.created is not None:
                    wake = max(0.0, time.time() - found.created)
                    counters.add("wake_seconds", wake)
            self.table.report_wait(self.key, loaded, seconds, wake)
        return Landed(landing, found.value if found is not None else None)
