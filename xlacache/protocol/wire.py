"""Hand-rolled protobuf wire format for the two bulk messages (GetResponse, PutRequest).

Generated protobuf code copies every chunk two or three times (into the message, out
of it, into the frame). The bytes on the wire here are exactly the messages defined in
proto/xlacache/v1/cache.proto, so any gRPC client or server interoperates; only our
own Python ends skip the copies, using memoryviews into the received frames.
"""

from __future__ import annotations

# Field numbers from cache.proto.
GET_FOUND, GET_SIZE, GET_DATA = 1, 2, 3
PUT_KEY, PUT_SIZE, PUT_SHA256, PUT_DATA = 1, 2, 3, 4

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """A message that is not valid protobuf wire format."""


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    end = len(buf)
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise WireError("bad varint")


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def len_field(field: int, data) -> list:
    """Parts of a length-delimited field, for b''.join."""
    return [_tag(field, _LEN), varint(len(data)), data]


def varint_field(field: int, value: int) -> list:
    return [_tag(field, _VARINT), varint(value)] if value else []


def parse(message: bytes) -> dict[int, object]:
    """Fields of a message: ints for varints, memoryviews for length-delimited values.

    A repeated field keeps its last value (proto3 semantics for scalars); unknown
    fields are skipped.
    """
    view = memoryview(message)
    fields: dict[int, object] = {}
    pos = 0
    end = len(view)
    while pos < end:
        key, pos = _read_varint(view, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            fields[field], pos = _read_varint(view, pos)
        elif wire_type == _LEN:
            length, pos = _read_varint(view, pos)
            if pos + length > end:
                raise WireError("length-delimited field runs past the message")
            fields[field] = view[pos : pos + length]
            pos += length
        elif wire_type == _FIXED64:
            pos += 8
        elif wire_type == _FIXED32:
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
    if pos != end:
        raise WireError("message truncated")
    return fields


def data_of(message: bytes, field: int) -> memoryview:
    """The bytes field `field` of a chunk message, without copying (fast path first)."""
    tag = field << 3 | _LEN
    if message and message[0] == tag:
        length, pos = _read_varint(message, 1)
        if pos + length == len(message):
            return memoryview(message)[pos:]
    value = parse(message).get(field, b"")
    return value if isinstance(value, memoryview) else memoryview(b"")


# -- GetResponse -----------------------------------------------------------------------


def get_first(found: bool, size: int = 0, data: bytes = b"") -> bytes:
    parts = varint_field(GET_FOUND, int(found)) + varint_field(GET_SIZE, size)
    if data:
        parts += len_field(GET_DATA, data)
    return b"".join(parts)


def get_chunk(data) -> bytes:
    return b"".join(len_field(GET_DATA, data))


# -- PutRequest ------------------------------------------------------------------------


def put_first(key: str, size: int, payload_sha256: str, data) -> bytes:
    parts = len_field(PUT_KEY, key.encode()) + varint_field(PUT_SIZE, size)
    parts += len_field(PUT_SHA256, payload_sha256.encode())
    if len(data):
        parts += len_field(PUT_DATA, data)
    return b"".join(parts)


def put_chunk(data) -> bytes:
    return b"".join(len_field(PUT_DATA, data))


def text(fields: dict[int, object], field: int) -> str:
    value = fields.get(field, b"")
    if not isinstance(value, (bytes, memoryview)):
        raise WireError(f"field {field} is not a string")
    try:
        return bytes(value).decode()
    except UnicodeDecodeError as exc:
        raise WireError(f"field {field} is not UTF-8") from exc


def number(fields: dict[int, object], field: int) -> int:
    value = fields.get(field, 0)
    if not isinstance(value, int):
        raise WireError(f"field {field} is not a number")
    return value
