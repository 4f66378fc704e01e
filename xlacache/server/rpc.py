"""What every RPC goes through: request parsing, auth, limits, a deadline, metrics and
statuses.

Handlers get a parsed request and raise xlacache errors; `Gate` turns each into the
status and reason of `xlacache.protocol.status` (anything else is a server error,
logged). A request body that does not parse is INVALID_ARGUMENT; nothing a client
sends takes the daemon down.

Each call holds one of `workers` slots (and its own thread) while it runs; a call
that finds none free is refused at once with RESOURCE_EXHAUSTED (`server_busy`), never
queued, so health checks and other clients are answered however many calls stall.
A stream (Get, Put) that moves no message for `idle_timeout` seconds is cancelled;
a method with a `Rate` is held to it per token (`rate_limited`).
"""

from __future__ import annotations

import contextvars
import errno
import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import grpc
from google.protobuf.message import DecodeError

from xlacache.errors import (
    CacheError,
    InvalidRequestError,
    PermissionDeniedError,
    RateLimitedError,
    RequestCancelledError,
    ServerBusyError,
    ServerError,
    StoreFullError,
    UnauthenticatedError,
)
from xlacache.key import check_key
from xlacache.protocol import status
from xlacache.rates import RateLimiter
from xlacache.server.auth import Principal, Role, TokenTable
from xlacache.server.limits import IdleMonitor, Progress, Slots, Watchdog
from xlacache.server.metrics import ServerMetrics

log = logging.getLogger("xlacache.server")

MAX_BATCH_KEYS = 10_000
UNAUTHENTICATED = "(unauthenticated)"  # the client name of calls refused at the door

Handler = Callable[..., object]
_client: contextvars.ContextVar[str] = contextvars.ContextVar("client", default=UNAUTHENTICATED)


def current_client() -> str:
    """The name of the token the running call came with (its line in the token file)."""
    return _client.get()


def checked_batch(keys) -> list[str]:
    if len(keys) > MAX_BATCH_KEYS:
        raise InvalidRequestError(f"at most {MAX_BATCH_KEYS} keys per call")
    return [check_key(k) for k in keys]


def _parse(request_type, data: bytes, method: str):
    if request_type is None:
        return data
    try:
        return request_type.FromString(data)
    except (DecodeError, ValueError) as exc:
        raise InvalidRequestError(f"malformed {method} request: {exc}") from None


def as_cache_error(exc: BaseException, method: str) -> CacheError:
    """The error a failure reaches the client as (statuses come from its type)."""
    if isinstance(exc, CacheError):
        return exc
    if isinstance(exc, grpc.RpcError):  # the client went away mid-stream
        return RequestCancelledError("client went away")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFullError("server disk full")
    log.exception("%s failed", method, exc_info=exc)
    return ServerError(f"{method} failed on the server: {exc}")


class Gate:
    """Wraps handlers into gRPC method implementations with the shared plumbing."""

    def __init__(
        self,
        tokens: TokenTable,
        metrics: ServerMetrics,
        watchdog: Watchdog,
        request_timeout: float,
        workers: int,
        idle: IdleMonitor,
    ) -> None:
        self.tokens = tokens
        self.metrics = metrics
        self.watchdog = watchdog
        self.request_timeout = request_timeout
        self.slots = Slots(workers)
        self.idle = idle

    def unary(
        self, method: str, role: Role, request_type, handler: Handler, rate=None, role_for=None
    ):
        """A unary-response method: (request bytes, or an iterator of request messages
        when request_type is None, and context) -> response. `role_for(request)`: the
        role the parsed request needs, where its fields may ask more than `role`."""
        limiter = RateLimiter(rate) if rate else None

        def call(request, context):
            started = self.metrics.started_rpc()
            admitted = None
            error: BaseException | None = None
            try:
                streaming = request_type is None  # a stream of requests (Put)
                admitted = self._admit(role, context, limiter, watch_idle=streaming)
                if streaming:
                    request = _touching(request, admitted.progress)
                parsed = _parse(request_type, request, method)
                if role_for is not None:
                    self._permit(admitted.principal, role_for(parsed))
                return handler(parsed, context)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a status
                error = as_cache_error(exc, method)
                status.abort(context, error)
            finally:
                self._finish(method, context, started, admitted, error)
                _client.set(UNAUTHENTICATED)

        return call

    def stream(
        self, method: str, role: Role, request_type, handler: Handler, rate=None, role_for=None
    ):
        """A response-streaming method: (request bytes, context) -> iterator of messages."""
        limiter = RateLimiter(rate) if rate else None

        def call(request, context) -> Iterator:
            started = self.metrics.started_rpc()
            admitted = None
            client = None
            error: BaseException | None = None
            try:
                admitted = self._admit(role, context, limiter, watch_idle=True)
                client = _client.get()  # a generator's frame may resume in another context
                progress = admitted.progress
                parsed = _parse(request_type, request, method)
                if role_for is not None:
                    self._permit(admitted.principal, role_for(parsed))
                for message in handler(parsed, context):
                    progress.touch()
                    yield message  # returns once gRPC has taken the message
                    progress.touch()
            except GeneratorExit:
                raise
            except Exception as exc:  # noqa: BLE001
                error = as_cache_error(exc, method)
                status.abort(context, error)
            finally:
                self._finish(method, context, started, admitted, error, client)

        return call

    def _admit(self, role: Role, context, limiter: RateLimiter | None, watch_idle: bool):
        _client.set(UNAUTHENTICATED)
        try:
            principal = self.tokens.authenticate(context.invocation_metadata())
        except UnauthenticatedError:
            self.metrics.add("rejected", 1, "auth")
            raise
        _client.set(principal.name)
        self._permit(principal, role)
        if limiter is not None and not limiter.allow(principal.name):
            self.metrics.add("rejected", 1, "rate")
            raise RateLimitedError(f"too many calls of this kind from {principal.name!r}")
        if not self.slots.try_acquire():
            self.metrics.add("rejected", 1, "busy")
            raise ServerBusyError(f"server busy: {self.slots.capacity} calls running, retry later")
        return _Admitted(
            principal,
            self.watchdog.schedule(self.request_timeout, context.cancel),
            self.idle.watch(context.cancel) if watch_idle else None,
        )

    def _permit(self, principal: Principal, role: Role) -> None:
        try:
            self.tokens.permit(principal, role)
        except PermissionDeniedError:
            self.metrics.add("rejected", 1, "auth")
            raise

    def _finish(
        self, method, context, started, admitted: _Admitted | None, error, client=None
    ) -> None:
        if admitted is not None:
            self.watchdog.cancel(admitted.ticket)
            if admitted.progress is not None:
                self.idle.unwatch(admitted.progress)
            self.slots.release()
        if error is not None:
            code = status.status_of(error)[0]
        else:
            code = grpc.StatusCode.OK if context.is_active() else grpc.StatusCode.CANCELLED
        self.metrics.finished_rpc(
            method, code.name, time.perf_counter() - started, client or _client.get()
        )


class _Admitted(NamedTuple):
    principal: Principal
    ticket: int  # the request_timeout watchdog's
    progress: Progress | None  # the idle monitor's, for streams


def _touching(messages: Iterator, progress: Progress) -> Iterator:
    for message in messages:
        progress.touch()
        yield message
