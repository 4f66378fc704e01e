"""Child process for test_transformers: trains the named tiny models on the device with the
persistent cache at ``argv[1]`` and prints one JSON line (per model: losses, graphs compiled or
loaded per step, seconds per step; the process's compile counters)."""

from __future__ import annotations

import json
import sys

import xlacache
import xlacache.lazy as xl
from tests.lazy.hf_models import train


def main(cache_dir: str, names: list[str]) -> None:
    xlacache.initialize_cache(cache_dir)
    runs = {}
    for name in names:
        run = train(name, xl.device())
        runs[name] = {k: run[k] for k in ("losses", "compiles", "seconds")}
    names_ = ("UncachedCompile", "PersistentCacheHit", "PersistentCacheMiss", "CachedCompile")
    counters = {n: xl.metrics.counter_value(n) or 0 for n in names_}
    print(json.dumps({"runs": runs, "counters": counters}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
