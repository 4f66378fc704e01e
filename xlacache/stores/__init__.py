"""Stores: one interface (`base.Store`), several backends, composed into tiers.

`open_store(url)` picks the backend from the URL's scheme, in a registry of backends
(fsspec's `register_implementation`; `register_store` adds one):
  /path or file:///path   -> LocalStore (directory of entry files + SQLite index)
  grpc://host:port        -> GrpcStore (an `xlacache serve` daemon), grpcs:// for TLS
  gs://bucket[/prefix]    -> GCSStore (objects in Google Cloud Storage, through gcsfs)
A backend is imported when a URL first names it; one whose optional dependencies are
missing says which extra installs them (`pip install 'xlacache[gcs]'`).

The registry is the one list of schemes: each is registered with its kind (a
"directory", a "server", a "bucket") and whether it speaks TLS; `store_kind`,
`schemes_of`, `is_remote_url`, `is_bucket_url` and `uses_tls` answer from it.
"""

from __future__ import annotations

import importlib
import os
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
    "is_bucket_url",
    "is_remote_url",
    "open_store",
    "register_store",
    "schemes_of",
    "store_kind",
    "uses_tls",
]

Factory = Callable[..., Store]  # factory(url, *, readonly, create, **options) -> Store
KINDS = ("directory", "server", "bucket")


@dataclass(frozen=True)
class _Backend:
    factory: Factory | str  # a callable, or "module:attribute" imported on first use
    extra: str | None  # the pip extra that installs what the backend imports
    kind: str  # one of KINDS
    tls: bool  # the scheme's connections are encrypted (grpcs://)


_REGISTRY: dict[str, _Backend] = {}


def register_store(
    scheme: str,
    factory: Factory | str,
    *,
    extra: str | None = None,
    kind: str = "bucket",
    tls: bool = False,
    replace: bool = False,
) -> None:
    """Make `open_store` open `scheme://...` URLs with `factory`.

    `factory` is called as factory(url, readonly=..., create=..., **options), or named as
    "package.module:function" to be imported when a URL first needs it; `extra` names the
    optional dependencies it needs (`xlacache[extra]`), for the error when they are missing.
    `kind`: what the store is (a "directory", a "server" speaking xlacache's protocol, or a
    "bucket": object storage, what a new backend usually is); `tls`: it encrypts.
    """
    if kind not in KINDS:
        raise ValueError(f"store kind {kind!r}: expected one of {', '.join(KINDS)}")
    if scheme in _REGISTRY and not replace:
        raise ValueError(f"a store is already registered for {scheme}://")
    _REGISTRY[scheme] = _Backend(factory, extra, kind, tls)


def store_kind(url: str | os.PathLike) -> str | None:
    """The kind of store `url` names ("directory", "server", "bucket"); None for a scheme
    no backend is registered for."""
    backend = _REGISTRY.get(urlparse(os.fspath(url)).scheme)
    return None if backend is None else backend.kind


def schemes_of(kind: str) -> tuple[str, ...]:
    """The registered schemes of a kind of store (e.g. "bucket": gs, gcs)."""
    return tuple(scheme for scheme, backend in _REGISTRY.items() if backend.kind == kind)


def uses_tls(url: str) -> bool:
    """Whether `url`'s scheme is registered as encrypted (grpcs://)."""
    backend = _REGISTRY.get(urlparse(url).scheme)
    return backend is not None and backend.tls


def _missing(scheme: str, backend: _Backend, exc: ImportError) -> ConfigError:
    hint = f": pip install 'xlacache[{backend.extra}]'" if backend.extra else ""
    what = exc.name or "a dependency"
    return ConfigError(f"{scheme}:// stores need {what}, which is not installed{hint}")


def is_remote_url(url: str | os.PathLike) -> bool:
    """Whether `url` names an xlacache server (grpc://, grpcs://)."""
    return store_kind(url) == "server"


def is_bucket_url(url: str | os.PathLike) -> bool:
    """Whether `url` names object storage (gs://, gcs://)."""
    return store_kind(url) == "bucket"


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


register_store("", _open_local, kind="directory")
register_store("file", _open_local, kind="directory")
register_store("grpc", _open_grpc, kind="server")
register_store("grpcs", _open_grpc, kind="server", tls=True)
register_store("gs", _open_gcs, extra="gcs", kind="bucket")
register_store("gcs", _open_gcs, extra="gcs", kind="bucket")
