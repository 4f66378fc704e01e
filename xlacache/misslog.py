"""Recorded misses: the one record type (`MissRecord`), its bounds, and the JSON-lines
file that keeps them.

`MissRecord` is the schema: `explain.Explanation.to_record()` makes one; a cache
directory's `MISS_LOG` and a bucket's ``misses/`` objects hold its JSON (`to_dict`), the
gRPC `MissRecord` message is converted from and to it (`protocol.misses`, which a test
holds to the same fields), and `xlacache explain --json` prints its dicts. Every store
keeps records its own way (`Store.report_miss`, `Store.recent_misses`), each bounded: a
cache directory in `MISS_LOG` (cut to its newest half past 2 MiB), a server in a ring
persisted to its store directory's `MISS_LOG`, a bucket as one small object per miss
under ``misses/``. `bounded` is the one check of a record from elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from filelock import FileLock, Timeout

MISS_LOG = "misses.jsonl"
MAX_LOG_BYTES = 2 << 20  # the log is cut to its newest half beyond this
MAX_TEXT = 1000  # characters kept of any one string of a record
MAX_DIFFERENCES = 16  # components a record may name
MAX_DETAILS = 12  # readable details kept per component
MAX_COMPONENT = 64  # characters of a component's name


def _text(value, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value, kind: type) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return kind(0)
    return kind(value)


@dataclass(frozen=True)
class Difference:
    """One key component that differs from the nearest entry's, readably."""

    component: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class MissRecord:
    """One explained miss, as every store keeps it and the protocol carries it."""

    time: float  # unix time (a server stamps its own on receipt)
    key: str
    label: str = ""
    reason: str = ""  # versions, devices, flags, options, new_program, unusable, load_rejected
    note: str = ""
    differences: tuple[Difference, ...] = ()
    nearest: str | None = None  # key of the nearest stored entry
    nearest_label: str = ""
    compared: int = 0  # stored entries compared
    host: str = ""
    pid: int = 0
    client: str = ""  # a server's: the reporting token's name

    @classmethod
    def from_mapping(cls, record: Mapping | MissRecord) -> MissRecord:
        """A record's known fields, typed and clipped (strings, differences, details).

        ValueError when it is no record: not a mapping, or without a numeric `time`
        and a `key`. What a record from another process or host may hold is exactly this.
        """
        if isinstance(record, MissRecord):
            record = record.to_dict()
        if not isinstance(record, Mapping):
            raise ValueError("a miss record is a JSON object")
        when = record.get("time")
        if isinstance(when, bool) or not isinstance(when, (int, float)) or not record.get("key"):
            raise ValueError("a miss record needs a numeric time and a key")
        differences = record.get("differences")
        nearest = record.get("nearest")
        return cls(
            **{name: _text(record.get(name)) for name in _TEXTS},
            time=float(when),
            nearest=_text(nearest) if nearest else None,
            compared=_number(record.get("compared"), int),
            pid=_number(record.get("pid"), int),
            differences=tuple(
                Difference(
                    _text(d.get("component"), MAX_COMPONENT),
                    tuple(_text(x) for x in list(d.get("details") or [])[:MAX_DETAILS]),
                )
                for d in (differences if isinstance(differences, list) else [])[:MAX_DIFFERENCES]
                if isinstance(d, Mapping)
            ),
        )

    def to_dict(self) -> dict:
        """The record as JSON holds it (`client` only where a server set it)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["differences"] = [
            {"component": d.component, "details": list(d.details)} for d in self.differences
        ]
        if not self.client:
            del out["client"]
        return out


_TEXTS = tuple(
    f.name for f in fields(MissRecord) if f.type == "str"
)  # key, label, reason, note, nearest_label, host, client


def bounded(record: Mapping | MissRecord) -> dict:
    """`MissRecord.from_mapping(record)` as a dict (ValueError when it is no record)."""
    return MissRecord.from_mapping(record).to_dict()


def encode(record: Mapping) -> str:
    """One record as one line of JSON (keys sorted, no newline inside)."""
    return json.dumps(record, sort_keys=True)


def decode(text: str | bytes) -> dict | None:
    """A record from its JSON, or None for a torn or foreign one."""
    try:
        return bounded(json.loads(text))
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors too
        return None


def newest_first(records, limit: int | None = None) -> list[dict]:
    ordered = sorted(records, key=lambda r: r["time"], reverse=True)
    return ordered[:limit] if limit is not None else ordered


# -- the JSON-lines file ---------------------------------------------------------------


def append(path: str | os.PathLike, record: Mapping, max_bytes: int = MAX_LOG_BYTES) -> None:
    """Append one record (one write, so concurrent processes do not interleave); past
    `max_bytes`, cut the file to its newest half."""
    path = Path(path)
    line = encode(record) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        size = f.tell()
    if size > max_bytes:
        _trim(path, max_bytes // 2)


def _trim(path: Path, keep_bytes: int) -> None:
    with contextlib.suppress(Timeout), FileLock(f"{path}.lock", timeout=5):
        lines = path.read_bytes().splitlines(keepends=True)
        kept: list[bytes] = []
        total = 0
        for line in reversed(lines):
            total += len(line)
            if total > keep_bytes:
                break
            kept.append(line)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(b"".join(reversed(kept)))
        os.replace(tmp, path)


def read(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """The records of a file, newest first (a torn or foreign line is skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return newest_first((r for line in text.splitlines() if (r := decode(line))), limit)
