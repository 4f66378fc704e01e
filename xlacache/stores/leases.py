"""Leases: one holder at a time for a cache key, so a program is compiled once (single-flight).

A `LeaseTable` grants the lease on a name (a cache key) to one holder. The holder renews
it while it compiles (`HeldLease` does that on a thread, every ttl/3) and releases it
once the entry is stored; a lease that is not renewed for `ttl` seconds expires, so a
holder that dies loses it and a waiter takes it over. Waiting for a holder is polling
(the store for the entry, the table for the lease) with backoff (`WAIT_BACKOFF`), always
under a deadline: see `xlacache.cache`.

Backends, chosen by the store (`Store.leases()`):

- `DirLeases`: processes sharing one cache directory. A lock file per key, held with
  flock(2): the kernel drops the lock the moment its holder dies, so a waiter takes
  over at its next poll (no expiry needed; a hung holder is outlasted by the waiters'
  deadline).
- `MemoryLeases`: the table of one `xlacache serve` over a directory, with expiry
  (clients reach it through the Lease RPC: `stores/remote_leases.py`).
- `GCSLeases` (`stores/gcs_leases.py`): lease objects in the bucket, created with
  ifGenerationMatch=0 and renewed or taken over with a generation precondition: what
  several server replicas over one bucket, and clients of the bucket, agree on.

Holders are named by a unique id per attempt (`new_holder`), never by process alone,
so two threads of one process compiling one key do not both hold it.
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from xlacache import counters
from xlacache.errors import kind_of
from xlacache.key import is_valid_key
from xlacache.stores.resilience import Backoff

DEFAULT_TTL = 30.0  # seconds a lease lives unless renewed
MIN_TTL = 1.0
MAX_TTL = 600.0
_FORGET_AFTER = 60.0  # seconds an expired lease is kept, so a late taker sees it was taken over
_HOST = socket.gethostname()


def new_holder() -> str:
    """A unique holder id: host, process, and a random part (one per attempt)."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def check_name(name: str) -> str:
    """Lease names are cache keys (64 lowercase hex digits)."""
    if not is_valid_key(name):
        raise ValueError(f"malformed lease name {name!r}")
    return name


def clamp_ttl(ttl: float) -> float:
    return min(MAX_TTL, max(MIN_TTL, float(ttl)))


@dataclass(frozen=True)
class Grant:
    """The answer to an acquire."""

    granted: bool
    taken_over: bool = False  # granted, and another holder's expired lease was replaced
    holder: str = ""  # who holds the lease now (the caller when granted; "" if unknown)


class LeaseTable(abc.ABC):
    """Exclusive, expiring leases on names, by holder id. Calls may raise CacheError or
    OSError (the caller then compiles without single-flight)."""

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

    def report_wait(self, name: str, loaded: bool, seconds: float) -> None:  # noqa: B027
        """A wait on this lease is over (for a server's figures); never raises."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (not the leases: holders release those)."""


class MemoryLeases(LeaseTable):
    """Leases in this process's memory, with expiry (the table of one server)."""

    def __init__(self) -> None:
        self._leases: dict[str, tuple[str, float]] = {}  # name -> (holder, expiry, monotonic)
        self._lock = threading.Lock()
        self._next_sweep = time.monotonic() + _FORGET_AFTER

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        check_name(name)
        now = time.monotonic()
        with self._lock:
            current = self._leases.get(name)
            taken_over = False
            if current is not None and current[0] != holder:
                if current[1] >= now:
                    return Grant(False, holder=current[0])
                taken_over = True
            self._leases[name] = (holder, now + clamp_ttl(ttl))
            self._sweep(now)
        return Grant(True, taken_over=taken_over, holder=holder)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        now = time.monotonic()
        with self._lock:
            current = self._leases.get(name)
            if current is None or current[0] != holder:
                return False
            self._leases[name] = (holder, now + clamp_ttl(ttl))
            return True

    def release(self, name: str, holder: str) -> None:
        with self._lock:
            current = self._leases.get(name)
            if current is not None and current[0] == holder:
                del self._leases[name]

    def holder(self, name: str) -> str | None:
        now = time.monotonic()
        with self._lock:
            current = self._leases.get(name)
        return current[0] if current is not None and current[1] >= now else None

    def __len__(self) -> int:
        return len(self._leases)

    def _sweep(self, now: float) -> None:
        """Forget leases expired long ago (a full pass at most once a minute)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + _FORGET_AFTER
        for name in [n for n, (_, exp) in self._leases.items() if exp < now - _FORGET_AFTER]:
            del self._leases[name]


class DirLeases(LeaseTable):
    """Leases among processes sharing a cache directory: `leases/<key>.lock`, flock'ed.

    The holder keeps the lock file open and locked; the kernel releases the lock when
    the holder exits or dies, so liveness needs no expiry (`ttl` is not used). A holder
    writes its id into the file; a file found with an id in it but no lock belonged to
    a holder that died (released leases are removed), so acquiring it is a takeover.
    `holder` tests the lock with a shared, non-blocking flock on a read-only descriptor:
    it writes nothing (readers on a read-only mount may call it).
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.dir = Path(root) / "leases"
        self._held: dict[tuple[str, str], int] = {}  # (name, holder) -> locked fd
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        return self.dir / f"{check_name(name)}.lock"

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        path = self._path(name)
        with self._lock:
            if (name, holder) in self._held:
                return Grant(True, holder=holder)
        for _ in range(8):  # a lease released between our open and our lock: open again
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                self.dir.mkdir(exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                current = _read_record(fd).get("holder", "")
                os.close(fd)
                return Grant(False, holder=current)
            except BaseException:
                os.close(fd)
                raise
            if not _is_file_at(fd, path):
                os.close(fd)
                continue
            previous = _read_record(fd).get("holder", "")
            record = {"holder": holder, "pid": os.getpid(), "host": _HOST, "since": time.time()}
            try:
                data = json.dumps(record).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            except BaseException:
                os.close(fd)
                raise
            with self._lock:
                self._held[(name, holder)] = fd
            return Grant(True, taken_over=bool(previous) and previous != holder, holder=holder)
        return Grant(False)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        with self._lock:
            return (name, holder) in self._held  # a held flock cannot be lost

    def release(self, name: str, holder: str) -> None:
        with self._lock:
            fd = self._held.pop((name, holder), None)
        if fd is None:
            return
        try:
            path = self._path(name)
            if _is_file_at(fd, path):  # removed while still locked: nobody inherits it
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def holder(self, name: str) -> str | None:
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _read_record(fd).get("holder") or "unknown"
            return None  # no live holder: a dead one's file, or one being released
        finally:
            os.close(fd)  # drops our shared lock

    def close(self) -> None:
        with self._lock:
            held = list(self._held)
        for name, holder in held:  # only a store closed mid-compile gets here
            with contextlib.suppress(OSError):
                self.release(name, holder)


def _read_record(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file is still the one at `path` (not unlinked or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev)


# How a waiter polls for a holder's entry: 50 ms growing x1.5 to 500 ms, with jitter.
WAIT_BACKOFF = Backoff(initial=0.05, maximum=0.5, multiplier=1.5)


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
