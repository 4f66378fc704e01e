"""``torch_xla.utils``."""

from . import serialization, utils

__all__ = ["serialization", "utils"]
