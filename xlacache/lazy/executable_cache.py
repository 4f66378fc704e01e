"""The compiled graphs a process keeps: an LRU by graph key, bounded by count and by the
memory maps the executables hold.

XLA's CPU executables are JIT-compiled code, mapped into the process: tens of maps for a
graph of a few hundred ops, and the kernel refuses maps past ``vm.max_map_count`` (65530 by
default). Then LLVM cannot map the next executable ("LLVM compilation error: Cannot allocate
memory") and the process dies. A job that compiles many distinct graphs (an L-BFGS history
that grows, shapes that vary) reached it well below torch_xla's 1024 graphs, so the cache also
evicts while the process holds more than half of that limit.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from . import metrics

MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"
SELF_MAPS = "/proc/self/maps"


@dataclass
class Executable:
    compiled: Any
    n_ops: int
    out_dtypes: tuple
    across: str = ""  # it runs on other processes' devices too ("collectives" or "mesh")
    checked: bool = False  # its last output says which checks failed (device_checks)


def memory_maps() -> int | None:
    """The memory maps this process holds now (None where /proc does not say)."""
    try:
        with open(SELF_MAPS, "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return None


def map_limit() -> int | None:
    """The kernel's per-process limit on memory maps (None: not known)."""
    try:
        with open(MAX_MAP_COUNT) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


class ExecutableCache:
    """Compiled graphs by graph key, least recently used evicted first.

    Bounds: ``capacity`` graphs (``XLA_COMPILATION_CACHE_SIZE``, default 1024, as torch_xla's
    in-memory cache), and the memory maps held by the process (``set_map_limit``; the kernel's
    ``vm.max_map_count`` by default), checked after each compile. Every eviction is
    counted as ``CompilationCacheEviction``; an evicted graph compiles again (or hits the
    persistent cache). The newest graph is never evicted.
    """

    def __init__(self, capacity: int, map_limit: int | None = None) -> None:
        self._d: OrderedDict[bytes, Executable] = OrderedDict()
        self.capacity = capacity
        self.set_map_limit(map_limit)

    def set_map_limit(self, limit: int | None) -> None:
        """Evict while the process holds over half of ``limit`` maps (None: never). Maps that
        evicting every graph but the newest leaves raise that budget (they are not these
        graphs'), up to three quarters of ``limit``."""
        self.map_limit = limit
        self.map_budget = None if limit is None else limit // 2
        self._map_ceiling = None if limit is None else limit * 3 // 4
        self._warned = False

    def get(self, key: bytes) -> Executable | None:
        exe = self._d.get(key)
        if exe is not None:
            self._d.move_to_end(key)
        return exe

    def put(self, key: bytes, exe: Executable) -> None:
        self._d[key] = exe
        self._d.move_to_end(key)
        self._shrink()
        self._shrink_maps()

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("xlacache.lazy: the compiled-graph cache needs a capacity >= 1")
        self.capacity = capacity
        self._shrink()

    def _shrink(self) -> None:
        while len(self._d) > self.capacity:
            self._evict()

    def _shrink_maps(self) -> None:
        if self.map_budget is None:
            return
        held = memory_maps()
        if held is None or held <= self.map_budget or len(self._d) < 2:
            return
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"xlacache.lazy: the process holds {held} memory maps (the kernel's limit: "
                f"{self.map_limit}), with {len(self._d)} compiled graphs: the least "
                "recently used are dropped (CompilationCacheEviction) and compile again if "
                "needed. Many distinct graphs: shapes that vary, or values read mid-step.",
                stacklevel=4,
            )
        while held > self.map_budget and len(self._d) > 1:
            for _ in range(max(1, len(self._d) // 16)):  # then count again
                if len(self._d) > 1:
                    self._evict()
            if (now := memory_maps()) is None:
                return
            held = now
        if held > self.map_budget and held <= self._map_ceiling:
            self.map_budget = held  # what holds the maps is not these graphs: no thrashing

    def _evict(self) -> None:
        self._d.popitem(last=False)
        metrics.counter_inc("CompilationCacheEviction")

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)
