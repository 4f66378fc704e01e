"""The daemon's figures: one table (`FIGURES`) feeds both Prometheus and the plain numbers.

Each figure is counted once, by name (`ServerMetrics.add`), and lands in its Prometheus
metric (its own registry, so tests can run several) and in the plain dict (`plain`: the
Stats RPC's counters, the status page), under its name, or ``name.label...`` for a
labelled one (``requests.Get.OK``). Figures the server's stores count in this process
(`xlacache.counters`) are read when scraped: `PROCESS_FIGURES`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter as PyCounter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from xlacache import counters
from xlacache.errors import IndexBusyError
from xlacache.stores.base import StoreSummary


@dataclass(frozen=True)
class Figure:
    """A figure the server counts: its Prometheus metric (``xlacache_<name>``, a counter
    unless `gauge`) and what it counts; `labels` name its label values, in order."""

    help: str
    labels: tuple[str, ...] = ()
    gauge: bool = False


FIGURES: dict[str, Figure] = {
    # RPCs (server.rpc.Gate)
    "requests": Figure("RPCs by method and status code", ("method", "code")),
    "active_rpcs": Figure("RPCs running now", gauge=True),
    "client_requests": Figure("RPCs by client (token name)", ("client",)),
    "rejected": Figure("Requests refused before doing work", ("reason",)),
    # entries (server.transfers, server.queries)
    "hits": Figure("Get requests that found the entry"),
    "misses": Figure("Get requests that found nothing"),
    "peeks": Figure("Get requests of tools (GetRequest.peek): sent, not a hit"),
    "bytes_sent": Figure("Entry bytes sent by Get"),
    "bytes_received": Figure("Entry bytes stored by Put"),
    "corrupt_entries": Figure("Entries found corrupt and removed"),
    "upload_buffer_bytes": Figure("Bytes held by uploads in progress", gauge=True),
    # single-flight (server.leases)
    "leases_granted": Figure("Leases granted"),
    "leases_taken_over": Figure("Leases granted over an expired one (its holder died or stalled)"),
    "leases_expired_on_disconnect": Figure(
        "Leases expired at once because their holder's connection broke (it died)"
    ),
    "leases_refused": Figure("Acquires refused: another client holds the lease"),
    "lease_waits": Figure("Waits for another client's compile, ended by outcome", ("outcome",)),
    "lease_wakes": Figure("Blocked LeaseWait calls that ended by how the lease ended", ("wake",)),
    "lease_waits_blocked": Figure("LeaseWait calls blocked on the server now", gauge=True),
    "compiles_avoided": Figure("Compiles avoided: waits that ended loading another client's entry"),
    "wait_seconds": Figure("Seconds clients spent waiting on leases"),
    "wake_seconds": Figure(
        "Seconds from a holder's entry being created to a waiting client loading it"
    ),
    # jobs and misses (server.jobs, server.misses)
    "touched": Figure("Prefetched entries clients reported using (Touch)"),
    "job_records": Figure("Job manifest updates (RecordJob)"),
    "miss_reports": Figure("Explained misses clients reported (ReportMiss)"),
}

# Figures the server's stores count in this process (`xlacache.counters`), exported as
# counters when scraped and in the plain numbers: evictions and index drift (a directory
# store), read-throughs that waited for another's fetch of the same key (a bucket
# server), and looks at leases a wait had to poll (a bucket's).
PROCESS_FIGURES = {
    "evictions": "Entries evicted by size or age limits",
    "index_drift": "Index rows added or dropped to match the entry files (crashes, full disks)",
    "coalesced_reads": "Reads of a key that waited for another request's fetch of it",
    "lease_polls": "Looks at a lease that server-side waits had to poll (a bucket's)",
}
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _StoreCollector:
    """Store size and evictions, read when scraped (cached for a second)."""

    def __init__(self, summary: Callable[[], StoreSummary], max_size: int | None) -> None:
        self._summary = summary
        self._max_size = max_size
        self._cached: tuple[float, StoreSummary] | None = None
        self._lock = threading.Lock()

    def summary(self) -> StoreSummary:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > 1.0:
                self._cached = (time.monotonic(), self._summary())
            return self._cached[1]

    def collect(self):
        try:
            s = self.summary()
        except IndexBusyError:  # a scrape must not fail because the index is busy
            s = StoreSummary()
        except Exception as exc:  # noqa: BLE001 - nor for anything else, but strict mode says
            counters.hidden("metrics.scrape", exc)
            s = StoreSummary()
        yield GaugeMetricFamily("xlacache_store_entries", "Entries in the store", value=s.entries)
        yield GaugeMetricFamily(
            "xlacache_store_bytes", "Bytes the store's entries take", value=s.bytes
        )
        yield GaugeMetricFamily(
            "xlacache_store_max_bytes",
            "Size limit of the store (0: none)",
            value=self._max_size or 0,
        )
        figures = counters.snapshot()
        for name, help_text in PROCESS_FIGURES.items():
            yield CounterMetricFamily(f"xlacache_{name}", help_text, value=figures.get(name, 0))


@dataclass
class ClientUsage:
    """What one client (a token's name) asked of the server since it started."""

    name: str
    requests: int = 0
    errors: int = 0  # calls that ended in a status other than OK
    last_seen: float = 0.0
    methods: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class ServerMetrics:
    """Every figure the daemon exports (`FIGURES`, `PROCESS_FIGURES`, RPC latency, the
    store's size), plus the same as plain numbers (`plain`) for the Stats RPC and the
    status page, and what each client asked (`clients`)."""

    def __init__(self, summary: Callable[[], StoreSummary], max_size: int | None) -> None:
        self.registry = CollectorRegistry()
        self._metrics = {
            name: (Gauge if f.gauge else Counter)(
                f"xlacache_{name}", f.help, list(f.labels), registry=self.registry
            )
            for name, f in FIGURES.items()
        }
        self.latency = Histogram(
            "xlacache_request_seconds", "RPC latency by method", ["method"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.store = _StoreCollector(summary, max_size)
        self.registry.register(self.store)
        self.started = time.time()
        self._plain: PyCounter[str] = PyCounter()
        self._clients: dict[str, ClientUsage] = {}  # bounded: names come from the token file
        self._lock = threading.Lock()

    def add(self, name: str, amount: float = 1, *labels: str) -> None:
        """Count `amount` of figure `name` (with its label values, in order): in its
        Prometheus metric and in the plain numbers (a gauge goes down by a negative one)."""
        metric = self._metrics[name]
        (metric.labels(*labels) if labels else metric).inc(amount)
        with self._lock:
            self._plain[".".join((name, *labels))] += amount

    def uptime(self) -> float:
        return time.time() - self.started

    def started_rpc(self) -> float:
        """Count an RPC as active; returns its start time for finished_rpc."""
        self.add("active_rpcs")
        return time.perf_counter()

    def finished_rpc(self, method: str, code: str, seconds: float, client: str = "") -> None:
        self.add("active_rpcs", -1)
        self.add("requests", 1, method, code)
        self.latency.labels(method).observe(seconds)
        if not client:
            return
        self._metrics["client_requests"].labels(client).inc()  # plain: `clients`
        with self._lock:
            usage = self._clients.setdefault(client, ClientUsage(client))
            usage.requests += 1
            usage.errors += code != "OK"
            usage.last_seen = time.time()
            usage.methods[method] = usage.methods.get(method, 0) + 1

    def clients(self) -> list[ClientUsage]:
        """Every client seen, most requests first (copies)."""
        with self._lock:
            copies = [ClientUsage(**{**u.to_dict(), "methods": dict(u.methods)})
                      for u in self._clients.values()]  # fmt: skip
        return sorted(copies, key=lambda u: (-u.requests, u.name))

    def hit(self, size: int) -> None:
        self.add("hits")
        self.add("bytes_sent", size)

    def peeked(self, size: int) -> None:
        """An entry sent to a tool (GetRequest.peek): bytes sent, no hit."""
        self.add("peeks")
        self.add("bytes_sent", size)

    def set(self, name: str, value: float) -> None:
        """Set the gauge `name` (no labels) to `value`, in Prometheus and the plain numbers."""
        self._metrics[name].set(value)
        with self._lock:
            self._plain[name] = value

    def value(self, name: str) -> float:
        """One plain figure (hits, misses, bytes_sent, bytes_received, active_rpcs, ...)."""
        with self._lock:
            return self._plain.get(name, 0)

    def plain(self) -> dict[str, float]:
        figures = counters.snapshot()
        with self._lock:
            plain = dict(self._plain)
        plain.update({name: figures.get(name, 0) for name in PROCESS_FIGURES})
        return plain
