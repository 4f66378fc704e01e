"""Stores: one interface (`base.Store`), several backends, composed into tiers.

`open_store(url)` picks the backend from the URL's scheme, in a registry of backends
(fsspec's `register_implementation`; `register_store` adds one):
  /path or file:///path   -> LocalStore (directory of entry files + SQLite index)
  grpc://host:port        -> GrpcStore (an `xlacache serve` daemon), grpcs:// for TLS
  gs://bucket[/prefix]    -> GCSStore (objects in Google Cloud Storage, through gcsfs)
A backend is imported when a URL first names it; one whose optional dependencies are
missing says which extra installs them (`pip install 'xlacache[gcs]'`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

from xlacache.errors import ConfigError, NotACacheError
from xlacache.stores.base import EntryInfo, PrunePolicy, Store, StoreSummary, VerifyReport

__all__ = [
    "EntryInfo",
    "PrunePolicy",
    "Store",
    "StoreSummary",
    "VerifyReport",
    "is_remote_url",
    "open_store",
    "register_store",
]

Factory = Callable[..., Store]  # factory(url, *, readonly, create, **options) -> Store


@dataclass(frozen=True)
class _Backend:
    factory: Factory | str  # a callable, or "module:attribute" imported on first use
    extra: str | None  # the pip extra that installs what the backend imports


_REGISTRY: dict[str, _Backend] = {}


def register_store(
    scheme: str, factory: Factory | str, *, extra: str | None = None, replace: bool = False
) -> None:
    """Make `open_store` open `scheme://...` URLs with `factory`.

    `factory` is called as factory(url, readonly=..., create=..., **options), or named as
    "package.module:function" to be imported when a URL first needs it; `extra` names the
    optional dependencies it needs (`xlacache[extra]`), for the error when they are missing.
    """
    if scheme in _REGISTRY and not replace:
        raise ValueError(f"a store is already registered for {scheme}://")
    _REGISTRY[scheme] = _Backend(factory, extra)


def _missing(scheme: str, backend: _Backend, exc: ImportError) -> ConfigError:
    hint = f": pip install 'xlacache[{backend.extra}]'" if backend.extra else ""
    what = exc.name or "a dependency"
    return ConfigError(f"{scheme}:// stores need {what}, which is not installed{hint}")


def is_remote_url(url: str) -> bool:
    return urlparse(str(url)).scheme in ("grpc", "grpcs")


def open_store(url: str, *, readonly: bool = False, create: bool = True, **options) -> Store:
    """Open the store a URL or path names. Options go to the backend's constructor."""
    url = str(url)
    scheme = urlparse(url).scheme
    backend = _REGISTRY.get(scheme)
    if backend is None:
        raise NotACacheError(f"unsupported cache URL scheme {scheme!r} in {url!r}")
    try:
        factory = backend.factory
        if isinstance(factory, str):
            module, _, name = factory.partition(":")
            factory = getattr(importlib.import_module(module), name)
        return factory(url, readonly=readonly, create=create, **options)
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] == "xlacache":
            raise  # our own bug, not a missing extra
        raise _missing(scheme, backend, exc) from exc


def _open_local(url: str, *, readonly: bool, create: bool, **options) -> Store:
    from xlacache.stores.local import LocalStore

    path = urlparse(url).path if url.startswith("file:") else url
    return LocalStore(path, readonly=readonly, create=create, **options)


def _open_grpc(url: str, *, readonly: bool, create: bool, **options) -> Store:
    from xlacache.stores.remote import GrpcStore

    return GrpcStore(url, readonly=readonly, **options)  # a server exists or it does not


def _open_gcs(url: str, *, readonly: bool, create: bool, **options) -> Store:
    from xlacache.stores.gcs import GCSStore

    return GCSStore(url, readonly=readonly, create=create, **options)


for _scheme in ("", "file"):
    register_store(_scheme, _open_local)
for _scheme in ("grpc", "grpcs"):
    register_store(_scheme, _open_grpc)
for _scheme in ("gs", "gcs"):
    register_store(_scheme, _open_gcs, extra="gcs")
