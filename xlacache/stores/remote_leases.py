"""A server's lease table as its clients see it: the Lease, LeaseHold and LeaseWait RPCs.

An acquire is a LeaseHold call: granted, the lease lives as long as the call (a thread
reads its heartbeats), so the server expires it the moment this process dies; the
holder renews it with Lease RENEW (`HeldLease`) and releases it with Lease RELEASE, then
ends the call. A wait is a LeaseWait that the server holds until the lease ends or the
holder's entry is stored (at most MAX_WAIT a call); a server that answers at once (too
many waits blocked there, or one without blocking waits) is polled. A server without
LeaseHold gets plain Lease acquires (its leases then end by their ttl alone).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import grpc

from xlacache import counters
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import CacheError, StoreUnavailableError
from xlacache.key import check_key
from xlacache.protocol import status
from xlacache.stores.leases import (
    Grant,
    LeaseState,
    LeaseTable,
    Waited,
    Wake,
    poll_interval,
)

if TYPE_CHECKING:
    from xlacache.stores.remote import GrpcStore

MAX_WAIT = 20.0  # seconds one LeaseWait call asks the server to block
HOLD_DEADLINE = 600.0  # seconds a LeaseHold call may last (the server rebinds sooner)
_WAKES = {
    pb.LeaseWaitResponse.HELD: Wake.HELD,
    pb.LeaseWaitResponse.STORED: Wake.STORED,
    pb.LeaseWaitResponse.RELEASED: Wake.RELEASED,
    pb.LeaseWaitResponse.ABANDONED: Wake.ABANDONED,
}


class _Unimplemented(Exception):
    """The server has no LeaseHold."""


class GrpcLeases(LeaseTable):
    """A server's lease table, through its RPCs (see the module docstring)."""

    def __init__(self, store: GrpcStore) -> None:
        self.store = store
        self._holds: dict[tuple[str, str], grpc.Call] = {}
        self._lock = threading.Lock()
        self._can_hold = True

    # -- holding ---------------------------------------------------------------------------

    def acquire(self, name: str, holder: str, ttl: float) -> Grant:
        request = self._request(name, holder, pb.LeaseRequest.ACQUIRE, ttl)
        if self._can_hold:
            try:
                call, reply = self._open(request)
            except _Unimplemented:
                self._can_hold = False
            else:
                if reply.granted:
                    self._bind(name, holder, call, request)
                return Grant(reply.granted, taken_over=reply.taken_over, holder=reply.holder)
        reply = self._lease(request)
        return Grant(reply.granted, taken_over=reply.taken_over, holder=reply.holder)

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        return self._lease(self._request(name, holder, pb.LeaseRequest.RENEW, ttl)).granted

    def release(self, name: str, holder: str) -> None:
        try:
            self._lease(self._request(name, holder, pb.LeaseRequest.RELEASE, 0.0))
        finally:
            with self._lock:
                call = self._holds.pop((name, holder), None)
            if call is not None:
                call.cancel()  # after the release: the server sees no dead holder

    def _open(self, request: pb.LeaseRequest) -> tuple[grpc.Call, pb.LeaseResponse]:
        """A LeaseHold call and its first answer (which must come within the timeout)."""
        store = self.store

        def first():
            call = store._stub.LeaseHold(request, timeout=HOLD_DEADLINE, metadata=store._metadata)
            watchdog = threading.Timer(store.timeout, call.cancel)
            watchdog.daemon = True
            watchdog.start()
            try:
                return call, next(call)
            except StopIteration:
                raise StoreUnavailableError(f"{store.url}: LeaseHold ended unanswered") from None
            except grpc.RpcError as exc:
                if status.code_of(exc) == grpc.StatusCode.UNIMPLEMENTED:
                    return None, None  # the server answered: it has no LeaseHold
                call.cancel()
                raise
            finally:
                watchdog.cancel()

        call, reply = store._call(first)
        if call is None:
            raise _Unimplemented
        return call, reply

    def _bind(self, name: str, holder: str, call: grpc.Call, request: pb.LeaseRequest) -> None:
        with self._lock:
            if self.store.closed:  # closed while the grant was on its way: the ttl ends it
                call.cancel()
                return
            self._holds[(name, holder)] = call
        thread = threading.Thread(
            target=self._keep, args=(name, holder, call, request), daemon=True,
            name="xlacache-lease-hold",
        )  # fmt: skip
        thread.start()

    @counters.background("lease.hold")
    def _keep(self, name: str, holder: str, call: grpc.Call, request: pb.LeaseRequest) -> None:
        """Read the hold's heartbeats; open another when the server asks (rebind)."""
        while True:
            rebind = False
            try:
                for reply in call:
                    rebind = reply.rebind
            except grpc.RpcError as exc:
                with self._lock:
                    ours = self._holds.get((name, holder)) is call and not self.store.closed
                if ours:  # not released (we cancel after): the server went away, the ttl holds
                    counters.hidden("lease.hold", exc)
                return
            with self._lock:
                if self._holds.get((name, holder)) is not call or not rebind:
                    return
            try:
                call, reply = self._open(request)  # our own lease: granted again
            except (CacheError, _Unimplemented) as exc:
                counters.hidden("lease.hold", exc)  # the ttl holds it
                return
            with self._lock:
                if self._holds.get((name, holder)) is None or not reply.granted:
                    call.cancel()
                    return
                self._holds[(name, holder)] = call

    # -- watching --------------------------------------------------------------------------

    def holder(self, name: str) -> str | None:
        return self._ask(name, 0.0, False).holder or None

    def state(self, name: str) -> LeaseState:
        reply = self._ask(name, 0.0, False)
        wake = _wake(reply)
        return LeaseState(reply.holder or None, Wake.RELEASED if wake is Wake.HELD else wake)

    def wait(self, name: str, timeout: float, free: bool = False) -> Waited:
        start = time.monotonic()
        reply = self._ask(name, max(0.0, min(timeout, MAX_WAIT)), free)
        wake = _wake(reply)
        if reply.waited:
            changed = wake is not Wake.HELD or (free and bool(reply.holder))
            return Waited(wake, pushed=changed, holder=reply.holder)
        counters.add("lease_polls")  # answered at once: we poll
        if wake is Wake.HELD or free:
            left = timeout - (time.monotonic() - start)
            time.sleep(max(0.0, min(left, max(poll_interval(0.0), self.polls.reserve()))))
        return Waited(wake, holder=reply.holder)

    def report_wait(self, name: str, loaded: bool, seconds: float, wake_seconds: float) -> None:
        request = pb.LeaseWaitRequest(
            key=name, done=True, loaded=loaded, waited_seconds=seconds, wake_seconds=wake_seconds
        )
        try:
            self._unary(request, self.store.timeout)
        except CacheError as exc:  # figures only
            counters.hidden("lease.report", exc)

    def close(self) -> None:
        with self._lock:
            calls, self._holds = list(self._holds.values()), {}
        for call in calls:  # only a store closed mid-compile gets here
            call.cancel()

    # -- plumbing --------------------------------------------------------------------------

    def _ask(self, name: str, wait: float, free: bool) -> pb.LeaseWaitResponse:
        request = pb.LeaseWaitRequest(key=check_key(name), wait_seconds=wait, free=free)
        return self._unary(request, wait + self.store.timeout)

    def _unary(self, request: pb.LeaseWaitRequest, timeout: float) -> pb.LeaseWaitResponse:
        store = self.store
        return store._call(lambda: store._unary(store._stub.LeaseWait, request, timeout=timeout))

    def _request(self, name: str, holder: str, action, ttl: float) -> pb.LeaseRequest:
        self.store._writable()
        return pb.LeaseRequest(key=check_key(name), holder=holder, action=action, ttl_seconds=ttl)

    def _lease(self, request: pb.LeaseRequest) -> pb.LeaseResponse:
        store = self.store
        return store._call(lambda: store._unary(store._stub.Lease, request))


def _wake(reply: pb.LeaseWaitResponse) -> Wake:
    wake = _WAKES.get(reply.wake, Wake.HELD)
    if wake is Wake.HELD and not reply.holder:
        return Wake.RELEASED  # free, from a server that does not say how it ended
    return wake
