"""Recorded misses: what a record holds, its bounds, and the JSON-lines file that keeps them.

A record is what `explain.Explanation.to_record()` gives: ``time, key, label, reason,
note, differences [{component, details}], nearest, nearest_label, compared, host,
pid``, plus ``client`` (the reporting token's name) where a server received it. Every
store keeps records its own way (`Store.report_miss`, `Store.recent_misses`), each
bounded: a cache directory in `MISS_LOG` (cut to its newest half past 2 MiB), a server
in a ring persisted to its store directory's `MISS_LOG`, a bucket as one small object
per miss under ``misses/``. `bounded` is the one check of a record from elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from filelock import FileLock, Timeout

MISS_LOG = "misses.jsonl"
MAX_LOG_BYTES = 2 << 20  # the log is cut to its newest half beyond this
MAX_TEXT = 1000  # characters kept of any one string of a record
MAX_DIFFERENCES = 16  # components a record may name
MAX_DETAILS = 12  # readable details kept per component

_TEXT_FIELDS = ("key", "label", "reason", "note", "nearest_label", "host", "client")


def _text(value, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value, kind: type) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return kind(0)
    return kind(value)


def bounded(record: Mapping) -> dict:
    """A record's known fields, typed and clipped (strings, differences, details).

    ValueError when it is no record: not a mapping, or without a numeric `time` and
    a `key`. What a record from another process or host may hold is exactly this.
    """
    if not isinstance(record, Mapping):
        raise ValueError("a miss record is a JSON object")
    when = record.get("time")
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not record.get("key"):
        raise ValueError("a miss record needs a numeric time and a key")
    out: dict = {name: _text(record.get(name)) for name in _TEXT_FIELDS}
    out["time"] = float(when)
    nearest = record.get("nearest")
    out["nearest"] = _text(nearest) if nearest else None
    out["compared"] = _number(record.get("compared"), int)
    out["pid"] = _number(record.get("pid"), int)
    differences = record.get("differences")
    out["differences"] = [
        {
            "component": _text(d.get("component"), 64),
            "details": [_text(x) for x in list(d.get("details") or [])[:MAX_DETAILS]],
        }
        for d in (differences if isinstance(differences, list) else [])[:MAX_DIFFERENCES]
        if isinstance(d, Mapping)
    ]
    if not out["client"]:
        del out["client"]
    return out


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


# -- rate limits -------------------------------------------------------------------------


class RateLimit:
    """A token bucket: `take()` is True at most `burst` times at once and `rate` times a
    second on average (for miss reports: clients send, servers accept, at most this)."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
