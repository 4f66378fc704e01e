"""``torch_xla.distributed.parallel_loader`` (``pl``)."""

from xlacache.lazy import MpDeviceLoader, ParallelLoader

__all__ = ["MpDeviceLoader", "ParallelLoader"]
