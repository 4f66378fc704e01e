"""``torch_xla.distributed``."""

from . import parallel_loader, xla_backend, xla_multiprocessing

__all__ = ["parallel_loader", "xla_backend", "xla_multiprocessing"]
