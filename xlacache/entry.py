"""The one entry format every store holds.

Layout of an encoded entry::

    b"XLAC"                 magic
    u16 big-endian          format version
    u32 big-endian          header length H
    32 bytes                SHA-256 of the header bytes
    H bytes                 header: UTF-8 JSON (see Header)
    body                    zstd-compressed serialized executable, then the
                            zstd-compressed portable program (format 3: the module in
                            its canonical text, for `xlacache rewarm`), then (only when
                            asked to keep it) the zstd-compressed module text

The header names the body's SHA-256 and length, so a flipped byte anywhere or a
truncated file is caught by `decode` before anything is deserialized. A signed entry
carries its signer's key id and a signature over `signed_form(header)` in the header
(see `xlacache.signing`); the header names the body's digest, so that covers both.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import platform
import re
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import BinaryIO, Protocol

import zstandard

from xlacache._version import __version__
from xlacache.errors import CorruptEntryError

MAGIC = b"XLAC"
FORMAT_VERSION = 3  # 2: key components, summary, module text, signature; 3: program
# Formats decoded: format 2 (keyed by the module's bytecode) by tools and a miss's legacy lookup
READABLE_FORMATS = (2, 3)
_PRELUDE = struct.Struct(">4sHI32s")  # magic, version, header length, header sha256
PRELUDE_SIZE = _PRELUDE.size
MAX_HEADER_SIZE = 1 << 20
MAX_ENTRY_SIZE = 2 * 1024**3  # default cap on one entry (server uploads, bundle imports)
COMPRESSION = "zstd"
_ZSTD_LEVEL = 3
_HEADER_PROBE = 64 * 1024  # bytes read at once to find a header in a file
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(text: object) -> bool:
    """Whether `text` is a hex SHA-256 as keys and digests are written: 64 lowercase hex digits."""
    return isinstance(text, str) and _SHA256_HEX.fullmatch(text) is not None


MAX_MODULE_TEXT = 1 << 30


def _producer() -> dict[str, str]:
    try:
        from jaxlib import version as jaxlib_version

        jaxlib = jaxlib_version.__version__
    except Exception:  # noqa: BLE001 - jaxlib is optional for tools that only read entries
        jaxlib = ""
    return {
        "xlacache": __version__,
        "jaxlib": jaxlib,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }


@dataclass(frozen=True)
class Header:
    """The self-describing part of an entry; readable without touching the body."""

    key: str
    payload_sha256: str  # of the body as stored (compressed)
    payload_size: int  # uncompressed executable bytes
    body_size: int  # compressed bytes following the header
    compile_seconds: float
    created: float
    label: str = ""
    platform: str = ""
    compression: str = COMPRESSION
    format_version: int = FORMAT_VERSION
    producer: dict[str, str] = field(default_factory=dict)
    # What loading needs besides the payload (JAX: compile options, device ids), so
    # an entry can be loaded ahead of the request for it (see CompilationCache.prefetch).
    context: dict = field(default_factory=dict)
    # Cache identity component by component (xlacache.key), for explaining misses.
    components: dict = field(default_factory=dict)  # component name -> hex SHA-256
    summary: dict = field(default_factory=dict)  # component name -> readable fields
    module_text_size: int = 0  # trailing body bytes: the zstd-compressed module text
    signer: str = ""  # key id of the signing key; "" when unsigned
    signature: str = ""  # base64 signature over signed_form(header)
    # The portable program (format 3): body bytes before the module text, zstd-compressed,
    # and what rebuilding its executable needs (`program`: its form, the compile options'
    # recipe); see `xlacache.rewarm`.
    program_size: int = 0
    program: dict = field(default_factory=dict)
    rewarmed_from: str = ""  # the jaxlib of the entry `xlacache rewarm` compiled this from

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def jaxlib(self) -> str:
        """The jaxlib version that compiled it: its key's, else its writer's ("": none)."""
        found = self.summary.get("jaxlib")
        version = found.get("version") if isinstance(found, dict) else None
        return version if isinstance(version, str) else self.producer.get("jaxlib", "")


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _seconds(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _text(value: object) -> bool:
    return isinstance(value, str)


def _strings(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _table(value: object) -> bool:
    return isinstance(value, dict)


def _digests(value: object) -> bool:
    return isinstance(value, dict) and all(is_sha256_hex(v) for v in value.values())


def _anything(value: object) -> bool:  # a field still without a row (tests catch that)
    return True


# Every Header field, the check its decoded JSON value must pass, and what the check
# wants (for the error message). A new field adds one row; tests fail on a field
# without one. Fields with a default may be missing (entries written before them).
HEADER_CHECKS: dict[str, tuple[Callable[[object], bool], str]] = {
    "key": (is_sha256_hex, "64 lowercase hex digits"),
    "payload_sha256": (is_sha256_hex, "64 lowercase hex digits"),
    "payload_size": (_count, "a whole number >= 0"),
    "body_size": (_count, "a whole number >= 0"),
    "compile_seconds": (_seconds, "a finite number >= 0"),
    "created": (_seconds, "a finite number >= 0 (unix time)"),
    "label": (_text, "a string"),
    "platform": (_text, "a string"),
    "compression": (lambda v: v == COMPRESSION, repr(COMPRESSION)),
    "format_version": (lambda v: type(v) is int and v in READABLE_FORMATS, "2 or 3"),
    "producer": (_strings, "an object of strings"),
    "context": (_table, "an object"),
    "components": (_digests, "an object of 64-hex-digit digests"),
    "summary": (_table, "an object"),
    "module_text_size": (_count, "a whole number >= 0"),
    "signer": (_text, "a string"),
    "signature": (_text, "a string"),
    "program_size": (_count, "a whole number >= 0"),
    "program": (_table, "an object"),
    "rewarmed_from": (_text, "a string"),
}
# Checks across fields, on the checked Header.
_TRAILING = "module_text_size + program_size <= body_size"
HEADER_RELATIONS: tuple[tuple[Callable[[Header], bool], str], ...] = (
    (lambda h: h.module_text_size + h.program_size <= h.body_size, _TRAILING),
)


def header_from_fields(values: object) -> Header:
    """A Header from decoded JSON, every field checked (HEADER_CHECKS); else CorruptEntryError."""
    if not isinstance(values, dict):
        raise CorruptEntryError("entry header is not a JSON object")
    names = set()
    for f in fields(Header):
        names.add(f.name)
        if f.name not in values:
            if f.default is MISSING and f.default_factory is MISSING:
                raise CorruptEntryError(f"entry header lacks field {f.name!r}")
            continue
        check, wanted = HEADER_CHECKS.get(f.name, (_anything, ""))
        if not check(values[f.name]):
            shown = repr(values[f.name])[:80]
            raise CorruptEntryError(f"entry header field {f.name!r} is {shown}, not {wanted}")
    if unknown := set(values) - names:
        raise CorruptEntryError(f"entry header has unknown fields {sorted(unknown)}")
    header = Header(**values)
    for holds, rule in HEADER_RELATIONS:
        if not holds(header):
            raise CorruptEntryError(f"entry header breaks {rule}")
    return header


# Alias entries (xlacache.executables) hold a small JSON record naming another entry's key;
# they are marked in the context (what `is_alias` checks) and in the label (what listings see).
ALIAS_CONTEXT = {"kind": "alias"}
ALIAS_LABEL_PREFIX = "alias:"


def is_alias(header: Header) -> bool:
    """Whether the entry is an alias entry (its payload is a record, not an executable)."""
    return header.context.get("kind") == ALIAS_CONTEXT["kind"]


class Signer(Protocol):
    """What signs entries (xlacache.signing.SigningKey)."""

    key_id: str

    def sign(self, data: bytes) -> bytes: ...


SIGNATURE_DOMAIN = b"xlacache-entry-signature-v1\n"


def signed_form(header: Header) -> bytes:
    """The bytes a signature covers: a fixed prefix, then the header as canonical JSON
    (sorted keys, no spaces, ASCII) without its "signature" field. The header names the
    key, the signer and the body's SHA-256 and size, so the signature binds them all."""
    fields = header.to_dict()
    del fields["signature"]
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return SIGNATURE_DOMAIN + text.encode()


def _signed(header: Header, signer: Signer | None) -> Header:
    if signer is None:
        return header
    header = replace(header, signer=signer.key_id, signature="")
    signature = base64.b64encode(signer.sign(signed_form(header))).decode()
    return replace(header, signature=signature)


@dataclass(frozen=True)
class Entry:
    header: Header
    body: bytes | memoryview  # zstd-compressed, as stored

    def payload(self) -> bytes:
        """The serialized executable (decompressed; zstd checks its own frame checksum)."""
        end = len(self.body) - self.header.module_text_size - self.header.program_size
        return self._decompress(self.body[:end], self.header.payload_size)

    def program_text(self) -> bytes | None:
        """The portable program (format 3: its canonical module text), or None."""
        if not self.header.program_size:
            return None
        end = len(self.body) - self.header.module_text_size
        return self._decompress(self.body[end - self.header.program_size : end], MAX_MODULE_TEXT)

    def module_text(self) -> str | None:
        """The stripped module text, where the writer kept it (XLACACHE_KEEP_HLO)."""
        if not self.header.module_text_size:
            return None
        tail = self.body[len(self.body) - self.header.module_text_size :]
        return self._decompress(tail, MAX_MODULE_TEXT).decode("utf-8", "replace")

    def _decompress(self, data, limit: int) -> bytes:
        trailing = self.header.module_text_size + self.header.program_size
        if not 0 <= trailing <= len(self.body):
            raise CorruptEntryError(f"entry {self.header.key}: module text size out of range")
        try:
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=limit)
        except zstandard.ZstdError as exc:
            raise CorruptEntryError(f"entry {self.header.key}: cannot decompress: {exc}") from exc


def encode(
    key: str,
    payload: bytes,
    *,
    compile_seconds: float,
    label: str = "",
    platform_name: str = "",
    created: float | None = None,
    context: dict | None = None,
    components: dict | None = None,
    summary: dict | None = None,
    module_text: str | None = None,
    signer: Signer | None = None,
    program_text: bytes | None = None,
    program: dict | None = None,
    rewarmed_from: str = "",
) -> bytes:
    """Build an encoded entry for `payload` (a serialized executable) under `key`.

    `components` and `summary` describe the key (xlacache.key.Identity); `program_text`
    (the portable program, described by `program`) and `module_text` are kept compressed
    after the executable; `rewarmed_from` names the jaxlib of the entry it was rebuilt
    from; `signer` signs the header.
    """
    compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_checksum=True)
    text = compressor.compress(module_text.encode()) if module_text else b""
    portable = compressor.compress(program_text) if program_text else b""
    body = compressor.compress(payload) + portable + text
    header = Header(
        key=key,
        payload_sha256=hashlib.sha256(body).hexdigest(),
        payload_size=len(payload),
        body_size=len(body),
        compile_seconds=float(compile_seconds),
        created=time.time() if created is None else created,
        label=label,
        platform=platform_name,
        producer=_producer(),
        context=context or {},
        components=components or {},
        summary=summary or {},
        module_text_size=len(text),
        program_size=len(portable),
        program=program or {},
        rewarmed_from=rewarmed_from,
    )
    return _pack(_signed(header, signer), body)


def sign(blob: bytes | memoryview, signer: Signer) -> bytes:
    """The verified entry `blob`, re-encoded with its header signed by `signer`."""
    found = decode(blob)
    return _pack(_signed(found.header, signer), found.body)


def _pack(header: Header, body: bytes | memoryview) -> bytes:
    try:  # never write what no reader would accept
        header_from_fields(header.to_dict())
    except CorruptEntryError as exc:
        raise ValueError(f"cannot encode entry {header.key!r}: {exc}") from None
    header_bytes = json.dumps(header.to_dict(), sort_keys=True).encode()
    prelude = _PRELUDE.pack(
        MAGIC, header.format_version, len(header_bytes), hashlib.sha256(header_bytes).digest()
    )
    return b"".join((prelude, header_bytes, body))


def read_header(data: bytes | memoryview) -> Header:
    """Parse and check only the header of an encoded entry (a prefix is enough)."""
    header, _ = _parse_header(memoryview(data))
    return header


def read_file_header(f: BinaryIO) -> tuple[Header, int]:
    """The checked header of the entry in a binary file (read from its current position),
    and the length of prelude plus header: where the body starts."""
    head = f.read(_HEADER_PROBE)
    need = header_length(head)
    if need > len(head):
        head += f.read(need - len(head))
    return read_header(head), need


def header_length(prelude: bytes) -> int:
    """Total bytes of prelude + header, from the first PRELUDE_SIZE bytes of an entry."""
    if len(prelude) < PRELUDE_SIZE:
        raise CorruptEntryError("entry truncated inside its prelude")
    magic, version, size, _ = _PRELUDE.unpack_from(prelude)
    _check_prelude(magic, version, size)
    return PRELUDE_SIZE + size


def verify(blob: bytes | memoryview, key: str | None = None) -> Header:
    """Check an encoded entry completely, without copying it; raises CorruptEntryError."""
    return _verified(memoryview(blob), key, check_body=True)[0]


def decode(blob: bytes | memoryview, key: str | None = None, check_body: bool = True) -> Entry:
    """Verify an encoded entry and return it (its body a view into `blob`).

    check_body=False skips re-hashing a body that a store has just verified.
    """
    header, body = _verified(memoryview(blob), key, check_body)
    return Entry(header, body)


def _verified(view: memoryview, key: str | None, check_body: bool) -> tuple[Header, memoryview]:
    header, offset = _parse_header(view)
    if key is not None and header.key != key:
        raise CorruptEntryError(f"entry holds key {header.key}, expected {key}")
    body = view[offset:]
    if len(body) != header.body_size:
        raise CorruptEntryError(
            f"entry {header.key} truncated: body has {len(body)} of {header.body_size} bytes"
        )
    if check_body and hashlib.sha256(body).hexdigest() != header.payload_sha256:
        raise CorruptEntryError(f"entry {header.key}: body checksum mismatch")
    return header, body


def _check_prelude(magic: bytes, version: int, size: int) -> None:
    if magic != MAGIC:
        raise CorruptEntryError("not an xlacache entry (bad magic)")
    if version not in READABLE_FORMATS:
        raise CorruptEntryError(f"entry format version {version}, expected {FORMAT_VERSION}")
    if size > MAX_HEADER_SIZE:
        raise CorruptEntryError(f"entry header claims {size} bytes")


def _parse_header(view: memoryview) -> tuple[Header, int]:
    end = header_length(bytes(view[:PRELUDE_SIZE]))
    _, version, _, header_sha = _PRELUDE.unpack_from(view)
    header_bytes = bytes(view[PRELUDE_SIZE:end])
    if len(header_bytes) != end - PRELUDE_SIZE:
        raise CorruptEntryError("entry truncated inside its header")
    if hashlib.sha256(header_bytes).digest() != header_sha:
        raise CorruptEntryError("entry header checksum mismatch")
    try:
        values = json.loads(header_bytes)
    except ValueError as exc:
        raise CorruptEntryError(f"entry header unreadable: {exc}") from exc
    header = header_from_fields(values)
    if header.format_version != version:
        raise CorruptEntryError(f"entry header says format {header.format_version}, not {version}")
    return header, end


class EntryReader:
    """Checks an encoded entry as its bytes arrive, holding nothing but its header.

    feed() the bytes in order: the header is parsed and checked (`header`) as soon as it
    is whole, against `key` and the entry's total `size` where given; the body is hashed
    as it passes. finish() checks the length and the body's digest. Every failure is a
    CorruptEntryError.
    """

    def __init__(self, key: str | None = None, size: int | None = None) -> None:
        self.key = key
        self.size = size
        self.received = 0
        self.header: Header | None = None
        self.body_offset: int | None = None  # prelude + header length, once known
        self._head = bytearray()
        self._body = hashlib.sha256()

    def feed(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.received += len(view)
        if self.size is not None and self.received > self.size:
            raise CorruptEntryError(f"entry longer than its declared {self.size} bytes")
        if self.header is None:
            view = self._take_header(view)
        if self.header is not None and len(view):
            self._body.update(view)

    def _take_header(self, view: memoryview) -> memoryview:
        while self.header is None:
            goal = PRELUDE_SIZE if self.body_offset is None else self.body_offset
            take = goal - len(self._head)
            self._head += view[:take]
            view = view[take:]
            if len(self._head) < goal:
                return view
            if self.body_offset is None:
                self.body_offset = header_length(bytes(self._head))
                if self.size is not None and self.body_offset > self.size:
                    raise CorruptEntryError("entry header longer than the entry")
                continue
            header = read_header(self._head)
            if self.key is not None and header.key != self.key:
                raise CorruptEntryError(f"entry holds key {header.key}, expected {self.key}")
            if self.size is not None and self.body_offset + header.body_size != self.size:
                raise CorruptEntryError(
                    f"entry header says {self.body_offset + header.body_size} bytes, "
                    f"not {self.size}"
                )
            self.header = header
            self._head = bytearray()
        return view

    @property
    def body_sha256(self) -> str:
        """Hex SHA-256 of the body bytes fed so far."""
        return self._body.hexdigest()

    def finish(self) -> Header:
        """The header of a whole, verified entry; CorruptEntryError otherwise."""
        if self.header is None:
            raise CorruptEntryError(f"entry truncated inside its header ({self.received} bytes)")
        expected = self.body_offset + self.header.body_size
        if self.received != expected:
            raise CorruptEntryError(
                f"entry {self.header.key} truncated: {self.received} of {expected} bytes"
            )
        if self.body_sha256 != self.header.payload_sha256:
            raise CorruptEntryError(f"entry {self.header.key}: body checksum mismatch")
        return self.header
