"""Exceptions raised by xlacache, each filed under a `kind`.

Every cache-side failure derives from CacheError. `kind` names the counter an absorbed
failure is filed under (`xlacache.stats()["errors"]`); `kind_of` gives it for any
exception, so callers classify failures by type alone. The same types cross the wire:
`xlacache.protocol.status` maps each to one gRPC status and back.
"""

from __future__ import annotations

import errno


class CacheError(Exception):
    """Base class of every error xlacache raises on purpose."""

    kind = "cache"


class ConfigError(CacheError, ValueError):
    """Bad settings: a second initialize_cache with other settings, a bad size or duration."""

    kind = "config"


class CorruptEntryError(CacheError):
    """An entry failed verification: wrong magic, bad checksum, truncated, wrong key, a
    malformed header."""

    kind = "corrupt"


class NotACacheError(CacheError):
    """A path or URL that holds no xlacache store."""

    kind = "not_a_cache"


class NotABundleError(CacheError, ValueError):
    """A file that is no xlacache export bundle (or one of an unsupported version)."""

    kind = "not_a_bundle"


class ReadOnlyError(CacheError):
    """A write was attempted on a store opened read-only."""

    kind = "read_only"


class InvalidRequestError(CacheError, ValueError):
    """A request the store refuses as malformed: a bad key, message or page token."""

    kind = "invalid_request"


class InvalidKeyError(InvalidRequestError):
    """A cache key that is not 64 lowercase hex digits."""


class EntryTooLargeError(CacheError):
    """An entry is larger than the store accepts."""

    kind = "too_large"


class StoreUnavailableError(CacheError):
    """A remote store could not be reached, timed out, or refused the credentials."""

    kind = "remote"


class UnauthenticatedError(StoreUnavailableError):
    """The remote store did not accept our credentials (none, or an unknown token)."""


class PermissionDeniedError(StoreUnavailableError):
    """Our credentials are valid but their role does not allow the call (a read token
    that tried to write)."""


class ServerBusyError(StoreUnavailableError):
    """The remote store is out of room for this request now (uploads in progress)."""


class RateLimitedError(ServerBusyError):
    """The remote store refused the call: this caller made too many of its kind lately."""


class StoreFullError(StoreUnavailableError):
    """The remote store's disk is full."""


class ServerError(StoreUnavailableError):
    """The remote store failed on its side (a bug, its disk); a later call may work."""


class RequestCancelledError(StoreUnavailableError):
    """The call was cancelled before it finished (the client went away, a shutdown)."""


class ForeignEntryError(CacheError):
    """An entry of another environment (jaxlib, platform, devices, XLA flags, entry format):
    never handed to this process's loader (another jaxlib's executable can crash XLA)."""

    kind = "foreign"


class StoreIndexError(CacheError):
    """The SQLite index of a local store failed (busy, I/O); the entries are unaffected."""

    kind = "index"


class IndexCorruptError(StoreIndexError):
    """The index file is damaged: the store sets it aside and rebuilds it from entries."""


class IndexBusyError(StoreIndexError):
    """The index's write lock stayed busy past the wait allowed (another writer)."""


class IndexClosedError(StoreIndexError):
    """The index was closed (the store is closing): never a sign of damage."""


class UntrustedEntryError(CacheError):
    """An entry not signed by a trusted key: unsigned, foreign, or a bad signature.

    `reason` is "unsigned", "foreign" or "bad_signature" (a server that requires signed
    uploads sends it along: `detail`).
    """

    kind = "untrusted"
    REASONS = ("unsigned", "foreign", "bad_signature")

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    @property
    def detail(self) -> str:
        return self.reason

    @classmethod
    def from_detail(cls, message: str, detail: str | None) -> UntrustedEntryError:
        return cls(message, detail if detail in cls.REASONS else "unknown")


class StrictModeError(RuntimeError):
    """Strict mode (``XLACACHE_STRICT=1``): a fallback would have hidden this exception.

    `where` names the fallback (``"prefetch"``, ``"dynamo.lowering"``, a counter kind...);
    the hidden exception is the ``__cause__``. Deliberately not a CacheError: nothing
    absorbs it.
    """

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"{where}: {type(exc).__name__}: {exc} (strict mode: XLACACHE_STRICT)")
        self.where = where


# errno values of an OSError and the kind each is filed under; the rest are "io".
_OS_KINDS = {
    errno.ENOSPC: "disk_full",
    errno.EDQUOT: "disk_full",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.EROFS: "permission",
}


def kind_of(exc: BaseException) -> str:
    """The counter a failure is filed under: its `kind`, or one from an OSError's errno."""
    if isinstance(exc, CacheError):
        return exc.kind
    if isinstance(exc, OSError):
        return _OS_KINDS.get(exc.errno, "io")
    return "internal"
