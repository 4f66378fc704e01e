"""``torch_xla.utils.utils`` (``xu``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from xlacache.config import parse_bool
from xlacache.lazy import SampleGenerator

__all__ = ["SampleGenerator", "getenv_as"]


def getenv_as(name: str, kind: Callable[[str], Any], defval: Any = None) -> Any:
    """The environment variable ``name`` converted by ``kind`` (``bool`` reads 0/1, true/false)."""
    value = os.environ.get(name)
    if value is None:
        return defval
    if kind is bool:
        return parse_bool(value, name)  # the words of every boolean setting; others raise
    return kind(value)
