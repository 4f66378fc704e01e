"""Exceptions raised by xlacache. Every cache-side failure derives from CacheError."""


class CacheError(Exception):
    """Base class of every error xlacache raises on purpose."""


class ConfigError(CacheError, ValueError):
    """Bad settings: a second initialize_cache with other settings, a bad size or duration."""


class CorruptEntryError(CacheError):
    """An entry failed verification: wrong magic, bad checksum, truncated, wrong key."""


class NotACacheError(CacheError):
    """A path or URL that holds no xlacache store."""


class ReadOnlyError(CacheError):
    """A write was attempted on a store opened read-only."""


class StoreUnavailableError(CacheError):
    """A remote store could not be reached, timed out, or refused the credentials."""


class EntryTooLargeError(CacheError):
    """An entry is larger than the store accepts."""


class UntrustedEntryError(CacheError):
    """An entry not signed by a trusted key: unsigned, foreign, or a bad signature.

    `reason` is "unsigned", "foreign" or "bad_signature".
    """

    kind = "untrusted"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
