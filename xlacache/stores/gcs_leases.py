"""Leases as objects in a bucket: what clients of one bucket, and server replicas over it,
agree on (see `stores/leases.py` for the protocol every backend follows).

A lease is the object ``PREFIX/leases/<key>`` holding ``{"holder", "expires", "ttl",
"since"}`` (expires, since: the holder's Unix clock). It is

- acquired by creating the object with ifGenerationMatch=0 (GCS lets one creator win);
- renewed by the holder, rewriting it with ifGenerationMatch=<the generation it read>;
- taken over, once ``expires`` has passed (plus `skew` for clocks that disagree), by
  rewriting it with ifGenerationMatch=<the stale generation>: of several waiters that
  try at once, one wins and the others see a live lease again;
- released by deleting that generation;
- expired at once by a server whose client holding it went away (`expire`: "expires"
  rewritten to 0), so that the next acquire is a takeover.

Nothing tells a waiter that a lease ended: waits poll the object (`LeaseTable.wait`:
often while the compile is young, per `since`), one GET a look.

Every call goes through `GCSObjects` (a deadline, retries, the breaker). A write whose
answer was lost may be retried into "precondition failed" though it landed: the
holder id in the object tells whose write it was, so a holder recognizes its own.
Nothing here is stateful: any replica can renew or release a lease another granted.
"""

from __future__ import annotations

import json
import time

from xlacache import counters
from xlacache.key import check_key
from xlacache.stores.gcs_objects import GCSObjects
from xlacache.stores.leases import (
    Grant,
    LeaseState,
    LeaseTable,
    Wake,
    clamp_ttl,
)

LEASES = "leases/"
DEFAULT_SKEW = 2.0  # seconds of clock disagreement tolerated before a lease counts as expired


class GCSLeases(LeaseTable):
    """Lease objects under ``leases/`` of a GCSObjects root."""

    def __init__(self, objects: GCSObjects, timeout: float = 10.0, skew: float = DEFAULT_SKEW):
        self.objects = objects
        self.timeout = timeout
        self.skew = skew

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        obj = self._object(name)
        body = self._body(holder, ttl, time.time())
        for _ in range(2):  # a lease released between our create and our read: once more
            if self.objects.create(obj, body, deadline=self.timeout) is not None:
                return Grant(True, holder=holder)
            found = self.objects.read(obj, deadline=self.timeout)
            if found is None:
                continue
            data, info = found
            record = _record(data)
            current = record.get("holder", "")
            if current != holder and not self._expired(record):
                return Grant(False, holder=current)
            if current == holder:
                body = self._body(holder, ttl, _since(record))
            rewritten = self.objects.replace(obj, body, info.generation, deadline=self.timeout)
            if rewritten is None:  # another waiter took it over first
                return Grant(False, holder=self.holder(name) or "")
            return Grant(True, taken_over=current != holder, holder=holder)
        return Grant(False)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        obj = self._object(name)
        found = self.objects.read(obj, deadline=self.timeout)
        if found is None:
            return False
        record = _record(found[0])
        if record.get("holder") != holder:
            return False
        body = self._body(holder, ttl, _since(record))
        if self.objects.replace(obj, body, found[1].generation, deadline=self.timeout):
            return True
        again = self.objects.read(obj, deadline=self.timeout)  # our own write, answered late?
        return again is not None and _record(again[0]).get("holder") == holder

    def release(self, name: str, holder: str) -> None:
        obj = self._object(name)
        found = self.objects.read(obj, deadline=self.timeout)
        if found is not None and _record(found[0]).get("holder") == holder:
            self.objects.delete(obj, generation=found[1].generation, deadline=self.timeout)

    def expire(self, name: str, holder: str) -> None:
        obj = self._object(name)
        found = self.objects.read(obj, deadline=self.timeout)
        if found is None:
            return
        record = _record(found[0])
        if record.get("holder") == holder:
            dead = json.dumps({**record, "expires": 0}).encode()
            self.objects.replace(obj, dead, found[1].generation, deadline=self.timeout)

    def holder(self, name: str) -> str | None:
        return self.state(name)[0]

    def state(self, name: str) -> LeaseState:
        found = self.objects.read(self._object(name), deadline=self.timeout)
        if found is None:
            return LeaseState(None, Wake.RELEASED)
        record = _record(found[0])
        if self._expired(record):
            return LeaseState(None, Wake.ABANDONED)
        since = _since(record)
        age = max(0.0, time.time() - since) if since else None
        expires_in = float(record["expires"]) + self.skew - time.time()
        return LeaseState(record.get("holder") or "unknown", Wake.HELD, age, expires_in)

    # -- helpers -------------------------------------------------------------------------

    def _object(self, name: str) -> str:
        return LEASES + check_key(name)

    def _body(self, holder: str, ttl: float, since: float) -> bytes:
        ttl = clamp_ttl(ttl)
        record = {"holder": holder, "expires": time.time() + ttl, "ttl": ttl, "since": since}
        return json.dumps(record).encode()

    def _expired(self, record: dict) -> bool:
        try:
            expires = float(record["expires"])
        except (KeyError, TypeError, ValueError):
            return True  # an unreadable lease object protects nothing
        return time.time() > expires + self.skew


def _record(data: bytes) -> dict:
    """A lease object's record; an unreadable one protects nothing (`counters.hidden`:
    lease objects are written whole, so that is another writer's bug)."""
    try:
        record = json.loads(data)
    except ValueError as exc:
        counters.hidden("lease.record", exc)
        return {}
    return record if isinstance(record, dict) else {}


def _since(record: dict) -> float:
    """When the holder took the lease (0: unknown, a lease written before `since`)."""
    since = record.get("since")
    return float(since) if isinstance(since, (int, float)) else 0.0
