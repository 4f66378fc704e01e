"""The Lease and LeaseWait RPCs: single-flight for the server's clients.

One table per server: in memory over a cache directory (`MemoryLeases`), in the bucket
over ``--store gs://`` (`GCSLeases`), so replicas over one bucket grant a key to one
client at a time. Figures: leases granted and taken over, waits that ended, compiles
avoided by waiting and seconds spent waiting (as the waiting clients report them).
"""

from __future__ import annotations

from prometheus_client import Counter

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import InvalidRequestError
from xlacache.server.metrics import ServerMetrics
from xlacache.server.rpc import checked_key
from xlacache.stores.leases import DEFAULT_TTL, LeaseTable

MAX_HOLDER = 256  # characters of a holder id
MAX_REPORTED_WAIT = 86400.0


class LeaseHandlers:
    def __init__(self, table: LeaseTable, metrics: ServerMetrics) -> None:
        self.table = table
        self.metrics = metrics
        r = metrics.registry
        self.granted = Counter("xlacache_leases_granted", "Leases granted", registry=r)
        self.taken_over = Counter(
            "xlacache_leases_taken_over",
            "Leases granted over an expired one (its holder died or stalled)",
            registry=r,
        )
        self.refused = Counter(
            "xlacache_leases_refused", "Acquires refused: another client holds the lease",
            registry=r,
        )  # fmt: skip
        self.waits = Counter(
            "xlacache_lease_waits", "Waits for another client's compile, ended by outcome",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.avoided = Counter(
            "xlacache_compiles_avoided",
            "Compiles avoided: waits that ended loading another client's entry",
            registry=r,
        )
        self.wait_seconds = Counter(
            "xlacache_wait_seconds", "Seconds clients spent waiting on leases", registry=r
        )

    def lease(self, request: pb.LeaseRequest, context) -> pb.LeaseResponse:
        key = checked_key(request.key)
        holder = request.holder
        if not holder or len(holder) > MAX_HOLDER:
            raise InvalidRequestError(f"holder must be 1 to {MAX_HOLDER} characters")
        ttl = request.ttl_seconds or DEFAULT_TTL
        action = request.action
        if action == pb.LeaseRequest.ACQUIRE:
            grant = self.table.acquire(key, holder, ttl)
            if grant.granted:
                self.granted.inc()
                self.metrics.add("leases_granted")
                if grant.taken_over:
                    self.taken_over.inc()
                    self.metrics.add("leases_taken_over")
            else:
                self.refused.inc()
            return pb.LeaseResponse(
                granted=grant.granted, taken_over=grant.taken_over, holder=grant.holder
            )
        if action == pb.LeaseRequest.RENEW:
            held = self.table.renew(key, holder, ttl)
            return pb.LeaseResponse(granted=held, holder=holder if held else "")
        if action == pb.LeaseRequest.RELEASE:
            self.table.release(key, holder)
            return pb.LeaseResponse()
        raise InvalidRequestError("lease action must be ACQUIRE, RENEW or RELEASE")

    def wait(self, request: pb.LeaseWaitRequest, context) -> pb.LeaseWaitResponse:
        key = checked_key(request.key)
        if not request.done:
            return pb.LeaseWaitResponse(holder=self.table.holder(key) or "")
        seconds = request.waited_seconds
        if not 0 <= seconds <= MAX_REPORTED_WAIT:
            raise InvalidRequestError("waited_seconds out of range")
        self.waits.labels("loaded" if request.loaded else "compiled").inc()
        self.wait_seconds.inc(seconds)
        self.metrics.add("wait_seconds", seconds)
        if request.loaded:
            self.avoided.inc()
            self.metrics.add("compiles_avoided")
        return pb.LeaseWaitResponse()
