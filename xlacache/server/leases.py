"""The Lease, LeaseHold and LeaseWait RPCs: single-flight for the server's clients.

One table per server: in memory over a cache directory (`MemoryLeases`), in the bucket
over ``--store gs://`` (`GCSLeases`), so replicas over one bucket grant a key to one
client at a time.

- **LeaseHold** binds a lease to its holder's connection: the handler sends heartbeats
  (so the stream is never idle) and, when the call ends without a release (the client's
  process died, its connection broke), expires the lease at once: the next acquire is a
  takeover, by exactly one waiter. The holder still renews within its ttl, so a holder
  that hangs but keeps its connection is outlasted by the ttl. Before the server's
  request timeout would cut it, a hold ends with `rebind` and the client opens another.
- **LeaseWait** with `wait_seconds` blocks (at most MAX_WAIT per call, at most
  `max_blocked` calls at once; beyond that it answers at once and the client polls)
  until the lease ends or the holder's entry is stored here (`LeaseTable.notify`).

Figures (rows of `server.metrics.FIGURES`): leases granted, refused, taken over and
expired on disconnect, waits that ended by how, compiles avoided, seconds spent waiting
and wake latency (as the waiting clients report them), waits blocked now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import InvalidRequestError
from xlacache.key import check_key
from xlacache.server.metrics import ServerMetrics
from xlacache.stores.leases import DEFAULT_TTL, LeaseTable, Wake

MAX_HOLDER = 256  # characters of a holder id
MAX_REPORTED_WAIT = 86400.0
MAX_WAIT = 20.0  # seconds one LeaseWait call may block (the client asks again)
HEARTBEAT = 5.0  # seconds between LeaseHold heartbeats (less with a short idle timeout)
MAX_HOLD = 240.0  # seconds one LeaseHold stream lives before it rebinds
_WAKES = {
    Wake.HELD: pb.LeaseWaitResponse.HELD,
    Wake.STORED: pb.LeaseWaitResponse.STORED,
    Wake.RELEASED: pb.LeaseWaitResponse.RELEASED,
    Wake.ABANDONED: pb.LeaseWaitResponse.ABANDONED,
}


class LeaseHandlers:
    def __init__(
        self,
        table: LeaseTable,
        metrics: ServerMetrics,
        *,
        request_timeout: float = 600.0,
        idle_timeout: float = 20.0,
        max_blocked: int = 32,
    ) -> None:
        self.table = table
        self.metrics = metrics
        self.heartbeat = min(HEARTBEAT, idle_timeout / 3) if idle_timeout > 0 else HEARTBEAT
        self.max_hold = min(MAX_HOLD, request_timeout * 0.8) if request_timeout > 0 else MAX_HOLD
        self._blocked = threading.BoundedSemaphore(max(1, max_blocked))

    # -- Lease -----------------------------------------------------------------------------

    def lease(self, request: pb.LeaseRequest, context) -> pb.LeaseResponse:
        key, holder, ttl = self._checked(request)
        action = request.action
        if action == pb.LeaseRequest.ACQUIRE:
            return self._acquire(key, holder, ttl)
        if action == pb.LeaseRequest.RENEW:
            held = self.table.renew(key, holder, ttl)
            return pb.LeaseResponse(granted=held, holder=holder if held else "")
        if action == pb.LeaseRequest.RELEASE:
            self.table.release(key, holder)
            return pb.LeaseResponse()
        raise InvalidRequestError("lease action must be ACQUIRE, RENEW or RELEASE")

    def _checked(self, request: pb.LeaseRequest) -> tuple[str, str, float]:
        key = check_key(request.key)
        holder = request.holder
        if not holder or len(holder) > MAX_HOLDER:
            raise InvalidRequestError(f"holder must be 1 to {MAX_HOLDER} characters")
        return key, holder, request.ttl_seconds or DEFAULT_TTL

    def _acquire(self, key: str, holder: str, ttl: float) -> pb.LeaseResponse:
        grant = self.table.acquire(key, holder, ttl)
        if grant.granted:
            self.metrics.add("leases_granted")
            if grant.taken_over:
                self.metrics.add("leases_taken_over")
        else:
            self.metrics.add("leases_refused")
        return pb.LeaseResponse(
            granted=grant.granted, taken_over=grant.taken_over, holder=grant.holder
        )

    # -- LeaseHold -------------------------------------------------------------------------

    def hold(self, request: pb.LeaseRequest, context) -> Iterator[pb.LeaseResponse]:
        """Acquire, then keep the lease bound to this call (see the module docstring)."""
        key, holder, ttl = self._checked(request)
        if request.action != pb.LeaseRequest.ACQUIRE:
            raise InvalidRequestError("LeaseHold takes an ACQUIRE")
        answer = self._acquire(key, holder, ttl)
        yield answer
        if not answer.granted:
            return
        ended = threading.Event()
        context.add_callback(ended.set)  # the call ended: released, cancelled, or cut
        rebind_at = time.monotonic() + self.max_hold
        rebound = False
        try:
            while not ended.wait(self.heartbeat):
                if self.table.holder(key) != holder:
                    return  # released (or lost to a takeover): nothing left to hold
                rebound = time.monotonic() >= rebind_at
                yield pb.LeaseResponse(granted=True, holder=holder, rebind=rebound)
                if rebound:
                    return
        finally:
            if not rebound and not context.is_active() and self.table.holder(key) == holder:
                self.table.expire(key, holder)  # its holder is gone: a waiter takes over
                self.metrics.add("leases_expired_on_disconnect")

    # -- LeaseWait -------------------------------------------------------------------------

    def wait(self, request: pb.LeaseWaitRequest, context) -> pb.LeaseWaitResponse:
        key = check_key(request.key)
        if request.done:
            return self._report(request)
        if not 0 <= request.wait_seconds <= MAX_REPORTED_WAIT:
            raise InvalidRequestError("wait_seconds out of range")
        if request.wait_seconds > 0 and self._blocked.acquire(blocking=False):
            try:
                self.metrics.add("lease_waits_blocked")
                remaining = context.time_remaining()
                budget = min(request.wait_seconds, MAX_WAIT)
                if remaining is not None:
                    budget = min(budget, max(0.0, remaining - 1.0))  # answer within its deadline
                waited = self.table.wait(key, budget, free=request.free)
            finally:
                self.metrics.add("lease_waits_blocked", -1)
                self._blocked.release()
            self.metrics.add("lease_wakes", 1, waited.wake.value)
            return pb.LeaseWaitResponse(holder=waited.holder, wake=_WAKES[waited.wake], waited=True)
        holder, ended, _, _ = self.table.state(key)
        wake = Wake.HELD if holder is not None else ended
        return pb.LeaseWaitResponse(holder=holder or "", wake=_WAKES[wake])

    def _report(self, request: pb.LeaseWaitRequest) -> pb.LeaseWaitResponse:
        seconds, wake = request.waited_seconds, request.wake_seconds
        if not (0 <= seconds <= MAX_REPORTED_WAIT and 0 <= wake <= MAX_REPORTED_WAIT):
            raise InvalidRequestError("waited_seconds or wake_seconds out of range")
        self.metrics.add("lease_waits", 1, "loaded" if request.loaded else "compiled")
        self.metrics.add("wait_seconds", seconds)
        if request.loaded:
            self.metrics.add("compiles_avoided")
            self.metrics.add("wake_seconds", wake)
        return pb.LeaseWaitResponse()

    def stored(self, key: str) -> None:
        """An entry was stored here: wake the clients waiting on its lease."""
        self.table.notify(key)
