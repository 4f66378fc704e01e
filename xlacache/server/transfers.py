"""Get and Put: entries streamed out of their files and into temp files, never held whole.

Gets check the entry's header and length before sending (clients verify the body end
to end and report a corrupt entry). Puts are checked as they arrive, by
`entry.EntryReader` (size, header, key, body digest), written to a temp file
(`diskio`) and renamed into place by the store; a broken upload leaves nothing.
With --require-signed-by, an upload whose header no required key signed is refused as
soon as its header has arrived (`UntrustedEntryError`: PERMISSION_DENIED).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from xlacache import entry
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.errors import (
    CorruptEntryError,
    EntryTooLargeError,
    InvalidRequestError,
    RequestCancelledError,
    ServerBusyError,
    UntrustedEntryError,
)
from xlacache.key import check_key
from xlacache.protocol import wire
from xlacache.server import diskio
from xlacache.server.config import ServerConfig
from xlacache.server.limits import ByteBudget, Holder
from xlacache.server.metrics import ServerMetrics
from xlacache.server.storage import ServedStore
from xlacache.signing import TrustedKeys

log = logging.getLogger("xlacache.server")

UPLOAD_MEMORY_WAIT = 30.0  # seconds an upload may wait for room in upload_memory


@dataclass(frozen=True)
class _PutHeader:
    """What the first PutRequest message declares."""

    key: str
    size: int
    payload_sha256: str
    data: memoryview


class Transfers:
    def __init__(self, store: ServedStore, config: ServerConfig, metrics: ServerMetrics) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        # Bytes received by uploads in progress (not what they declare).
        self.uploads = ByteBudget(
            config.upload_memory, on_change=lambda used: metrics.set("upload_buffer_bytes", used)
        )
        self.buffers = diskio.BufferPool()
        self.required_signers: TrustedKeys | None = config.trusted_keys()
        self.on_stored: Callable[[str], None] = lambda key: None  # wakes lease waiters

    # -- Get -----------------------------------------------------------------------------

    def get(self, request: pb.GetRequest, context) -> Iterator[bytes]:
        """GetResponse messages, already in wire format (see protocol/wire.py)."""
        key = check_key(request.key)
        chunk = self.config.chunk_size
        try:
            f = self.store.open_entry(key)  # read-through over a bucket
        except FileNotFoundError:
            self.metrics.add("misses")
            yield wire.get_first(False)
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if not self._whole(key, f, size):
                self.metrics.add("misses")
                yield wire.get_first(False)
                return
            f.seek(0)
            first = f.read(min(chunk, size))
            sent = len(first)
            yield wire.get_first(True, size, first)
            while sent < size:
                if not context.is_active():
                    return
                data = f.read(min(chunk, size - sent))
                if not data:
                    raise CorruptEntryError(f"entry {key} shrank while read")
                sent += len(data)
                yield wire.get_chunk(data)
        if request.peek:  # an administrative read: not a use
            self.metrics.peeked(size)
            return
        self.metrics.hit(size)
        if not request.peek:  # a prefetch's read is not a use (Touch counts it once used)
            self.store.record_hit(key)

    def _whole(self, key: str, f, size: int) -> bool:
        """Whether the file holds a checked header for this key and its full length;
        a file that does not is corrupt and removed."""
        try:
            header, need = entry.read_file_header(f)
            if header.key != key or need + header.body_size != size:
                raise CorruptEntryError(f"entry {key}: wrong key or length on the server")
            return True
        except CorruptEntryError as exc:
            log.warning("removing corrupt entry %s: %s", key, exc)
            self.remove_corrupt(key)
            return False

    def remove_corrupt(self, key: str) -> None:
        self.metrics.add("corrupt_entries")
        try:
            self.store.delete(key)
        except OSError as exc:
            log.error("cannot remove corrupt entry %s: %s", key, exc)

    # -- Put -----------------------------------------------------------------------------

    def put(self, messages: Iterator[bytes], context) -> pb.PutResponse:
        """Receive PutRequest messages in wire format, verify, store atomically."""
        first = self._first_message(messages)
        key, size = first.key, first.size
        if self.store.contains(key):
            return pb.PutResponse(stored=False, already_present=True)
        # The upload budget counts bytes as they arrive (what a declared size promises
        # holds nothing), all given back once the entry is stored or refused.
        with self.uploads.holder() as held:
            tmp = self.store.temp_path(key)
            fd, direct = diskio.open_temp(tmp, self.config.direct_io)
            try:
                writer = diskio.TempWriter(fd, direct, self.buffers)
                try:
                    header = self._receive(first, messages, context, writer, held)
                    writer.finish()
                finally:
                    writer.close()
                    os.close(fd)
                if not context.is_active():  # cancelled, or shutting down past the grace period
                    raise RequestCancelledError("upload cancelled; nothing stored")
                self.store.put_file(key, tmp, header, size)  # fsync, rename, index
            finally:
                tmp.unlink(missing_ok=True)  # put_file consumed it, or the upload failed
        self.metrics.add("bytes_received", size)
        self.on_stored(key)
        return pb.PutResponse(stored=True)

    def _hold(self, held: Holder, amount: int, context) -> None:
        """Count `amount` more received bytes against the upload budget, waiting a while
        for room (less than the idle timeout: the wait is ours, not the client's)."""
        wait = min(UPLOAD_MEMORY_WAIT, context.time_remaining() or UPLOAD_MEMORY_WAIT)
        if self.config.idle_timeout > 0:
            wait = min(wait, self.config.idle_timeout / 2)
        if not held.take(amount, wait):
            self.metrics.add("rejected", 1, "busy")
            raise ServerBusyError("server busy: too many uploads in progress, retry later")

    def _first_message(self, messages: Iterator[bytes]) -> _PutHeader:
        message = next(messages, None)
        if message is None:
            raise InvalidRequestError("empty Put stream")
        try:
            fields = wire.parse(message)
            first = _PutHeader(
                key=wire.text(fields, wire.PUT_KEY),
                size=wire.number(fields, wire.PUT_SIZE),
                payload_sha256=wire.text(fields, wire.PUT_SHA256),
                data=fields.get(wire.PUT_DATA, memoryview(b"")),
            )
        except wire.WireError as exc:
            raise InvalidRequestError(f"malformed PutRequest: {exc}") from None
        check_key(first.key)
        if first.size > self.config.max_entry_size:
            self.metrics.add("rejected", 1, "too_large")
            raise EntryTooLargeError(
                f"entry of {first.size} bytes is over this server's limit of "
                f"{self.config.max_entry_size} bytes"
            )
        if first.size < entry.PRELUDE_SIZE:
            raise InvalidRequestError(f"entry size {first.size} is too small")
        if not entry.is_sha256_hex(first.payload_sha256):
            raise InvalidRequestError("payload_sha256 must be 64 lowercase hex chars")
        return first

    def _receive(
        self, first: _PutHeader, messages, context, writer: diskio.TempWriter, held: Holder
    ) -> entry.Header:
        """Write the upload to its temp file as it arrives, checking it as it goes.

        Nothing is held but the message in hand, the writer's buffer and the entry
        header until it is whole: the body is hashed and written chunk by chunk.
        """
        reader = entry.EntryReader(first.key, first.size)
        signature_checked = False
        for data in _chunks(first.data, messages):
            try:
                reader.feed(data)
            except CorruptEntryError as exc:
                raise InvalidRequestError(f"bad entry: {exc}; nothing stored") from None
            if not signature_checked and reader.header is not None:
                self._require_signature(reader.header)
                signature_checked = True
            self._hold(held, len(data), context)
            writer.write(data)
        if reader.received != first.size:
            message = f"upload ended after {reader.received} of {first.size} bytes; nothing stored"
            if not context.is_active():
                raise RequestCancelledError(message)
            raise InvalidRequestError(message)
        if reader.body_sha256 != first.payload_sha256:
            self.metrics.add("rejected", 1, "digest")
            raise CorruptEntryError(
                f"payload digest mismatch for {first.key}: declared {first.payload_sha256}, "
                f"received {reader.body_sha256}; nothing stored"
            )
        try:
            return reader.finish()
        except CorruptEntryError as exc:
            raise InvalidRequestError(f"bad entry: {exc}; nothing stored") from None

    # -- signed uploads (--require-signed-by) ---------------------------------------------

    def _require_signature(self, header: entry.Header) -> None:
        """Refuse an upload no required key signed (UntrustedEntryError, reason in its
        detail). The signature covers the header, which names the body's digest and size:
        EntryReader.finish checks the body against them."""
        if self.required_signers is None:
            return
        try:
            self.required_signers.check(header)
        except UntrustedEntryError as exc:
            self.metrics.add("rejected", 1, "untrusted")
            raise UntrustedEntryError(f"{exc}; nothing stored", exc.reason) from None


def _chunks(first: memoryview, rest: Iterator[bytes]) -> Iterator[memoryview]:
    yield first
    for message in rest:
        try:
            yield wire.data_of(message, wire.PUT_DATA)
        except wire.WireError as exc:
            raise InvalidRequestError(f"malformed PutRequest: {exc}") from None
