"""What a server serves: a cache directory, or a bucket with a local directory in front.

    --store DIR                           a LocalStore; leases in the server's memory,
                                          job manifests in DIR/jobs/
    --store gs://B/P --cache-dir DIR      a FrontedStore (read-through, write-through);
                                          leases and job manifests in the bucket, shared
                                          by every replica

Both give the handlers the same calls: the Store interface for the queries, and the
local directory's file-level calls for streaming (`open_entry`, `temp_path`,
`put_file`, `record_hit`, `reconcile`).
"""

from __future__ import annotations

from typing import Union

from xlacache.server.config import ServerConfig
from xlacache.stores import is_bucket_url
from xlacache.stores.fronted import FrontedStore
from xlacache.stores.jobs import DirJobs, JobLog
from xlacache.stores.leases import LeaseTable, MemoryLeases
from xlacache.stores.local import LocalStore

ServedStore = Union[LocalStore, FrontedStore]  # noqa: UP007 - a runtime alias on 3.10 too


def open_served_store(config: ServerConfig) -> ServedStore:
    """Open the store the settings name. Opening a directory reconciles its index with
    the entry files and removes the temp files of a server killed mid-upload."""
    if is_bucket_url(config.store):
        from xlacache.stores.gcs import GCSStore

        remote = GCSStore(config.store)
        try:
            local = LocalStore(config.cache_dir, max_size=config.max_size, fsync=config.fsync)
        except BaseException:
            remote.close()
            raise
        return FrontedStore(local, remote)
    return LocalStore(config.store, max_size=config.max_size, fsync=config.fsync)


def local_disk(store: ServedStore) -> LocalStore:
    """The directory on this server's disk (the whole store, or the bucket's front)."""
    return store.local if isinstance(store, FrontedStore) else store


def lease_table(store: ServedStore) -> LeaseTable:
    """Where this server keeps leases: the bucket's (shared by replicas), else memory."""
    if isinstance(store, FrontedStore):
        table = store.leases()
        if table is not None:
            return table
    return MemoryLeases()


def job_log(store: ServedStore) -> JobLog:
    """Where this server keeps job manifests: the bucket's (shared by replicas), else its
    directory's."""
    if isinstance(store, FrontedStore):
        jobs = store.jobs()
        if jobs is not None:
            return jobs
    return DirJobs(local_disk(store).root)
