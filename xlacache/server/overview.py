"""What the status page and /status.json show: one dict, assembled from the server's parts.

Figures since the server started (Get hits and misses, bytes, requests, clients by
token name) come from `ServerMetrics`; what the stored entries hold (size against
the cap, compile seconds saved, the top programs) from the store's index, at most
every USAGE_MAX_AGE seconds; recent misses from the `MissRing`; the time series from
`History`. The page (`status_html`) draws exactly these numbers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from xlacache import explain
from xlacache.server.config import ServerConfig
from xlacache.server.history import History, Sample
from xlacache.server.metrics import ServerMetrics
from xlacache.server.misses import MissRing
from xlacache.stores.base import EntryInfo
from xlacache.stores.local import LocalStore
from xlacache.units import format_size

USAGE_MAX_AGE = 2.0  # seconds a reading of the entries' usage is reused
TOP_PROGRAMS = 10
SHOWN_MISSES = 15


@dataclass
class ProgramUsage:
    """The stored entries of one program (a label: every variant of a jitted function)."""

    label: str
    entries: int = 0
    hits: int = 0
    compile_seconds: float = 0.0  # compiling every stored variant took this long
    saved_seconds: float = 0.0  # hits x compile seconds: compile time the hits saved

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compile_seconds"] = round(self.compile_seconds, 3)
        d["saved_seconds"] = round(self.saved_seconds, 3)
        return d


@dataclass(frozen=True)
class Usage:
    programs: list[ProgramUsage]
    saved_seconds: float

    @classmethod
    def of(cls, infos: Iterable[EntryInfo]) -> Usage:
        by_label: dict[str, ProgramUsage] = {}
        for info in infos:
            usage = by_label.setdefault(info.label, ProgramUsage(info.label))
            usage.entries += 1
            usage.hits += info.hits
            usage.compile_seconds += info.compile_seconds
            usage.saved_seconds += info.hits * info.compile_seconds
        programs = list(by_label.values())
        return cls(programs, sum(p.saved_seconds for p in programs))

    def top(self, by: str, limit: int = TOP_PROGRAMS) -> list[dict]:
        ranked = sorted(self.programs, key=lambda p: (-getattr(p, by), p.label))
        return [p.to_dict() for p in ranked[:limit] if getattr(p, by) > 0]


class Overview:
    """The status of one server, for people (the page) and programs (/status.json)."""

    def __init__(
        self,
        store: LocalStore,
        config: ServerConfig,
        metrics: ServerMetrics,
        misses: MissRing,
        signer_ids: list[str],
        url: str | None = None,
    ) -> None:
        self.store = store
        self.url = url or str(store.root)  # what the server serves (a bucket, or store's dir)
        self.config = config
        self.metrics = metrics
        self.misses = misses
        self.signer_ids = signer_ids
        self.history = History(self._sample, config.sample_interval)
        self._usage: tuple[float, Usage] | None = None
        self._usage_lock = threading.Lock()

    def usage(self, max_age: float = USAGE_MAX_AGE) -> Usage:
        """The entries' usage (a pass over the index, reused for `max_age` seconds)."""
        with self._usage_lock:
            if self._usage is None or time.monotonic() - self._usage[0] > max_age:
                self._usage = (time.monotonic(), Usage.of(self.store.list()))
            return self._usage[1]

    def _sample(self) -> Sample:
        summary = self.store.summary()  # O(1): the index keeps totals
        requests = sum(_requests(self.metrics.plain()).values())
        return Sample(
            time=time.time(),
            hits=self.metrics.value("hits"),
            misses=self.metrics.value("misses"),
            requests=requests,
            saved_seconds=self.usage(max_age=0).saved_seconds,
            store_bytes=summary.bytes,
            entries=summary.entries,
        )

    def status(self, server: dict) -> dict:
        """`server` (version, state, listen, auth, tls) and every figure of the page."""
        summary = self.store.summary()
        hits, misses = self.metrics.value("hits"), self.metrics.value("misses")
        usage = self.usage()
        cap = self.config.max_size
        return {
            **server,
            "store": {
                "path": self.url,
                "max_size": format_size(cap) if cap else "no limit",
                "max_bytes": cap or None,
                "fill": round(summary.bytes / cap, 4) if cap else None,
                **summary.to_dict(),
                "by_jaxlib": [v.to_dict() for v in self.store.by_jaxlib()],
            },
            "hits": int(hits),
            "misses": int(misses),
            "hit_rate": f"{hits / (hits + misses):.1%}" if hits + misses else "n/a",
            "saved_seconds": round(usage.saved_seconds, 3),
            "bytes_sent": self.metrics.value("bytes_sent"),
            "bytes_received": self.metrics.value("bytes_received"),
            "active_rpcs": self.metrics.value("active_rpcs"),
            "uptime_seconds": self.metrics.uptime(),
            "requests": _requests(self.metrics.plain()),
            "signing": {"required": bool(self.signer_ids), "key_ids": self.signer_ids},
            "programs": {
                "by_compile_seconds": usage.top("compile_seconds"),
                "by_hits": usage.top("hits"),
            },
            "recent_misses": [
                {**r, "why": explain.why(r)} for r in self.misses.newest(SHOWN_MISSES)
            ],
            "miss_reasons": self.misses.reasons(),
            "clients": [c.to_dict() for c in self.metrics.clients()],
            "pods": pod_figures(self.metrics.plain()),
            "history": self.history.series(),
        }


def _requests(plain: dict[str, float]) -> dict[str, float]:
    """RPCs finished by "method.status" (ServerMetrics counts them as "requests.*")."""
    return {k.removeprefix("requests."): v for k, v in plain.items() if k.startswith("requests.")}


POD_FIGURES = (
    "leases_granted",  # compiles started under a lease
    "leases_taken_over",  # leases taken from a holder that died or stalled
    "leases_expired_on_disconnect",  # holders noticed dead at once (their connection broke)
    "compiles_avoided",  # waits that ended loading another client's entry
    "wait_seconds",  # seconds clients spent waiting (as they reported)
    "wake_seconds",  # entry created -> a waiter loaded it, summed over compiles avoided
    "lease_waits_blocked",  # LeaseWait calls blocked here now
    "coalesced_reads",  # read-throughs that waited for another's fetch of the key
    "touched",  # prefetched entries clients used (Touch)
    "job_records",  # job manifest updates
)


def pod_figures(plain: dict[str, float]) -> dict:
    """Single-flight and pod figures since start, with the mean wake latency."""
    figures = {name: plain.get(name, 0) for name in POD_FIGURES}
    avoided = figures["compiles_avoided"]
    figures["mean_wake_seconds"] = round(figures["wake_seconds"] / avoided, 4) if avoided else 0
    return figures
