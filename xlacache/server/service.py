"""The `xlacache.v1.Cache` service over a LocalStore.

Entries are verified on the way in (size, payload digest, header, body) and streamed
from their files on the way out in chunks, never loaded whole. Gets check the entry's
header and length; clients verify the body end to end and report a corrupt entry
(ReportCorrupt), which the server re-verifies and removes. Bad requests get a precise
status and never take the daemon down.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from xlacache import entry
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache._proto.v1 import cache_pb2_grpc as pb_grpc
from xlacache._version import __version__
from xlacache.errors import CorruptEntryError
from xlacache.key import is_valid_key
from xlacache.server import diskio, wire
from xlacache.server.auth import AuthError, Role, TokenTable
from xlacache.server.config import ServerConfig
from xlacache.server.limits import ByteBudget, Watchdog
from xlacache.server.metrics import ServerMetrics
from xlacache.stores.base import EntryInfo, PrunePolicy
from xlacache.stores.local import LocalStore

log = logging.getLogger("xlacache.server")

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Cache"].full_name
MAX_BATCH_KEYS = 10_000
DEFAULT_PAGE = 1000
MAX_PAGE = 10_000
UPLOAD_MEMORY_WAIT = 30.0  # seconds an upload may wait for room in upload_memory


class RpcFailure(Exception):
    """Ends an RPC with a status; raised by handlers, turned into context.abort."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _code_name(code: grpc.StatusCode) -> str:
    return code.name


def _check_key(key: str) -> str:
    if not is_valid_key(key):
        shown = key if len(key) <= 80 else key[:77] + "..."
        raise RpcFailure(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed key {shown!r}: expected 64 lowercase hex characters",
        )
    return key


def _info_message(info: EntryInfo) -> pb.EntryInfo:
    return pb.EntryInfo(**info.to_dict())


class CacheService(pb_grpc.CacheServicer):
    def __init__(
        self,
        store: LocalStore,
        config: ServerConfig,
        tokens: TokenTable,
        metrics: ServerMetrics,
        watchdog: Watchdog,
    ) -> None:
        self.store = store
        self.config = config
        self.tokens = tokens
        self.metrics = metrics
        self.watchdog = watchdog
        self.uploads = ByteBudget(config.upload_memory)  # bytes of uploads in progress
        self.buffers = diskio.BufferPool()

    # -- the RPCs --------------------------------------------------------------------

    def Get(self, request, context):  # noqa: N802 - gRPC method names
        return self._stream("Get", Role.READ, self._get, request, context)

    def Put(self, request_iterator, context):  # noqa: N802
        return self._unary("Put", Role.WRITE, self._put, request_iterator, context)

    def Contains(self, request, context):  # noqa: N802
        return self._unary("Contains", Role.READ, self._contains, request, context)

    def Stat(self, request, context):  # noqa: N802
        return self._unary("Stat", Role.READ, self._stat, request, context)

    def Delete(self, request, context):  # noqa: N802
        return self._unary("Delete", Role.ADMIN, self._delete, request, context)

    def List(self, request, context):  # noqa: N802
        return self._unary("List", Role.READ, self._list, request, context)

    def Stats(self, request, context):  # noqa: N802
        return self._unary("Stats", Role.READ, self._stats, request, context)

    def Prune(self, request, context):  # noqa: N802
        return self._unary("Prune", Role.ADMIN, self._prune, request, context)

    def Verify(self, request, context):  # noqa: N802
        return self._unary("Verify", Role.ADMIN, self._verify, request, context)

    def ReportCorrupt(self, request, context):  # noqa: N802
        return self._unary("ReportCorrupt", Role.READ, self._report_corrupt, request, context)

    # -- shared plumbing: auth, deadlines, metrics, status codes ----------------------

    def _begin(self, method: str, role: Role, context) -> int:
        try:
            self.tokens.authorize(context.invocation_metadata(), role)
        except AuthError as exc:
            code = (
                grpc.StatusCode.UNAUTHENTICATED
                if exc.unauthenticated
                else grpc.StatusCode.PERMISSION_DENIED
            )
            self.metrics.rejected.labels("auth").inc()
            raise RpcFailure(code, str(exc)) from None
        return self.watchdog.schedule(self.config.request_timeout, context.cancel)

    def _finish(self, method: str, context, started: float, exc: BaseException | None) -> None:
        self.metrics.active.dec()
        if exc is None:
            code = grpc.StatusCode.OK if context.is_active() else grpc.StatusCode.CANCELLED
        elif isinstance(exc, RpcFailure):
            code = exc.code
        else:
            code = grpc.StatusCode.INTERNAL
        self.metrics.count(method, _code_name(code), time.perf_counter() - started)

    def _fail(self, method: str, context, exc: BaseException):
        if isinstance(exc, RpcFailure):
            context.abort(exc.code, str(exc))
        log.exception("%s failed", method)
        context.abort(grpc.StatusCode.INTERNAL, f"{method} failed on the server: {exc}")

    def _unary(self, method: str, role: Role, handler: Callable, request, context):
        started = time.perf_counter()
        self.metrics.active.inc()
        ticket = None
        error: BaseException | None = None
        try:
            ticket = self._begin(method, role, context)
            return handler(request, context)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            error = _as_failure(exc)
            self._fail(method, context, error)
        finally:
            if ticket is not None:
                self.watchdog.cancel(ticket)
            self._finish(method, context, started, error)

    def _stream(self, method: str, role: Role, handler: Callable, request, context) -> Iterator:
        started = time.perf_counter()
        self.metrics.active.inc()
        ticket = None
        error: BaseException | None = None
        try:
            ticket = self._begin(method, role, context)
            yield from handler(request, context)
        except GeneratorExit:
            raise
        except Exception as exc:  # noqa: BLE001
            error = _as_failure(exc)
            self._fail(method, context, error)
        finally:
            if ticket is not None:
                self.watchdog.cancel(ticket)
            self._finish(method, context, started, error)

    # -- handlers ---------------------------------------------------------------------

    def _get(self, request, context) -> Iterator[bytes]:
        """GetResponse messages, already in wire format (see server/wire.py)."""
        key = _check_key(request.key)
        chunk = self.config.chunk_size
        try:
            f = open(self.store.entry_path(key), "rb", buffering=0)  # noqa: SIM115 - closed below
        except FileNotFoundError:
            self.metrics.misses.inc()
            yield wire.get_first(False)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            first = f.read(min(chunk, size))
            header = self._checked_header(key, f, first, size)
            if header is None:
                self.metrics.misses.inc()
                yield wire.get_first(False)
                return
            sent = len(first)
            yield wire.get_first(True, size, first)
            while sent < size:
                if not context.is_active():
                    return
                data = f.read(min(chunk, size - sent))
                if not data:
                    raise RpcFailure(grpc.StatusCode.DATA_LOSS, f"entry {key} shrank while read")
                sent += len(data)
                yield wire.get_chunk(data)
        self.metrics.hits.inc()
        self.metrics.bytes_out.inc(size)
        self._record_hit(key, header, size)

    def _checked_header(self, key: str, f, first: bytes, size: int) -> entry.Header | None:
        """The entry's header if it is whole and names this key; else remove it."""
        try:
            need = entry.header_length(first[: entry.PRELUDE_SIZE])
            head = first if need <= len(first) else first + f.read(need - len(first))
            header = entry.read_header(head[:need])
            if header.key != key or need + header.body_size != size:
                raise CorruptEntryError(f"entry {key}: wrong key or length on the server")
            if len(head) > len(first):  # read past the first chunk: go back
                f.seek(len(first))
            return header
        except CorruptEntryError as exc:
            log.warning("removing corrupt entry %s: %s", key, exc)
            self._remove_corrupt(key)
            return None

    def _put(self, request_iterator, context) -> pb.PutResponse:
        """Receive PutRequest messages in wire format (bytes), verify, store atomically."""
        message = next(request_iterator, None)
        if message is None:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "empty Put stream")
        try:
            fields = wire.parse(message)
            first = _PutHeader(
                key=wire.text(fields, wire.PUT_KEY),
                size=wire.number(fields, wire.PUT_SIZE),
                payload_sha256=wire.text(fields, wire.PUT_SHA256),
                data=fields.get(wire.PUT_DATA, memoryview(b"")),
            )
        except wire.WireError as exc:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed PutRequest: {exc}"
            ) from None
        key = _check_key(first.key)
        size = first.size
        if size > self.config.max_entry_size:
            self.metrics.rejected.labels("too_large").inc()
            raise RpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"entry of {size} bytes is over this server's limit of "
                f"{self.config.max_entry_size} bytes",
            )
        if size < entry.PRELUDE_SIZE:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"entry size {size} is too small")
        if not _HEX64.match(first.payload_sha256):
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT, "payload_sha256 must be 64 lowercase hex chars"
            )
        if self.store.contains(key):
            return pb.PutResponse(stored=False, already_present=True)
        wait = min(UPLOAD_MEMORY_WAIT, context.time_remaining() or UPLOAD_MEMORY_WAIT)
        if not self.uploads.acquire(size, wait):
            self.metrics.rejected.labels("busy").inc()
            raise RpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED, "server busy: too many uploads, retry later"
            )
        self.metrics.upload_memory.set(self.uploads.used)
        try:
            tmp = self.store.temp_path(key)
            with _disk_errors():
                fd, direct = diskio.open_temp(tmp, self.config.direct_io)
            try:
                writer = diskio.TempWriter(fd, direct, self.buffers)
                try:
                    with _disk_errors():
                        header = self._receive(first, request_iterator, context, size, writer)
                        writer.finish()
                finally:
                    writer.close()
                    os.close(fd)
                if not context.is_active():  # cancelled, or shutting down past the grace period
                    raise RpcFailure(grpc.StatusCode.CANCELLED, "upload cancelled; nothing stored")
                with _disk_errors():
                    self.store.put_file(key, tmp, header, size)  # fsync, rename, index
            finally:
                tmp.unlink(missing_ok=True)  # put_file consumed it, or the upload failed
        finally:
            self.uploads.release(size)
            self.metrics.upload_memory.set(self.uploads.used)
        self.metrics.bytes_in.inc(size)
        return pb.PutResponse(stored=True)

    def _receive(
        self, first, request_iterator, context, size: int, writer: diskio.TempWriter
    ) -> entry.Header:
        """Write the upload to its temp file as it arrives, checking size, header, digest.

        Nothing is held but the message in hand, the writer's buffer and the entry
        header until it is whole: the body is hashed and written chunk by chunk.
        """
        key = first.key
        pos = 0
        body_hash = hashlib.sha256()
        head = bytearray()  # prelude + header, until the header is whole
        need: int | None = None  # prelude + header length, once the prelude is in
        header: entry.Header | None = None
        for data in _chunks(first.data, request_iterator):
            end = pos + len(data)
            if end > size:
                raise RpcFailure(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"upload longer than its declared {size} bytes",
                )
            writer.write(data)
            if header is None:
                used = 0
                while header is None:
                    goal = entry.PRELUDE_SIZE if need is None else need
                    take = data[used : used + goal - len(head)]
                    head += take
                    used += len(take)
                    if len(head) < goal:
                        break
                    if need is None:
                        need = self._header_length(head, size)
                    else:
                        header = self._upload_header(key, memoryview(head), size)
                if header is not None:
                    body_hash.update(data[used:])
            else:
                body_hash.update(data)
            pos = end
        if pos != size:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT
                if context.is_active()
                else grpc.StatusCode.CANCELLED,
                f"upload ended after {pos} of {size} bytes; nothing stored",
            )
        if header is None:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "upload holds no entry header")
        digest = body_hash.hexdigest()
        if digest != first.payload_sha256:
            self.metrics.rejected.labels("digest").inc()
            raise RpcFailure(
                grpc.StatusCode.DATA_LOSS,
                f"payload digest mismatch for {key}: declared {first.payload_sha256}, "
                f"received {digest}; nothing stored",
            )
        if digest != header.payload_sha256:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"entry {key}: body does not match the digest its header names",
            )
        return header

    @staticmethod
    def _header_length(prelude: bytearray, size: int) -> int:
        try:
            need = entry.header_length(bytes(prelude[: entry.PRELUDE_SIZE]))
        except CorruptEntryError as exc:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"not an entry: {exc}") from None
        if need > size:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "entry header longer than entry")
        return need

    @staticmethod
    def _upload_header(key: str, head: memoryview, size: int) -> entry.Header:
        try:
            header = entry.read_header(head)
        except CorruptEntryError as exc:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"bad entry header: {exc}") from None
        if header.key != key:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"entry header names key {header.key}, uploaded under {key}",
            )
        if len(head) + header.body_size != size:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"entry header says {len(head) + header.body_size} bytes, upload says {size}",
            )
        return header

    def _contains(self, request, context) -> pb.ContainsResponse:
        keys = self._batch(request.keys)
        return pb.ContainsResponse(present=[self.store.contains(k) for k in keys])

    def _stat(self, request, context) -> pb.StatResponse:
        results = []
        for key in self._batch(request.keys):
            info = self.store.stat(key)
            results.append(
                pb.StatResult(found=True, info=_info_message(info)) if info else pb.StatResult()
            )
        return pb.StatResponse(results=results)

    def _delete(self, request, context) -> pb.DeleteResponse:
        return pb.DeleteResponse(deleted=self.store.delete(_check_key(request.key)))

    def _list(self, request, context) -> pb.ListResponse:
        size = min(request.page_size or DEFAULT_PAGE, MAX_PAGE)
        after = request.page_token
        if after and not is_valid_key(after):
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "invalid page_token")
        infos = sorted((i for i in self.store.list() if i.key > after), key=lambda i: i.key)
        page = infos[:size]
        token = page[-1].key if len(infos) > size else ""
        return pb.ListResponse(entries=[_info_message(i) for i in page], next_page_token=token)

    def _stats(self, request, context) -> pb.StatsResponse:
        s = self.store.summary()
        counters = self.metrics.plain()
        counters["hits"] = self.metrics.hits._value.get()
        counters["misses"] = self.metrics.misses._value.get()
        return pb.StatsResponse(
            summary=pb.StoreSummary(**s.to_dict()),
            max_size=self.config.max_size or 0,
            max_entry_size=self.config.max_entry_size,
            version=__version__,
            uptime_seconds=time.time() - self.metrics.started,
            counters=counters,
        )

    def _prune(self, request, context) -> pb.PruneResponse:
        policy = PrunePolicy(
            max_size=request.max_size if request.HasField("max_size") else None,
            older_than=request.older_than_seconds
            if request.HasField("older_than_seconds")
            else None,
            unused_for=request.unused_for_seconds
            if request.HasField("unused_for_seconds")
            else None,
        )
        removed = self.store.prune(policy, dry_run=request.dry_run)
        return pb.PruneResponse(removed=[_info_message(i) for i in removed])

    def _verify(self, request, context) -> pb.VerifyResponse:
        report = self.store.verify(repair=request.repair)
        if report.corrupt and request.repair:
            self.metrics.corrupt.inc(len(report.corrupt))
        return pb.VerifyResponse(**report.to_dict())

    def _report_corrupt(self, request, context) -> pb.ReportCorruptResponse:
        key = _check_key(request.key)
        try:
            blob = self.store.entry_path(key).read_bytes()
        except FileNotFoundError:
            return pb.ReportCorruptResponse(removed=False)
        try:
            entry.decode(blob, key)
            return pb.ReportCorruptResponse(removed=False)  # fine here: damaged in transit
        except CorruptEntryError as exc:
            log.warning("client reported %s corrupt; confirmed (%s), removing", key, exc)
            self._remove_corrupt(key)
            return pb.ReportCorruptResponse(removed=True)

    # -- helpers ----------------------------------------------------------------------

    def _batch(self, keys) -> list[str]:
        if len(keys) > MAX_BATCH_KEYS:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {MAX_BATCH_KEYS} keys per call"
            )
        return [_check_key(k) for k in keys]

    def _remove_corrupt(self, key: str) -> None:
        self.metrics.corrupt.inc()
        try:
            self.store.delete(key)
        except OSError as exc:
            log.error("cannot remove corrupt entry %s: %s", key, exc)

    def _record_hit(self, key: str, header: entry.Header, size: int) -> None:
        try:
            self.store.record_hit(key, header, size)
        except Exception as exc:  # noqa: BLE001 - hit bookkeeping never fails a Get
            log.debug("cannot record hit for %s: %s", key, exc)


@dataclass(frozen=True)
class _PutHeader:
    key: str
    size: int
    payload_sha256: str
    data: memoryview


@contextlib.contextmanager
def _disk_errors() -> Iterator[None]:
    """OSErrors of the store's disk as statuses (a full disk is RESOURCE_EXHAUSTED)."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "server disk full") from exc
        raise RpcFailure(grpc.StatusCode.INTERNAL, f"cannot store entry: {exc}") from exc


def _chunks(first: memoryview, rest: Iterator[bytes]) -> Iterator[memoryview]:
    yield first
    for message in rest:
        try:
            yield wire.data_of(message, wire.PUT_DATA)
        except wire.WireError as exc:
            raise RpcFailure(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed PutRequest: {exc}"
            ) from None


def method_handlers(service: CacheService) -> grpc.GenericRpcHandler:
    """The Cache service's handlers; Get and Put move wire-format bytes (server/wire.py)."""
    unary = {
        "Contains": pb.ContainsRequest, "Stat": pb.StatRequest, "Delete": pb.DeleteRequest,
        "List": pb.ListRequest, "Stats": pb.StatsRequest, "Prune": pb.PruneRequest,
        "Verify": pb.VerifyRequest, "ReportCorrupt": pb.ReportCorruptRequest,
    }  # fmt: skip
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(service, name),
            request_deserializer=request.FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )
        for name, request in unary.items()
    }
    handlers["Get"] = grpc.unary_stream_rpc_method_handler(
        service.Get, request_deserializer=pb.GetRequest.FromString, response_serializer=None
    )
    handlers["Put"] = grpc.stream_unary_rpc_method_handler(
        service.Put,
        request_deserializer=None,
        response_serializer=pb.PutResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _as_failure(exc: BaseException) -> BaseException:
    """Map store errors that reach the RPC boundary onto statuses."""
    if isinstance(exc, RpcFailure):
        return exc
    if isinstance(exc, grpc.RpcError):  # the client went away mid-stream
        return RpcFailure(grpc.StatusCode.CANCELLED, "client went away")
    if isinstance(exc, CorruptEntryError):
        return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, ValueError) and "malformed cache key" in str(exc):
        return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    return exc
