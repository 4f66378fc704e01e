"""``torch_xla.utils``."""

from . import utils

__all__ = ["utils"]
