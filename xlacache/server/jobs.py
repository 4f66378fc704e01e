"""The Touch, JobKeys and RecordJob RPCs: what a pod's new workers fetch ahead.

JobKeys tells a new worker what its job used last time (`xlacache.stores.jobs`: the
server's directory keeps ``jobs/<job>.json``, a bucket server the bucket's
``jobs/<job>.json``); it prefetches those entries with GetRequest.peek, which counts no
use, and Touch counts the ones a compile took (hit counts, last-used times).
"""

from __future__ import annotations

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.server.metrics import ServerMetrics
from xlacache.server.rpc import checked_batch
from xlacache.stores.base import Store
from xlacache.stores.jobs import MAX_KEYS, JobLog, check_job, check_keys


class JobHandlers:
    def __init__(self, store: Store, jobs: JobLog, metrics: ServerMetrics) -> None:
        self.store = store
        self.jobs = jobs
        self.metrics = metrics

    def touch(self, request: pb.TouchRequest, context) -> pb.TouchResponse:
        keys = checked_batch(request.keys)
        for key in keys:
            self.store.record_hit(key)  # a key not stored is ignored by the index
        self.metrics.add("touched", len(keys))
        return pb.TouchResponse()

    def keys(self, request: pb.JobKeysRequest, context) -> pb.JobKeysResponse:
        limit = request.limit or MAX_KEYS
        return pb.JobKeysResponse(keys=self.jobs.keys(check_job(request.job), limit))

    def record(self, request: pb.RecordJobRequest, context) -> pb.RecordJobResponse:
        job = check_job(request.job)
        run = request.run[:64] or "unnamed"
        self.jobs.record(job, run, check_keys(list(request.keys)))
        self.metrics.add("job_records")
        return pb.RecordJobResponse()
