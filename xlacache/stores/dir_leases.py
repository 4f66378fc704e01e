"""Leases among processes sharing a cache directory: ``leases/<key>.lock``, flock'ed.

The holder keeps the lock file open and locked (flock(2), exclusive) and writes its
record in it: ``{"holder", "pid", "host", "since", "renewed", "ttl"}``.

- **A holder that dies** loses the lock the moment the kernel closes its files; a
  waiter blocked on the lock (a shared flock, on a thread so that the wait keeps its
  deadline) wakes at once. A file found with a record but no lock belonged to a holder
  that died (released leases are removed), so acquiring it is a takeover.
- **A holder that hangs** keeps its lock but stops renewing `renewed` (HeldLease
  renews every ttl/3). Once ``renewed + ttl + SKEW`` has passed, a waiter steals the
  lease: under a second lock (``<key>.steal``, so that one waiter steals), it checks the
  record is still the stale one and renames a new, locked file of its own over the
  path. The hung holder, should it wake, finds its file replaced: its renewals fail
  (`lost`) and its release removes nothing.

`holder`, `state` and `wait` open the file read-only and take shared locks only: they
write nothing (readers on a read-only mount may call them).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from pathlib import Path

from xlacache import counters
from xlacache.key import check_key
from xlacache.stores.leases import (
    HOST,
    Grant,
    LeaseState,
    LeaseTable,
    Waited,
    Wake,
    clamp_ttl,
)

SKEW = 2.0  # seconds of clock disagreement between hosts sharing the directory
_OPEN_TRIES = 8  # a lease released between our open and our lock: open again
_WATCHED_WAIT = 2.0  # seconds an acquire waits out readers' and waiters' shared locks
RECORD_SIZE = 1024  # bytes of a lease record (holder ids are at most 256 characters)


class DirLeases(LeaseTable):
    """Leases in ``ROOT/leases/`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.dir = Path(root) / "leases"
        self._held: dict[tuple[str, str], tuple[int, dict]] = {}  # -> (locked fd, record)
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        return self.dir / f"{check_key(name)}.lock"

    # -- holding ---------------------------------------------------------------------------

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        path = self._path(name)
        if self.renew(name, holder, ttl):
            return Grant(True, holder=holder)
        watched_until = time.monotonic() + _WATCHED_WAIT
        tries = 0
        while tries < _OPEN_TRIES:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                self.dir.mkdir(exist_ok=True)
                tries += 1
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record = _read_record(fd)
                unheld = _only_shared_locks(fd)
                os.close(fd)
                if unheld and time.monotonic() < watched_until:
                    time.sleep(0.002)  # a reader's or woken waiter's shared lock: brief
                    continue
                if _stale(record):
                    return self._steal(name, holder, ttl, record)
                return Grant(False, holder="" if unheld else record.get("holder", ""))
            except BaseException:
                os.close(fd)
                raise
            if not _is_file_at(fd, path):
                os.close(fd)
                tries += 1
                continue
            previous = _read_record(fd).get("holder", "")
            self._take(name, holder, ttl, fd)
            return Grant(True, taken_over=bool(previous) and previous != holder, holder=holder)
        return Grant(False)

    def _take(self, name: str, holder: str, ttl: float, fd: int) -> None:
        """Write our record into the locked file `fd` and keep it."""
        now = time.time()
        record = {"holder": holder, "pid": os.getpid(), "host": HOST, "since": now,
                  "renewed": now, "ttl": clamp_ttl(ttl)}  # fmt: skip
        try:
            _write_record(fd, record)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._held[(name, holder)] = (fd, record)

    def _steal(self, name: str, holder: str, ttl: float, stale: dict) -> Grant:
        """Take over a hung holder's lease (it still holds the lock on its file)."""
        path = self._path(name)
        guard = os.open(path.with_suffix(".steal"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another waiter is stealing it
                return Grant(False, holder=stale.get("holder", ""))
            if _record_at(path) != stale:  # renewed, released or stolen meanwhile
                return Grant(False, holder=_record_at(path).get("holder", ""))
            tmp = self.dir / f"{path.name}.{uuid.uuid4().hex[:8]}"
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.rename(tmp, path)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            self._take(name, holder, ttl, fd)
            return Grant(True, taken_over=True, holder=holder)
        finally:
            os.close(guard)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        with self._lock:
            held = self._held.get((name, holder))
        if held is None:
            return False
        fd, record = held
        if not _is_file_at(fd, self._path(name)):  # stolen while we hung
            return False
        record = {**record, "renewed": time.time(), "ttl": clamp_ttl(ttl)}
        _write_record(fd, record)
        with self._lock:
            if (name, holder) in self._held:
                self._held[(name, holder)] = (fd, record)
        return True

    def release(self, name: str, holder: str) -> None:
        with self._lock:
            held = self._held.pop((name, holder), None)
        if held is None:
            return
        fd = held[0]
        try:
            path = self._path(name)
            if _is_file_at(fd, path):  # removed while still locked: nobody inherits it
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    # -- watching --------------------------------------------------------------------------

    def holder(self, name: str) -> str | None:
        return self.state(name)[0]

    def state(self, name: str) -> LeaseState:
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return LeaseState(None, Wake.RELEASED)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                record = _read_record(fd)
                if _stale(record):
                    return LeaseState(None, Wake.ABANDONED)  # a hung holder's
                since = record.get("since")
                age = time.time() - since if isinstance(since, (int, float)) else None
                holder = record.get("holder") or "unknown"
                return LeaseState(holder, Wake.HELD, age, _stale_in(record))
            return LeaseState(None, _ended(fd))  # a dead holder's file, or one being released
        finally:
            os.close(fd)  # drops our shared lock

    def wait(self, name: str, timeout: float, free: bool = False) -> Waited:
        """Block on the holder's lock: the kernel wakes the wait the moment the holder
        releases or dies; one that stops renewing is given up on once stale. A wait that
        times out leaves its thread blocked until the holder ends. (A free lease has no
        lock to block on: `free` waits poll.)"""
        if free:
            return super().wait(name, timeout, free=True)
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return Waited(Wake.RELEASED, pushed=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        except BaseException:
            os.close(fd)
            raise
        else:
            ended = _ended(fd)
            os.close(fd)
            return Waited(ended, pushed=True)
        watch = os.dup(fd)  # ours, for re-reading the record (the thread closes fd)
        record = _read_record(watch)
        outcome: list[Wake] = []
        unlocked = threading.Event()

        @counters.background("lease.wait")
        def block() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # returns when the holder lets go or dies
                outcome.append(_ended(fd))
            except OSError as exc:  # the waiter looks again (its entry, or the lease)
                outcome.append(Wake.RELEASED)
                counters.hidden("lease.wait", exc)
            finally:
                os.close(fd)
                unlocked.set()

        threading.Thread(target=block, name="xlacache-lease-wait", daemon=True).start()
        try:
            while True:
                left = deadline - time.monotonic()
                if unlocked.wait(max(0.0, min(left, _stale_in(record)))):
                    return Waited(outcome[0], pushed=True)
                record = _read_record(watch)
                if _stale(record):
                    return Waited(Wake.ABANDONED)
                if deadline - time.monotonic() <= 0:
                    return Waited(Wake.HELD, holder=record.get("holder") or "unknown")
        finally:
            os.close(watch)

    def close(self) -> None:
        with self._lock:
            held = list(self._held)
        for name, holder in held:  # only a store closed mid-compile gets here
            try:
                self.release(name, holder)
            except OSError as exc:  # the lock ends with our descriptors
                counters.hidden("lease.release", exc)


def _read_record(fd: int) -> dict:
    """The lease record in the file (empty: just created, not yet written). One that
    cannot be read or parsed counts as none (`counters.hidden`): records are written
    whole (`_write_record`), so that is a failing disk or a bug."""
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data) if data else {}
    except (OSError, ValueError) as exc:
        counters.hidden("lease.record", exc)
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(fd: int, record: dict) -> None:
    """One write of RECORD_SIZE bytes (JSON, padded with spaces): a reader never sees the
    file empty or holding the end of a longer record."""
    data = json.dumps(record).encode()
    if len(data) > RECORD_SIZE:
        raise ValueError(f"lease record over {RECORD_SIZE} bytes")
    os.pwrite(fd, data.ljust(RECORD_SIZE), 0)


def _record_at(path: Path) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    try:
        return _read_record(fd)
    finally:
        os.close(fd)


def _stale_in(record: dict) -> float:
    """Seconds until a held lease with this record counts as its holder's hang."""
    try:
        return float(record["renewed"]) + float(record["ttl"]) + SKEW - time.time()
    except (KeyError, TypeError, ValueError):
        return float("inf")  # a record without renewals (an older writer): never stale


def _stale(record: dict) -> bool:
    return _stale_in(record) <= 0


def _ended(fd: int) -> Wake:
    """How the lease of an unlocked lock file ended: a released one's file is removed, a
    dead holder's stays behind (with its record)."""
    if os.fstat(fd).st_nlink == 0 or not _read_record(fd).get("holder"):
        return Wake.RELEASED
    return Wake.ABANDONED


def _only_shared_locks(fd: int) -> bool:
    """Whether the lock file `fd` (which could not be locked exclusively) has no holder:
    only shared locks on it, those of `state` readers and of waiters woken by a holder's
    end (a wait that timed out keeps blocking until then), each let go at once."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether the open file is still the one at `path` (not unlinked or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev)
