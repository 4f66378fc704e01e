"""The small RPCs: Contains, Stat, Delete, List, Stats, Prune, Verify, ReportCorrupt.

Each is one call on the store, its arguments checked and its answer converted. List
pages in the store's index (`Store.list_page`): a page costs O(page), not O(store).
"""

from __future__ import annotations

import logging
import time

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache._version import __version__
from xlacache.errors import CorruptEntryError, InvalidRequestError, ServerBusyError
from xlacache.key import check_key, is_valid_key
from xlacache.server.config import ServerConfig
from xlacache.server.limits import Slots
from xlacache.server.metrics import ServerMetrics
from xlacache.server.rpc import checked_batch
from xlacache.server.storage import ServedStore
from xlacache.server.transfers import Transfers
from xlacache.stores.base import EntryInfo, PrunePolicy

log = logging.getLogger("xlacache.server")

DEFAULT_PAGE = 1000
MAX_PAGE = 10_000
MAX_VERIFICATIONS = 2  # ReportCorrupt checks at once (each reads an entry from disk)


def _info(info: EntryInfo) -> pb.EntryInfo:
    return pb.EntryInfo(**info.to_dict())


def _optional(request, name: str):
    return getattr(request, name) if request.HasField(name) else None


class Queries:
    def __init__(
        self,
        store: ServedStore,
        config: ServerConfig,
        metrics: ServerMetrics,
        transfers: Transfers,
    ) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        self.transfers = transfers  # removes corrupt entries the same way Get does
        self.verifications = Slots(MAX_VERIFICATIONS)  # ReportCorrupt checks at once

    def contains(self, request, context) -> pb.ContainsResponse:
        keys = checked_batch(request.keys)
        return pb.ContainsResponse(present=[self.store.contains(k) for k in keys])

    def stat(self, request, context) -> pb.StatResponse:
        results = []
        for key in checked_batch(request.keys):
            info = self.store.stat(key)
            results.append(pb.StatResult(found=True, info=_info(info)) if info else pb.StatResult())
        return pb.StatResponse(results=results)

    def delete(self, request, context) -> pb.DeleteResponse:
        return pb.DeleteResponse(deleted=self.store.delete(check_key(request.key)))

    def list(self, request, context) -> pb.ListResponse:
        size = min(request.page_size or DEFAULT_PAGE, MAX_PAGE)
        after = request.page_token
        if after and not is_valid_key(after):
            raise InvalidRequestError("invalid page_token")
        infos = self.store.list_page(after, size + 1)  # one more: is there a next page?
        page = infos[:size]
        token = page[-1].key if len(infos) > size else ""
        return pb.ListResponse(entries=[_info(i) for i in page], next_page_token=token)

    def stats(self, request, context) -> pb.StatsResponse:
        return pb.StatsResponse(
            summary=pb.StoreSummary(**self.store.summary().to_dict()),
            max_size=self.config.max_size or 0,
            max_entry_size=self.config.max_entry_size,
            version=__version__,
            uptime_seconds=time.time() - self.metrics.started,
            counters=self.metrics.plain(),
            by_jaxlib=[pb.VersionSummary(**v.to_dict()) for v in self.store.by_jaxlib()],
        )

    def prune(self, request, context) -> pb.PruneResponse:
        if request.HasField("stale_for_jaxlib") and not request.stale_for_jaxlib:
            raise InvalidRequestError("stale_for_jaxlib: name the jaxlib version to keep")
        policy = PrunePolicy(
            max_size=_optional(request, "max_size"),
            older_than=_optional(request, "older_than_seconds"),
            unused_for=_optional(request, "unused_for_seconds"),
            stale_for=_optional(request, "stale_for_jaxlib"),
        )
        removed = self.store.prune(policy, dry_run=request.dry_run)
        return pb.PruneResponse(removed=[_info(i) for i in removed])

    def verify(self, request, context) -> pb.VerifyResponse:
        report = self.store.verify(repair=request.repair)
        if report.corrupt and request.repair:
            self.metrics.add("corrupt_entries", len(report.corrupt))
        return pb.VerifyResponse(**report.to_dict())

    def report_corrupt(self, request, context) -> pb.ReportCorruptResponse:
        """Check an entry a client found corrupt; remove it if it is. The check streams the
        file; a few run at once, more are refused (`REPORT_RATE` limits each token)."""
        key = check_key(request.key)
        if not self.verifications.try_acquire():
            self.metrics.add("rejected", 1, "busy")
            raise ServerBusyError("server busy: checking other reported entries, retry later")
        try:
            self.store.check(key)
            return pb.ReportCorruptResponse(removed=False)  # absent, or fine here: in transit
        except CorruptEntryError as exc:
            log.warning("client reported %s corrupt; confirmed (%s), removing", key, exc)
            self.transfers.remove_corrupt(key)
            return pb.ReportCorruptResponse(removed=True)
        finally:
            self.verifications.release()
