"""xlacache: a persistent, shared compilation cache for XLA.

import xlacache
xlacache.initialize_cache("/tmp/xla_cache")   # before the first compile
...                                            # jax.jit / xlacache.lazy as usual
print(xlacache.stats())
"""

from xlacache import executables
from xlacache._version import __version__
from xlacache.api import get_cache, initialize_cache, is_initialized, stats
from xlacache.errors import CacheError, ConfigError, CorruptEntryError, NotACacheError
from xlacache.rewarming import rewarm

__all__ = [
    "__version__",
    "initialize_cache",
    "stats",
    "get_cache",
    "is_initialized",
    "rewarm",
    "CacheError",
    "ConfigError",
    "CorruptEntryError",
    "NotACacheError",
    "executables",
]
