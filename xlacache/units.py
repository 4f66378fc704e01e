"""Human sizes ("10GB", "512MiB") and durations ("7d", "12h", "90s") for flags and settings."""

from __future__ import annotations

import re

from xlacache.errors import ConfigError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2,
    "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def _split(text: str, units: dict[str, int], what: str, example: str) -> float:
    match = _NUMBER_UNIT.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in units:
        raise ConfigError(f"invalid {what} {text!r} (expected something like {example})")
    return float(match.group(1)) * units[unit]


def parse_size(text: str | int) -> int:
    """Bytes from '10GB', '512MiB', '4096'."""
    if isinstance(text, int):
        return text
    return int(_split(text, _SIZE_UNITS, "size", "10GB or 512MiB"))


def parse_duration(text: str | float) -> float:
    """Seconds from '7d', '12h', '30m', '90s', '90'."""
    if isinstance(text, (int, float)):
        return float(text)
    return _split(text, _DURATION_UNITS, "duration", "7d, 12h or 30m")


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """'0.4 s', '12 s', '4.5 min', '2.3 h', '1.5 d' (a readable length of time)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= (2 * size if unit == "d" else size):
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s" if abs(seconds) < 10 else f"{seconds:.0f} s"
