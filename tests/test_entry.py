"""The entry format: round trip, and every kind of damage is caught."""

import struct

import pytest

from tests.conftest import make_blob, make_key
from xlacache import entry
from xlacache.errors import CorruptEntryError


def test_round_trip_keeps_payload_and_header():
    payload = b"executable bytes" * 1000
    key, blob = make_blob(7, payload=payload, compile_seconds=12.25, label="jit_train_step")
    decoded = entry.decode(blob, key)
    assert decoded.payload() == payload
    h = decoded.header
    assert (h.key, h.payload_size, h.compile_seconds, h.label) == (
        key,
        len(payload),
        12.25,
        "jit_train_step",
    )
    assert h.compression == "zstd" and h.format_version == entry.FORMAT_VERSION
    assert h.producer["xlacache"] and h.producer["jaxlib"] and h.producer["host"]
    assert len(blob) < len(payload)  # compressed


def test_header_readable_from_prefix():
    key, blob = make_blob(3)
    n = entry.header_length(blob[: entry.PRELUDE_SIZE])
    assert entry.read_header(blob[:n]).key == key


@pytest.mark.parametrize(
    ("where", "found"),
    [("magic", "bad magic"), ("header", "header checksum"), ("body", "body checksum"),
     ("last", "body checksum")],
)  # fmt: skip
def test_flipped_byte_is_detected(where, found):
    key, blob = make_blob(1)
    body = entry.header_length(blob[: entry.PRELUDE_SIZE])  # where the body starts
    pos = {
        "magic": 0,
        "header": entry.PRELUDE_SIZE + 5,
        "body": (body + len(blob)) // 2,  # the middle of the body
        "last": len(blob) - 1,
    }[where]
    assert (pos >= body) == (where in ("body", "last"))
    damaged = bytearray(blob)
    damaged[pos] ^= 0x01
    with pytest.raises(CorruptEntryError, match=found):
        entry.decode(bytes(damaged), key)


@pytest.mark.parametrize("keep", [0, 3, entry.PRELUDE_SIZE, entry.PRELUDE_SIZE + 10, -1])
def test_truncation_is_detected(keep):
    key, blob = make_blob(2)
    with pytest.raises(CorruptEntryError):
        entry.decode(blob[:keep] if keep >= 0 else blob[:-1], key)


def test_wrong_magic_and_version():
    key, blob = make_blob(4)
    with pytest.raises(CorruptEntryError, match="magic"):
        entry.decode(b"ZZZZ" + blob[4:], key)
    bumped = blob[:4] + struct.pack(">H", entry.FORMAT_VERSION + 1) + blob[6:]
    with pytest.raises(CorruptEntryError, match="version"):
        entry.decode(bumped, key)


def test_entry_under_wrong_key_is_rejected():
    _, blob = make_blob(5)
    with pytest.raises(CorruptEntryError, match="expected"):
        entry.decode(blob, make_key(6))


def test_corrupt_compressed_stream_fails_on_payload():
    # A body that matches its checksum but is no zstd stream (a buggy writer).
    key = make_key(9)
    good = entry.encode(key, b"x" * 5000, compile_seconds=1)
    header = entry.read_header(good)
    fake = entry.Entry(header, b"not zstd at all")
    with pytest.raises(CorruptEntryError):
        fake.payload()


def test_module_text_rides_after_the_payload_and_is_checked():
    blob = entry.encode("ab" * 32, b"exe" * 100, compile_seconds=1.0, module_text="module @m {}\n")
    found = entry.decode(blob, "ab" * 32)
    assert found.payload() == b"exe" * 100 and found.module_text() == "module @m {}\n"
    assert found.header.module_text_size > 0
    assert entry.decode(entry.encode("ab" * 32, b"x", compile_seconds=1.0)).module_text() is None
    flipped = bytearray(blob)
    flipped[-3] ^= 0xFF  # inside the module text: the body digest covers it
    with pytest.raises(CorruptEntryError, match="checksum"):
        entry.decode(bytes(flipped))


def test_header_records_components_and_summary():
    summary = {"jaxlib": {"version": "1"}}
    blob = entry.encode("cd" * 32, b"x", compile_seconds=1.0, label="jit_f",
                        components={"hlo": "00" * 32}, summary=summary)  # fmt: skip
    header = entry.read_header(blob)
    assert header.components == {"hlo": "00" * 32} and header.summary["jaxlib"]["version"] == "1"
    assert header.signer == header.signature == ""
