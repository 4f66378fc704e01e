"""The `xlacache.v1.Cache` service over a store: which handler serves which method.

`METHODS` is the whole service at a glance: each RPC's role, request type and
handler. The handlers live in `transfers` (Get, Put), `leases` (Lease, LeaseWait),
`misses` (ReportMiss, RecentMisses), `jobs` (Touch, JobKeys, RecordJob) and `queries`
(the rest); what every call goes
through (parsing, auth, deadline, metrics, statuses) is `rpc.Gate`.
A new RPC is a line here, a handler, and a message in proto/xlacache/v1/cache.proto.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import grpc

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.protocol import SERVICE_NAME
from xlacache.rates import Rate
from xlacache.server.auth import Role, TokenTable
from xlacache.server.config import ServerConfig
from xlacache.server.jobs import JobHandlers
from xlacache.server.leases import LeaseHandlers
from xlacache.server.limits import IdleMonitor, Watchdog
from xlacache.server.metrics import ServerMetrics
from xlacache.server.misses import MissRing
from xlacache.server.queries import Queries
from xlacache.server.rpc import Gate
from xlacache.server.storage import ServedStore, job_log
from xlacache.server.transfers import Transfers
from xlacache.stores.leases import LeaseTable


class Method(NamedTuple):
    role: Role
    request: type | None  # None: the handler takes the raw messages (Put)
    handler: str  # "part.method" of CacheService
    kind: str  # "unary", "stream_out" (Get) or "stream_in" (Put)
    rate: Rate | None = None  # calls per token (RESOURCE_EXHAUSTED, rate_limited, beyond)
    # The role a parsed request needs when its fields make it more than a read (`role`
    # admits the call; this is checked once the request is parsed).
    role_for: Callable[[object], Role] | None = None


# A client reports an entry it found corrupt once; a read token may not make the server
# verify large entries in a loop.
REPORT_RATE = Rate(per_second=1.0, burst=20)
# Every worker of a pod (one token, often) touches once a second at most; a job's
# writers record its manifest every few seconds.
TOUCH_RATE = Rate(per_second=50.0, burst=200)
RECORD_JOB_RATE = Rate(per_second=5.0, burst=50)
# Verify reads every entry: a few at once per token, then one a minute.
VERIFY_RATE = Rate(per_second=1 / 60, burst=4)
# A client running with XLACACHE_EXPLAIN=1 reports each miss (it holds itself to less):
# a noisy one cannot flood the ring, the disk or the page.
MISS_REPORT_RATE = Rate(per_second=10.0, burst=200)


def _prune_role(request: pb.PruneRequest) -> Role:
    return Role.READ if request.dry_run else Role.ADMIN  # a dry run only reads


def _verify_role(request: pb.VerifyRequest) -> Role:
    return Role.ADMIN if request.repair else Role.READ  # without repair it only reads


METHODS: dict[str, Method] = {
    "Get": Method(Role.READ, pb.GetRequest, "transfers.get", "stream_out"),
    "Put": Method(Role.WRITE, None, "transfers.put", "stream_in"),
    "Contains": Method(Role.READ, pb.ContainsRequest, "queries.contains", "unary"),
    "Stat": Method(Role.READ, pb.StatRequest, "queries.stat", "unary"),
    "List": Method(Role.READ, pb.ListRequest, "queries.list", "unary"),
    "Stats": Method(Role.READ, pb.StatsRequest, "queries.stats", "unary"),
    "ReportCorrupt": Method(
        Role.READ, pb.ReportCorruptRequest, "queries.report_corrupt", "unary", REPORT_RATE
    ),
    "Delete": Method(Role.ADMIN, pb.DeleteRequest, "queries.delete", "unary"),
    "Prune": Method(Role.READ, pb.PruneRequest, "queries.prune", "unary", role_for=_prune_role),
    "Verify": Method(
        Role.READ, pb.VerifyRequest, "queries.verify", "unary", VERIFY_RATE, _verify_role
    ),
    "ReportMiss": Method(
        Role.READ, pb.ReportMissRequest, "misses.report", "unary", MISS_REPORT_RATE
    ),
    "RecentMisses": Method(Role.READ, pb.RecentMissesRequest, "misses.recent", "unary"),
    "Lease": Method(Role.WRITE, pb.LeaseRequest, "leases.lease", "unary"),
    "LeaseHold": Method(Role.WRITE, pb.LeaseRequest, "leases.hold", "stream_out"),
    "LeaseWait": Method(Role.READ, pb.LeaseWaitRequest, "leases.wait", "unary"),
    "Touch": Method(Role.READ, pb.TouchRequest, "jobs.touch", "unary", TOUCH_RATE),
    "JobKeys": Method(Role.READ, pb.JobKeysRequest, "jobs.keys", "unary"),
    "RecordJob": Method(Role.WRITE, pb.RecordJobRequest, "jobs.record", "unary", RECORD_JOB_RATE),
}


class CacheService:
    """The service's parts over one store."""

    def __init__(
        self,
        store: ServedStore,
        config: ServerConfig,
        tokens: TokenTable,
        metrics: ServerMetrics,
        watchdog: Watchdog,
        leases: LeaseTable,
        idle: IdleMonitor,
    ) -> None:
        self.store = store
        self.gate = Gate(tokens, metrics, watchdog, config.request_timeout, config.workers, idle)
        self.transfers = Transfers(store, config, metrics)
        self.queries = Queries(store, config, metrics, self.transfers)
        self.misses = MissRing(store, metrics)
        self.leases = LeaseHandlers(
            leases, metrics, request_timeout=config.request_timeout,
            idle_timeout=config.idle_timeout, max_blocked=max(1, config.workers // 4),
        )  # fmt: skip
        self.transfers.on_stored = self.leases.stored
        self.jobs = JobHandlers(store, job_log(store), metrics)

    def handler(self, name: str):
        """The gRPC method implementation of RPC `name` (parsing, auth, ... included)."""
        method = METHODS[name]
        part, attr = method.handler.split(".")
        fn = getattr(getattr(self, part), attr)
        wrap = self.gate.stream if method.kind == "stream_out" else self.gate.unary
        return wrap(
            name, method.role, method.request, fn, rate=method.rate, role_for=method.role_for
        )


def _serialize(message) -> bytes:
    """A response message's bytes (Get's are wire-format bytes already)."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def method_handlers(service: CacheService) -> grpc.GenericRpcHandler:
    """The Cache service's handlers. Requests arrive as bytes and are parsed by the gate
    (a garbage body is INVALID_ARGUMENT); Get and Put move wire-format bytes."""
    factories = {
        "unary": grpc.unary_unary_rpc_method_handler,
        "stream_out": grpc.unary_stream_rpc_method_handler,
        "stream_in": grpc.stream_unary_rpc_method_handler,
    }
    handlers = {
        name: factories[method.kind](
            service.handler(name),
            request_deserializer=None,
            response_serializer=_serialize,
        )
        for name, method in METHODS.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
