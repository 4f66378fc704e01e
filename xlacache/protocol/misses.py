"""Miss records (xlacache.misslog's dicts) as `MissRecord` messages and back."""

from __future__ import annotations

from collections.abc import Mapping

from xlacache._proto.v1 import cache_pb2 as pb

_SCALARS = ("time", "key", "label", "reason", "note", "nearest_label", "compared", "host",
            "pid", "client")  # fmt: skip


def to_message(record: Mapping) -> pb.MissRecord:
    """The message of a (bounded) record; a field of the wrong type is a ValueError."""
    try:
        message = pb.MissRecord(
            **{name: record[name] for name in _SCALARS if record.get(name) is not None},
            nearest=record.get("nearest") or "",
        )
        for diff in record.get("differences", ()):
            message.differences.add(component=diff["component"], details=diff["details"])
    except (TypeError, KeyError) as exc:
        raise ValueError(f"not a miss record: {exc}") from None
    return message


def to_record(message: pb.MissRecord) -> dict:
    record = {name: getattr(message, name) for name in _SCALARS}
    record["nearest"] = message.nearest or None
    record["differences"] = [
        {"component": d.component, "details": list(d.details)} for d in message.differences
    ]
    if not record["client"]:
        del record["client"]
    return record
