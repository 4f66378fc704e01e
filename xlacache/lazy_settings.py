"""The lazy runtime's settings, declared once: `LAZY_SETTINGS`, one row per setting.

Rows as `config.SETTINGS`' (name, kind and parser, default, environment variables, help,
the page that documents it); the table of docs/lazy.md is derived from them
(`tools/doctables.py`), and `lazy_setting(name)` is how the runtime reads one. The
table lives outside `xlacache/lazy/` so that the docs tool and the check of unknown
`XLACACHE_*` variables (`xlacache.variables`) read it without importing torch.

A value that does not parse is one warning naming the variable, and that setting keeps
its default (strict mode raises): the runtime and its cache run on. Names are
torch_xla's where it has the setting (`XLA_COMPILATION_CACHE_SIZE`, `XLA_TRIM_GRAPH_SIZE`,
`CPU_NUM_DEVICES`, `RATE_TRACKER_SMOOTHING`), else `XLACACHE_*`. The job's own description (`RANK`,
`WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, ...) is the launcher's, read by
`lazy/distributed/env.py`; the persistent cache's settings are the client's
(`config.SETTINGS`: `XLACACHE_DIR`, `XLA_PERSISTENT_CACHE_PATH`, ...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from xlacache.config import BOOL, Kind, Setting, duration, tolerant, whole
from xlacache.errors import ConfigError


def _fraction(value: Any, name: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        raise ConfigError(f"{name}={value!r} is not a number from 0 to 1")
    return number


def _address(value: Any, name: str) -> str:
    host, sep, port = str(value).strip().rpartition(":")
    if not (host and sep and port.isdigit()):
        raise ConfigError(f"{name}={value!r} is not HOST:PORT")
    return str(value).strip()


POSITIVE = Kind("count", int | None, int, lambda v, n: whole(v, n, minimum=1))
TIMEOUT = Kind("duration", float | str | None, float, lambda v, n: duration(v, n, positive=True))
FRACTION = Kind("number", float | None, float, _fraction)
ADDRESS = Kind("host:port", str | None, str | None, _address)


def _lazy(name: str, kind: Kind, default: Any, variable: str, help: str, doc: str) -> Setting:
    return Setting(name, kind, default, (variable,), help, doc)


LAZY_SETTINGS: tuple[Setting, ...] = (
    _lazy("fallback", BOOL, True, "XLACACHE_LAZY_FALLBACK",
          "run ops with no lowering on the CPU, with a warning once per op (0: an error naming "
          "the op, data-dependent shapes included)", "docs/lazy.md"),
    _lazy("compilation_cache_size", POSITIVE, 1024, "XLA_COMPILATION_CACHE_SIZE",
          "compiled graphs kept in memory (least recently used go first)", "docs/lazy.md"),
    _lazy("trim_graph_size", POSITIVE, 100_000, "XLA_TRIM_GRAPH_SIZE",
          "nodes a pending graph may reach before it runs with no barrier (torch_xla's)",
          "docs/lazy.md"),
    _lazy("trim_graph_check_frequency", POSITIVE, 5000, "XLA_TRIM_GRAPH_CHECK_FREQUENCY",
          "top-level ops between two looks at the pending graph's size (torch_xla's)",
          "docs/lazy.md"),
    _lazy("gc_freeze", BOOL, True, "XLACACHE_LAZY_GC_FREEZE",
          "move the objects torch and jax leave at import out of the collector's reach "
          "(gc.freeze)", "docs/lazy.md"),
    _lazy("gc_defer", BOOL, True, "XLACACHE_LAZY_GC_DEFER",
          "collect young objects rarely while a step is traced (restored at the barrier)",
          "docs/lazy.md"),
    _lazy("autograd_threads", BOOL, False, "XLACACHE_LAZY_AUTOGRAD_THREADS",
          "run backward passes on torch's autograd device threads (off: the thread that "
          "first uses the device runs them itself, no handoff per backward)", "docs/lazy.md"),
    _lazy("optim_loop", BOOL, False, "XLACACHE_LAZY_OPTIM_LOOP",
          "optimizers with foreach=None run torch's per-parameter loop (off: their "
          "multi-tensor implementation, as on CUDA)", "docs/lazy.md"),
    _lazy("rate_tracker_smoothing", FRACTION, 0.4, "RATE_TRACKER_SMOOTHING",
          "RateTracker's smoothing of the rate (torch_xla's)", "docs/lazy.md"),
    _lazy("cpu_num_devices", POSITIVE, None, "CPU_NUM_DEVICES",
          "CPU devices per process (torch_xla's; jax_num_cpu_devices)", "docs/spmd.md"),
    _lazy("coordinator", ADDRESS, None, "XLACACHE_COORDINATOR",
          "jax.distributed's coordinator (xl.launch sets it; torchrun: a free port "
          "at MASTER_ADDR, agreed through torchrun's store; else MASTER_PORT + 1)",
          "docs/distributed.md"),
    _lazy("gloo_log", BOOL, False, "XLACACHE_GLOO_LOG",
          "show Gloo's '[Gloo] Rank N is connected to M peer ranks' lines (multi-process "
          "jobs; off: filtered out of standard output)", "docs/distributed.md"),
    _lazy("init_timeout", TIMEOUT, 60.0, "XLACACHE_INIT_TIMEOUT",
          "every process of a job joins jax.distributed within this", "docs/distributed.md"),
    _lazy("heartbeat_timeout", TIMEOUT, 10.0, "XLACACHE_HEARTBEAT_TIMEOUT",
          "JAX aborts the survivors of a peer silent this long", "docs/distributed.md"),
    _lazy("shutdown_timeout", TIMEOUT, 30.0, "XLACACHE_SHUTDOWN_TIMEOUT",
          "longest wait for the other processes at jax.distributed's shutdown",
          "docs/distributed.md"),
    _lazy("rendezvous_timeout", TIMEOUT, 300.0, "XLACACHE_RENDEZVOUS_TIMEOUT",
          "longest wait in rendezvous and mesh_reduce", "docs/distributed.md"),
    _lazy("collective_timeout", TIMEOUT, 300.0, "XLACACHE_COLLECTIVE_TIMEOUT",
          "longest wait for the other ranks' agreement on a cross-process program",
          "docs/distributed.md"),
)  # fmt: skip
LAZY_BY_NAME = {s.name: s for s in LAZY_SETTINGS}


def lazy_setting(name: str, env: Mapping[str, str] = os.environ) -> Any:
    """The setting `name` as the environment gives it, parsed; its default when unset or
    when the value does not parse (then one warning naming the variable)."""
    row = LAZY_BY_NAME[name]

    def read(_: str) -> Any:
        for variable in row.env:
            if raw := env.get(variable, "").strip():
                return row.kind.parse(raw, variable)
        return None

    return tolerant((row,), read, "lazy settings").get(name, row.default)
