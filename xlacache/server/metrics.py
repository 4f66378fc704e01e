"""Prometheus metrics of the daemon (its own registry, so tests can run several)."""

from __future__ import annotations

import threading
import time
from collections import Counter as PyCounter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from xlacache import counters
from xlacache.stores.base import StoreSummary

# Figures the server's stores count in this process (`xlacache.counters`), exported as
# counters and in the Stats RPC's: read-throughs that waited for another's fetch of the
# same key (a bucket server), and looks at leases a wait had to poll (a bucket's).
PROCESS_FIGURES = {
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
        except Exception:  # noqa: BLE001 - a scrape must not fail because the index is busy
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
        yield CounterMetricFamily(
            "xlacache_evictions", "Entries evicted by size or age limits",
            value=figures.get("evictions", 0),
        )  # fmt: skip
        yield CounterMetricFamily(
            "xlacache_index_drift",
            "Index rows added or dropped to match the entry files (crashes, full disks)",
            value=figures.get("index_drift", 0),
        )
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
    """Every figure the daemon exports, plus the same as plain numbers (`plain`) for the
    Stats RPC and the status page."""

    def __init__(self, summary: Callable[[], StoreSummary], max_size: int | None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "xlacache_requests", "RPCs by method and status code", ["method", "code"], registry=r
        )
        self.latency = Histogram(
            "xlacache_request_seconds", "RPC latency by method", ["method"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.hits = Counter("xlacache_hits", "Get requests that found the entry", registry=r)
        self.misses = Counter("xlacache_misses", "Get requests that found nothing", registry=r)
        self.bytes_out = Counter("xlacache_bytes_sent", "Entry bytes sent by Get", registry=r)
        self.bytes_in = Counter("xlacache_bytes_received", "Entry bytes stored by Put", registry=r)
        self.rejected = Counter(
            "xlacache_rejected", "Requests refused before doing work", ["reason"], registry=r
        )
        self.corrupt = Counter(
            "xlacache_corrupt_entries", "Entries found corrupt and removed", registry=r
        )
        self.active = Gauge("xlacache_active_rpcs", "RPCs running now", registry=r)
        self.upload_memory = Gauge(
            "xlacache_upload_buffer_bytes", "Bytes held by uploads in progress", registry=r
        )
        self.client_requests = Counter(
            "xlacache_client_requests", "RPCs by client (token name)", ["client"], registry=r
        )
        self.store = _StoreCollector(summary, max_size)
        r.register(self.store)
        self.started = time.time()
        self._plain: PyCounter[str] = PyCounter()
        self._clients: dict[str, ClientUsage] = {}  # bounded: names come from the token file
        self._lock = threading.Lock()

    def uptime(self) -> float:
        return time.time() - self.started

    def started_rpc(self) -> float:
        """Count an RPC as active; returns its start time for finished_rpc."""
        self.active.inc()
        self.add("active_rpcs")
        return time.perf_counter()

    def finished_rpc(self, method: str, code: str, seconds: float, client: str = "") -> None:
        self.active.dec()
        self.requests.labels(method, code).inc()
        self.latency.labels(method).observe(seconds)
        if client:
            self.client_requests.labels(client).inc()
        with self._lock:
            self._plain["active_rpcs"] -= 1
            self._plain[f"requests.{method}.{code}"] += 1
            if client:
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
        self.hits.inc()
        self.bytes_out.inc(size)
        self.add("hits")
        self.add("bytes_sent", size)

    def peeked(self, size: int) -> None:
        """An entry sent to a tool (GetRequest.peek): bytes sent, no hit."""
        self.bytes_out.inc(size)
        self.add("peeks")
        self.add("bytes_sent", size)

    def miss(self) -> None:
        self.misses.inc()
        self.add("misses")

    def received(self, size: int) -> None:
        self.bytes_in.inc(size)
        self.add("bytes_received", size)

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._plain[name] += amount

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
