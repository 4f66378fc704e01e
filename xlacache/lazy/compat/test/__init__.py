"""``torch_xla.test``."""

from . import test_utils

__all__ = ["test_utils"]
