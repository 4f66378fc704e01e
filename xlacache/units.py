"""Human sizes ("10GB", "512MiB") and durations ("7d", "12h", "90s") for flags and settings.

One parser for every size and duration a user types (command-line options, client and
server settings, config files): a number needs its unit, since a bare `7` could mean
seconds or days and `10` bytes or gigabytes (a cache pruned by the wrong one is gone).
Zero alone is allowed: it means the same in every unit. A Python number given through
the API (`initialize_cache(max_size=2**30)`) is bytes or seconds, as its type says.
"""

from __future__ import annotations

import re

from xlacache.errors import ConfigError

_SIZE_UNITS = {
    "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2,
    "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_DURATION_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
# The accepted forms, as errors (FORMS) and help texts (HELP) show them.
SIZE_FORMS = "B, KB, MB, GB, TB, KiB, MiB, GiB or TiB, as in 10GB or 512MiB; or 0 alone"
DURATION_FORMS = "s, m, h, d or w, as in 90s, 30m, 12h or 7d; or 0 alone"
SIZE_HELP = "a size with its unit: 10GB, 512MiB, or 0"
DURATION_HELP = "a duration with its unit: 90s, 30m, 12h, 7d, or 0"


def _split(text: str, units: dict[str, int], what: str, forms: str, name: str | None) -> float:
    match = _NUMBER_UNIT.match(str(text))
    unit = match.group(2).lower() if match else None
    if match and unit == "" and float(match.group(1)) == 0:
        return 0.0
    if not match or unit not in units:
        where = f"{name}: " if name else ""
        need = "needs its unit" if match and unit == "" else "is a number and its unit"
        raise ConfigError(f"{where}invalid {what} {str(text)!r}: a {what} {need}, {forms}")
    return float(match.group(1)) * units[unit]


def parse_size(text: str | int, name: str | None = None) -> int:
    """Bytes from '10GB', '512MiB', '4096B' or '0' (an int: bytes already). `name` (the
    option or variable) starts the error message."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    return int(_split(text, _SIZE_UNITS, "size", SIZE_FORMS, name))


def parse_duration(text: str | float, name: str | None = None) -> float:
    """Seconds from '7d', '12h', '30m', '90s' or '0' (a number: seconds already)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    return _split(text, _DURATION_UNITS, "duration", DURATION_FORMS, name)


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def compact_size(n: int) -> str:
    """A size as an option is written: '2GiB', '50MiB', '4096B' (for defaults in help)."""
    return format_size(n).replace(" ", "").replace(".0", "")


def format_duration(seconds: float) -> str:
    """'0.4 s', '12 s', '4.5 min', '2.3 h', '1.5 d' (a readable length of time)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= (2 * size if unit == "d" else size):
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s" if abs(seconds) < 10 else f"{seconds:.0f} s"
