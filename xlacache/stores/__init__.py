"""Stores: one interface (`base.Store`), several backends, composed into tiers.

`open_store(url)` picks the backend from the URL:
  /path or file:///path   -> LocalStore (directory of entry files + SQLite index)
  grpc://host:port        -> GrpcStore (an `xlacache serve` daemon), grpcs:// for TLS
  gs://bucket[/prefix]    -> GCSStore (objects in Google Cloud Storage, through gcsfs)
"""

from __future__ import annotations

from urllib.parse import urlparse

from xlacache.errors import NotACacheError
from xlacache.stores.base import EntryInfo, PrunePolicy, Store, StoreSummary, VerifyReport

__all__ = [
    "EntryInfo",
    "PrunePolicy",
    "Store",
    "StoreSummary",
    "VerifyReport",
    "open_store",
    "is_remote_url",
]


def is_remote_url(url: str) -> bool:
    return urlparse(str(url)).scheme in ("grpc", "grpcs")


def open_store(url: str, *, readonly: bool = False, create: bool = True, **options) -> Store:
    """Open the store a URL or path names. Options go to the backend's constructor."""
    url = str(url)
    scheme = urlparse(url).scheme
    if scheme in ("grpc", "grpcs"):
        from xlacache.stores.remote import GrpcStore

        return GrpcStore(url, readonly=readonly, **options)
    if scheme in ("gs", "gcs"):
        from xlacache.stores.gcs import GCSStore

        return GCSStore(url, readonly=readonly, create=create, **options)
    if scheme in ("", "file"):
        from xlacache.stores.local import LocalStore

        path = urlparse(url).path if scheme == "file" else url
        return LocalStore(path, readonly=readonly, create=create, **options)
    raise NotACacheError(f"unsupported cache URL scheme {scheme!r} in {url!r}")
