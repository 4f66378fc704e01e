"""GrpcStore: a Store backed by an `xlacache serve` daemon.

Every call has a deadline. Failures that mean "the server is sick" (unreachable,
timed out, overloaded, refusing our token) raise StoreUnavailableError and feed a
circuit breaker (`stores.resilience`): after a few in a row the store stops calling
the server for a backoff period (1 s doubling to 60 s), so a dead server costs a
training job one deadline, not one per compile. Entries are verified end to end on get.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import grpc

from xlacache import config, counters, entry
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache._proto.v1 import cache_pb2_grpc as pb_grpc
from xlacache.errors import (
    CacheError,
    ConfigError,
    CorruptEntryError,
    ReadOnlyError,
    StoreUnavailableError,
)
from xlacache.key import check_key
from xlacache.protocol import CHUNK_SIZE, DEFAULT_PORT, fields_of, method_path, misses, status, wire
from xlacache.stores import is_remote_url, uses_tls
from xlacache.stores.base import (
    EntryInfo,
    PrunePolicy,
    Store,
    StoreSummary,
    VerifyReport,
    VersionSummary,
)
from xlacache.stores.jobs import JobLog, check_job
from xlacache.stores.remote_leases import GrpcLeases
from xlacache.stores.resilience import CircuitBreaker

MESSAGE_LIMIT = 8 * 1024 * 1024  # what the client sends (chunks, key batches)
REPLY_LIMIT = 128 * 1024 * 1024  # what it accepts: a Prune of 50,000 entries lists 7 MB
TOUCH_EVERY = 1.0  # seconds between Touch calls (uses of prefetched entries)
MAX_TOUCHES = 10_000  # keys waiting to be sent; more are dropped (figures only)

log = logging.getLogger("xlacache.remote")

Code = grpc.StatusCode
# Codes that say the server (or our access to it) is unwell: they count against the
# breaker; the second set opens it at once (waiting on the server again would hurt).
_SICK = {
    Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.UNAUTHENTICATED, Code.INTERNAL,
    Code.UNKNOWN, Code.CANCELLED, Code.UNIMPLEMENTED,
}  # fmt: skip
_TRIP_NOW = {Code.UNAUTHENTICATED, Code.DEADLINE_EXCEEDED, Code.CANCELLED}
TLS_HINT = (
    "the TLS handshake failed: a server certificate from a private CA needs that CA's PEM "
    "file in XLACACHE_TLS_CA (initialize_cache(tls_ca=...), CLI --tls-ca); mutual TLS also "
    "XLACACHE_TLS_CERT and XLACACHE_TLS_KEY (see docs/trust.md)"
)


def parse_target(url: str) -> tuple[str, bool]:
    """('host:port', tls) from grpc://host[:port] or grpcs://host[:port]."""
    parsed = urlparse(url)
    if not is_remote_url(url) or not parsed.hostname:
        raise ConfigError(f"not a remote cache URL: {url!r} (expected grpc://HOST:PORT)")
    host = parsed.hostname
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parsed.port or DEFAULT_PORT}", uses_tls(url)


def _read(path: str | None, setting: str) -> bytes | None:
    """A PEM file's bytes (None: no file); ConfigError naming the setting if unreadable."""
    if not path:
        return None
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None


class GrpcStore(Store):
    """A remote store. `token` authenticates; missing credentials and TLS files come from
    the environment (`xlacache.config`: XLACACHE_TOKEN, XLACACHE_TLS_CA, ...)."""

    def __init__(
        self,
        url: str,
        readonly: bool = False,
        token: str | None = None,
        *,
        timeout: float = 5.0,
        transfer_timeout: float = 120.0,
        min_rate: float = 4 * 1024 * 1024,  # bytes/s a put may not fall below (sets its deadline)
        chunk_size: int = CHUNK_SIZE,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        breaker: CircuitBreaker | None = None,
        create: bool = True,  # accepted for open_store's signature; servers create their stores
    ) -> None:
        self.url = url
        self.readonly = readonly
        self.target, tls = parse_target(url)
        self.timeout = timeout
        self.transfer_timeout = transfer_timeout
        self.min_rate = min_rate
        self.chunk_size = chunk_size
        self.breaker = breaker or CircuitBreaker()
        token = token or config.remote_token()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options = [
            ("grpc.max_receive_message_length", REPLY_LIMIT),
            ("grpc.max_send_message_length", MESSAGE_LIMIT),
            ("grpc.enable_retries", 0),
            # Quick reconnects after a server restart. (Not grpc.min_reconnect_backoff_ms:
            # gRPC core also takes it as the time a connection attempt gets for the
            # server's HTTP/2 SETTINGS, 20 s by default; at 500 ms a busy server's
            # connections failed. Every call has its own deadline anyway.)
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 5000),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            # A connection of its own, as a Redis client has: channels in one process to
            # one target otherwise share a single HTTP/2 connection, and concurrent
            # transfers from many threads queue on it (a third less PUT throughput).
            ("grpc.use_local_subchannel_pool", 1),
        ]
        self.tls = tls
        self._client_cert = False
        if tls:
            env = config.remote_tls_files()
            self._client_cert = bool(tls_cert or env["tls_cert"])
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca or env["tls_ca"], "tls_ca (XLACACHE_TLS_CA)"),
                private_key=_read(tls_key or env["tls_key"], "tls_key (XLACACHE_TLS_KEY)"),
                certificate_chain=_read(
                    tls_cert or env["tls_cert"], "tls_cert (XLACACHE_TLS_CERT)"
                ),
            )
            self._channel = grpc.secure_channel(self.target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(self.target, options=options)
        self._stub = pb_grpc.CacheStub(self._channel)
        # Bulk calls move wire-format bytes (xlacache.protocol.wire): no protobuf copies.
        self._get_raw = self._channel.unary_stream(
            method_path("Get"),
            request_serializer=pb.GetRequest.SerializeToString,
            response_deserializer=None,
        )
        self._leases: GrpcLeases | None = None
        self._touches: set[str] = set()  # used keys not yet sent (record_hit)
        self._touch_lock = threading.Lock()
        self._toucher: threading.Thread | None = None
        self._closed = threading.Event()
        self._put_raw = self._channel.stream_unary(
            method_path("Put"),
            request_serializer=None,
            response_deserializer=pb.PutResponse.FromString,
        )

    # -- Store interface -------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        return self._get_verified(key, peek=False)

    def peek(self, key: str) -> bytes | None:
        """`get` without the server counting a use: prefetch (`record_hit` counts it
        later) and tools (export, sign, diff)."""
        return self._get_verified(key, peek=True)

    def _get_verified(self, key: str, peek: bool) -> bytes | None:
        check_key(key)
        blob = self._call(lambda: self._get(key, peek))
        if blob is None:
            return None
        try:
            entry.verify(blob, key)
        except CorruptEntryError:
            if not self.readonly:  # a reader asks nothing of the server that removes
                self.report_corrupt(key)
            raise
        return blob

    def _get(self, key: str, peek: bool = False) -> bytes | None:
        call = self._get_raw(
            pb.GetRequest(key=key, peek=peek), timeout=self.transfer_timeout,
            metadata=self._metadata,
        )  # fmt: skip
        # A server that accepts connections but never answers costs `timeout`, not the
        # whole transfer deadline: the first message must come within it.
        watchdog = threading.Timer(self.timeout, call.cancel)
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                fields = wire.parse(next(call))
            except StopIteration:
                raise CorruptEntryError(f"entry {key}: empty reply from server") from None
            finally:
                watchdog.cancel()
            if not wire.number(fields, wire.GET_FOUND):
                for _ in call:  # let the call end with its status rather than cancel it
                    pass
                return None
            size = wire.number(fields, wire.GET_SIZE)
            first = fields.get(wire.GET_DATA, memoryview(b""))
            parts = [first]
            received = len(first)
            for message in call:
                data = wire.data_of(message, wire.GET_DATA)
                parts.append(data)
                received += len(data)
        except wire.WireError as exc:
            call.cancel()
            raise CorruptEntryError(f"entry {key}: malformed reply: {exc}") from None
        except BaseException:
            call.cancel()  # frees the stream when we stop early
            raise
        if received != size:
            raise CorruptEntryError(f"entry {key}: received {received} of {size} bytes")
        return b"".join(parts)

    def put(self, key: str, blob: bytes) -> None:
        self._writable()
        check_key(key)
        header = entry.read_header(blob)
        if header.key != key:
            raise CorruptEntryError(f"refusing to upload an entry for {header.key} under {key}")
        timeout = self.timeout + len(blob) / self.min_rate
        self._call(
            lambda: self._put_raw(
                self._put_messages(key, blob, header.payload_sha256),
                timeout=timeout,
                metadata=self._metadata,
            )
        )

    def _put_messages(self, key: str, blob: bytes, digest: str) -> Iterator[bytes]:
        view = memoryview(blob)
        step = self.chunk_size
        yield wire.put_first(key, len(blob), digest, view[:step])
        for start in range(step, len(blob), step):
            yield wire.put_chunk(view[start : start + step])

    def contains(self, key: str) -> bool:
        return self.contains_many([key])[0]

    def contains_many(self, keys: list[str]) -> list[bool]:
        for key in keys:
            check_key(key)
        reply = self._call(lambda: self._unary(self._stub.Contains, pb.ContainsRequest(keys=keys)))
        return list(reply.present)

    def delete(self, key: str) -> bool:
        self._writable()
        check_key(key)
        return self._call(lambda: self._unary(self._stub.Delete, pb.DeleteRequest(key=key))).deleted

    def stat(self, key: str) -> EntryInfo | None:
        check_key(key)
        reply = self._call(lambda: self._unary(self._stub.Stat, pb.StatRequest(keys=[key])))
        result = reply.results[0]
        return _info(result.info) if result.found else None

    def list(self, page_size: int = 1000) -> Iterator[EntryInfo]:
        token = ""
        while True:
            reply = self._list_call(token, page_size)
            yield from (_info(i) for i in reply.entries)
            token = reply.next_page_token
            if not token:
                return

    def list_page(self, after: str = "", limit: int = 1000) -> list[EntryInfo]:
        """One List call: up to `limit` entries with keys after `after`, in key order."""
        return [_info(i) for i in self._list_call(after, limit).entries]

    def _list_call(self, token: str, page_size: int) -> pb.ListResponse:
        request = pb.ListRequest(page_size=page_size, page_token=token)
        return self._call(lambda: self._unary(self._stub.List, request))

    def summary(self) -> StoreSummary:
        s = self.server_stats().summary
        return StoreSummary(
            entries=s.entries,
            bytes=s.bytes,
            payload_bytes=s.payload_bytes,
            hits=s.hits,
            compile_seconds=s.compile_seconds,
        )

    def by_jaxlib(self) -> list[VersionSummary]:
        """The server's entries and bytes per jaxlib version (from its Stats call)."""
        return [VersionSummary(**fields_of(v)) for v in self.server_stats().by_jaxlib]

    def server_stats(self) -> pb.StatsResponse:
        """The server's own figures: store summary, limits, version, request counters."""
        return self._call(lambda: self._unary(self._stub.Stats, pb.StatsRequest()))

    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        if not dry_run:
            self._writable()
        request = pb.PruneRequest(dry_run=dry_run)
        if policy.max_size is not None:
            request.max_size = policy.max_size
        if policy.older_than is not None:
            request.older_than_seconds = policy.older_than
        if policy.unused_for is not None:
            request.unused_for_seconds = policy.unused_for
        if policy.stale_for is not None:
            request.stale_for_jaxlib = policy.stale_for
        reply = self._call(
            lambda: self._unary(self._stub.Prune, request, timeout=self.transfer_timeout)
        )
        return [_info(i) for i in reply.removed]

    def verify(self, repair: bool = False) -> VerifyReport:
        if repair:
            self._writable()
        reply = self._call(
            lambda: self._unary(self._stub.Verify, pb.VerifyRequest(repair=repair), timeout=3600.0)
        )
        return VerifyReport(
            checked=reply.checked,
            corrupt=list(reply.corrupt),
            repaired=reply.repaired,
            stale_temp_files=reply.stale_temp_files,
        )

    def report_corrupt(self, key: str) -> bool:
        """Tell the server an entry failed verification here; True if it removed it."""
        try:
            return self._call(
                lambda: self._unary(self._stub.ReportCorrupt, pb.ReportCorruptRequest(key=key))
            ).removed
        except CacheError:
            return False

    @property
    def can_report_misses(self) -> bool:
        return True  # read-only too: the server's ring is no part of the cache

    def report_miss(self, record: dict) -> None:
        """Send one explained miss to the server (ReportMiss: read tokens may)."""
        request = pb.ReportMissRequest(miss=misses.to_message(record))
        self._call(lambda: self._unary(self._stub.ReportMiss, request))

    def recent_misses(self, limit: int | None = None) -> list[dict]:
        request = pb.RecentMissesRequest(limit=limit or 0)
        reply = self._call(lambda: self._unary(self._stub.RecentMisses, request))
        return [misses.to_record(m) for m in reply.misses]

    def leases(self) -> GrpcLeases:
        """The server's leases (the Lease, LeaseHold and LeaseWait RPCs), one table per
        store (it keeps the calls that bind held leases to this process)."""
        with self._touch_lock:
            if self._leases is None:
                self._leases = GrpcLeases(self)
            return self._leases

    def jobs(self) -> GrpcJobs:
        """The server's job manifests (the JobKeys and RecordJob RPCs)."""
        return GrpcJobs(self)

    def record_hit(self, key: str) -> None:
        """Count a use of an entry read with `peek`: sent with others (Touch) within a
        second, from a background thread; dropped if the server cannot take it."""
        check_key(key)
        with self._touch_lock:
            if len(self._touches) >= MAX_TOUCHES:
                return
            self._touches.add(key)
            if self._toucher is None:
                self._toucher = threading.Thread(
                    target=self._touch_loop, name="xlacache-touch", daemon=True
                )
                self._toucher.start()

    @counters.background("remote.touch")
    def _touch_loop(self) -> None:
        while not self._closed.wait(TOUCH_EVERY):
            self._send_touches()

    def _send_touches(self) -> None:
        with self._touch_lock:
            keys, self._touches = sorted(self._touches), set()
        if keys:
            request = pb.TouchRequest(keys=keys)
            try:
                self._call(lambda: self._unary(self._stub.Touch, request))
            except CacheError as exc:  # use records only
                log.debug("touch of %d entries failed: %s", len(keys), exc)
                counters.hidden("remote.touch", exc)

    @property
    def closed(self) -> bool:
        """Whether `close` was called (background calls end quietly after it)."""
        return self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        toucher = self._toucher
        if toucher is not None:  # a send in flight finishes before the channel goes
            toucher.join(self.timeout)
        self._send_touches()
        if self._leases is not None:
            self._leases.close()
        self._channel.close()

    # -- plumbing ---------------------------------------------------------------------

    def _writable(self) -> None:
        if self.readonly:
            raise ReadOnlyError(f"{self.url} is open read-only")

    def _unary(self, method, request, timeout: float | None = None):
        return method(request, timeout=timeout or self.timeout, metadata=self._metadata)

    def _call(self, fn):
        """Run one RPC under the breaker, turning a failed call into its error type."""
        if not self.breaker.allow():
            raise StoreUnavailableError(f"{self.url}: server marked unavailable, backing off")
        try:
            result = fn()
        except grpc.RpcError as exc:
            code = status.code_of(exc)
            if code in _SICK:
                self.breaker.failure(trip_now=code in _TRIP_NOW)
            else:
                self.breaker.success()  # the server answered, if only to refuse
            error = status.error_from_rpc(exc, self.url)
            hint = _connection_hint(str(error), self.tls, self._client_cert)
            if code == Code.UNAVAILABLE and hint:  # the type stays; the words say what to do
                error = StoreUnavailableError(f"{error} ({hint})")
            raise error from None
        except BaseException:
            self.breaker.success()  # the server answered; the trouble is ours
            raise
        self.breaker.success()
        return result


def _connection_hint(text: str, tls: bool, client_cert: bool) -> str | None:
    """What to do about a connection gRPC could not make, from its words (a hint only: the
    error's type and status are what code decides by)."""
    if "Socket closed" in text:  # the server hung up during the handshake
        if not tls:
            return (
                "a TLS server closes plain connections: if it uses TLS, the URL is grpcs://... "
                "(with --tls-ca or XLACACHE_TLS_CA for a private CA)"
            )
        if not client_cert:
            return (
                "a mutual-TLS server closes connections without a client certificate: pass "
                "--tls-cert and --tls-key (XLACACHE_TLS_CERT, XLACACHE_TLS_KEY; docs/trust.md)"
            )
        return "a mutual-TLS server refused the client certificate (--tls-cert): its CA differs"
    if tls and "WRONG_VERSION_NUMBER" in text:
        return "the server does not use TLS: the URL is grpc://..."
    if tls and "handshake" in text.lower():
        return TLS_HINT
    return None


def _info(message: pb.EntryInfo) -> EntryInfo:
    return EntryInfo(**fields_of(message))


class GrpcJobs(JobLog):
    """A server's job manifests (`xlacache.stores.jobs`)."""

    def __init__(self, store: GrpcStore) -> None:
        self.store = store

    def keys(self, job: str, limit: int) -> list[str]:
        request = pb.JobKeysRequest(job=check_job(job), limit=max(0, limit))
        store = self.store
        return list(store._call(lambda: store._unary(store._stub.JobKeys, request)).keys)

    def record(self, job: str, run: str, keys: list[str]) -> None:
        self.store._writable()
        request = pb.RecordJobRequest(job=check_job(job), run=run, keys=keys)
        store = self.store
        store._call(lambda: store._unary(store._stub.RecordJob, request))
