"""One miss-record type (issue 19): `misslog.MissRecord` is what the JSON file holds and
what the gRPC message carries, field for field."""

from __future__ import annotations

from dataclasses import fields

from xlacache import misslog
from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.misslog import Difference, MissRecord
from xlacache.protocol import misses

RECORD = MissRecord(
    time=1.5, key="ab" * 32, label="jit_step", reason="flags", note="n",
    differences=(Difference("xla_flags", ("`--a=1` added",)),), nearest="cd" * 32,
    nearest_label="jit_step", compared=3, host="h", pid=7, client="worker",
)  # fmt: skip


def test_the_message_has_the_records_fields():
    message = {f.name for f in pb.MissRecord.DESCRIPTOR.fields}
    assert message == {f.name for f in fields(MissRecord)}
    assert {f.name for f in pb.MissDifference.DESCRIPTOR.fields} == {
        f.name for f in fields(Difference)
    }


def test_a_record_survives_the_wire_and_the_file(tmp_path):
    assert misses.from_message(misses.to_message(RECORD)) == RECORD
    log = tmp_path / misslog.MISS_LOG
    misslog.append(log, RECORD.to_dict())
    (back,) = misslog.read(log)
    assert MissRecord.from_mapping(back) == RECORD
    assert misses.to_record(misses.to_message(back)) == back


def test_a_record_from_elsewhere_is_bounded():
    wild = {**RECORD.to_dict(), "note": "x" * 5000, "pid": "7", "extra": 1,
            "differences": [{"component": "c" * 100, "details": ["d"] * 50}] * 40}  # fmt: skip
    kept = MissRecord.from_mapping(wild)
    assert len(kept.note) == misslog.MAX_TEXT and kept.pid == 0
    assert len(kept.differences) == misslog.MAX_DIFFERENCES
    assert len(kept.differences[0].details) == misslog.MAX_DETAILS
    assert "extra" not in kept.to_dict()
    for bad in ({"key": "k"}, {"time": True, "key": "k"}, {"time": 1.0}, ["not", "a", "dict"]):
        try:
            MissRecord.from_mapping(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")
