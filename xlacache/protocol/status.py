"""One table from error type to gRPC status and back.

A server ends a failed call with `abort(context, exc)`: the status code of the
error's type and its reason in the `xlacache-reason` trailing metadata (and, for
errors that carry one, a `detail` in `xlacache-detail`: why an upload is untrusted).
A client turns the failure back into the same type with `error_from_rpc`, by reason
where the server sent one and by status code otherwise (another server, or a status
gRPC itself produced: deadlines, refused connections). No side matches message text.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

from xlacache.errors import (
    CacheError,
    CorruptEntryError,
    EntryTooLargeError,
    InvalidKeyError,
    InvalidRequestError,
    NotACacheError,
    PermissionDeniedError,
    RateLimitedError,
    ReadOnlyError,
    RequestCancelledError,
    ServerBusyError,
    ServerError,
    StoreFullError,
    StoreUnavailableError,
    UnauthenticatedError,
    UntrustedEntryError,
)

REASON_KEY = "xlacache-reason"
DETAIL_KEY = "xlacache-detail"

Code = grpc.StatusCode


# (error type, status code, reason). The first row of each code is that code's type
# when no reason came with it. Lookups by type follow the exception's class hierarchy.
TABLE: tuple[tuple[type[CacheError], Code, str], ...] = (
    (InvalidRequestError, Code.INVALID_ARGUMENT, "invalid_request"),
    (InvalidKeyError, Code.INVALID_ARGUMENT, "invalid_key"),
    (CorruptEntryError, Code.DATA_LOSS, "corrupt_entry"),
    (ServerBusyError, Code.RESOURCE_EXHAUSTED, "server_busy"),
    (RateLimitedError, Code.RESOURCE_EXHAUSTED, "rate_limited"),
    (EntryTooLargeError, Code.RESOURCE_EXHAUSTED, "entry_too_large"),
    (StoreFullError, Code.RESOURCE_EXHAUSTED, "store_full"),
    (UnauthenticatedError, Code.UNAUTHENTICATED, "unauthenticated"),
    (PermissionDeniedError, Code.PERMISSION_DENIED, "permission_denied"),
    (UntrustedEntryError, Code.PERMISSION_DENIED, "untrusted_entry"),
    (RequestCancelledError, Code.CANCELLED, "cancelled"),
    (ReadOnlyError, Code.FAILED_PRECONDITION, "read_only"),
    (NotACacheError, Code.FAILED_PRECONDITION, "not_a_cache"),
    (StoreUnavailableError, Code.UNAVAILABLE, "unavailable"),
    (ServerError, Code.INTERNAL, "internal"),
)

_BY_TYPE = {cls: (code, reason) for cls, code, reason in TABLE}
_BY_REASON = {reason: cls for cls, _, reason in TABLE}
_BY_CODE: dict[Code, type[CacheError]] = {}
for _cls, _code, _ in TABLE:
    _BY_CODE.setdefault(_code, _cls)


def status_of(exc: BaseException) -> tuple[Code, str]:
    """(status code, reason) for an error; anything not in the table is internal."""
    for cls in type(exc).__mro__:
        if cls in _BY_TYPE:
            return _BY_TYPE[cls]
    return _BY_TYPE[ServerError]


def abort(context: grpc.ServicerContext, exc: BaseException, message: str = "") -> NoReturn:
    """End the call with the status and reason of `exc` (raises, as context.abort does)."""
    code, reason = status_of(exc)
    metadata = [(REASON_KEY, reason)]
    if detail := getattr(exc, "detail", None):
        metadata.append((DETAIL_KEY, str(detail)))
    context.set_trailing_metadata(tuple(metadata))
    context.abort(code, message or str(exc) or type(exc).__name__)
    raise AssertionError("context.abort returned")  # pragma: no cover


def _trailing(exc: grpc.RpcError, name: str) -> str | None:
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == name:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


def reason_of(exc: grpc.RpcError) -> str | None:
    """The reason a server put in a failed call's trailing metadata, if any."""
    return _trailing(exc, REASON_KEY)


def code_of(exc: grpc.RpcError) -> Code:
    return exc.code() if hasattr(exc, "code") else Code.UNKNOWN


def error_from_rpc(exc: grpc.RpcError, where: str) -> CacheError:
    """The error a failed call stands for; `where` (the server's URL) leads its message."""
    code = code_of(exc)
    details = (exc.details() if hasattr(exc, "details") else "") or code.name
    cls = _BY_REASON.get(reason_of(exc) or "") or _BY_CODE.get(code, StoreUnavailableError)
    message = f"{where}: {code.name}: {details}"
    if hasattr(cls, "from_detail"):  # an error that carries a detail (UntrustedEntryError)
        return cls.from_detail(message, _trailing(exc, DETAIL_KEY))
    return cls(message)
