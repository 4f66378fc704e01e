"""Miss records (`xlacache.misslog.MissRecord`) as `MissRecord` messages and back.

The message has the dataclass's fields, by name (a test holds them equal); `nearest` is
"" on the wire for none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from xlacache._proto.v1 import cache_pb2 as pb
from xlacache.misslog import Difference, MissRecord

_SCALARS = tuple(f.name for f in fields(MissRecord) if f.name not in ("differences", "nearest"))


def to_message(record: Mapping | MissRecord) -> pb.MissRecord:
    """The message of a record (bounded first); no record: ValueError."""
    record = MissRecord.from_mapping(record)
    return pb.MissRecord(
        **{name: getattr(record, name) for name in _SCALARS},
        nearest=record.nearest or "",
        differences=[
            pb.MissDifference(component=d.component, details=d.details) for d in record.differences
        ],
    )


def from_message(message: pb.MissRecord) -> MissRecord:
    """The record a message carries (not yet bounded: `MissRecord.from_mapping` clips)."""
    return MissRecord(
        **{name: getattr(message, name) for name in _SCALARS},
        nearest=message.nearest or None,
        differences=tuple(Difference(d.component, tuple(d.details)) for d in message.differences),
    )


def to_record(message: pb.MissRecord) -> dict:
    """The record of a message, bounded, as JSON holds it."""
    return MissRecord.from_mapping(from_message(message)).to_dict()
