"""``torch_xla.distributed``."""

from . import parallel_loader, spmd, xla_backend, xla_multiprocessing

__all__ = ["parallel_loader", "spmd", "xla_backend", "xla_multiprocessing"]
