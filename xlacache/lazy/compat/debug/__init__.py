"""``torch_xla.debug``."""

from . import metrics

__all__ = ["metrics"]
