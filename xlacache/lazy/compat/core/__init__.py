"""``torch_xla.core``."""

from . import xla_model

__all__ = ["xla_model"]
