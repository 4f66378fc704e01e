"""``torch_xla.utils.serialization`` (``xser``): checkpoints saved one tensor at a time
(``xlacache.lazy.serialization``)."""

from __future__ import annotations

from xlacache.lazy.serialization import load, save

__all__ = ["load", "save"]
