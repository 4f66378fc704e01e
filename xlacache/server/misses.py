"""ReportMiss and RecentMisses: the misses clients explained, kept in a bounded ring.

A client running with XLACACHE_EXPLAIN=1 reports each miss it explained (read tokens
may: a report is no write to the cache). The server stamps the time it received it
and the reporting token's name, keeps the newest RING_SIZE in memory and appends each
to its store directory's miss log (`misslog.MISS_LOG`, itself capped), from which the
ring is refilled when the server starts. Reports are size-bounded (MAX_REPORT_BYTES;
longer texts are clipped) and rate-limited per token name by the gate, as any method
with a `Rate` (`service.MISS_REPORT_RATE`): a noisy client cannot flood the ring, the
disk or the page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import replace

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import InvalidRequestError
from xlacache.key import check_key
from xlacache.misslog import MissRecord
from xlacache.protocol import misses
from xlacache.server.metrics import ServerMetrics
from xlacache.server.rpc import current_client
from xlacache.stores.local import LocalStore

log = logging.getLogger("xlacache.server")

RING_SIZE = 1000  # misses kept in memory (and served)
MAX_REPORT_BYTES = 64 * 1024  # one ReportMiss request


class MissRing:
    """The newest misses clients reported, newest last; persisted beside the store."""

    def __init__(self, store: LocalStore, metrics: ServerMetrics, size: int = RING_SIZE) -> None:
        self.store = store
        self.metrics = metrics
        self._ring: deque[dict] = deque(reversed(store.recent_misses(size)), maxlen=size)
        self._lock = threading.Lock()

    # -- RPCs ------------------------------------------------------------------------------

    def report(self, request: pb.ReportMissRequest, context) -> pb.ReportMissResponse:
        if request.ByteSize() > MAX_REPORT_BYTES:
            raise InvalidRequestError(f"a miss report holds at most {MAX_REPORT_BYTES} bytes")
        check_key(request.miss.key)
        received = replace(misses.from_message(request.miss), time=time.time(),
                           client=current_client())  # fmt: skip
        try:
            record = MissRecord.from_mapping(received).to_dict()
        except ValueError as exc:
            raise InvalidRequestError(f"malformed miss report: {exc}") from None
        with self._lock:
            self._ring.append(record)
        self.metrics.add("miss_reports")
        try:
            self.store.report_miss(record)
        except OSError as exc:  # the ring has it; only a restart would lose it
            log.warning("cannot persist a reported miss: %s", exc)
        return pb.ReportMissResponse()

    def recent(self, request: pb.RecentMissesRequest, context) -> pb.RecentMissesResponse:
        records = self.newest(request.limit or None)
        return pb.RecentMissesResponse(
            misses=[misses.to_message(r) for r in records], total=len(self._ring)
        )

    # -- for the status page ---------------------------------------------------------------

    def newest(self, limit: int | None = None) -> list[dict]:
        """The kept misses, newest first."""
        with self._lock:
            records = list(self._ring)
        records.reverse()
        return records[:limit] if limit is not None else records

    def reasons(self) -> dict[str, int]:
        """Kept misses by reason, most frequent first."""
        with self._lock:
            counts = Counter(r["reason"] for r in self._ring)
        return dict(counts.most_common())
