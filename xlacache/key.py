"""Cache identity: the one place that decides what makes two compilations the same.

A key is a SHA-256 over length-prefixed, named components:

- the HLO module with debug/location metadata stripped (comments or moved lines in
  user code do not change it),
- the compile options with debug-only fields cleared (dump paths, cache paths),
- jaxlib version, platform name and version, device kinds, count and topology,
- the XLA flags that affect code generation (dump/debug flags dropped, order-free),
- xlacache's entry-format version.

Nothing about where the cache lives enters the key, so entries survive moving the
cache directory, and the same program gives the same key on every machine that has
the same setup. `xlacache.jax_bridge` extracts the components from JAX objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from xlacache.entry import FORMAT_VERSION, is_sha256_hex

# XLA flags (and DebugOptions fields of the same names) that change only what XLA
# writes for people or where it keeps side caches, never the executable.
NON_CODEGEN_FLAG_PREFIXES = (
    "xla_dump_",
    "xla_log_",
    "xla_gpu_cuda_data_dir",
    "xla_gpu_per_fusion_autotune_cache_dir",
    "xla_gpu_kernel_cache_file",
    "xla_gpu_experimental_autotune_cache_mode",
    "xla_force_host_platform_device_count",
    "xla_detailed_logging",
    "xla_enable_dumping",
    "xla_tpu_sdc_checker_",
)


@dataclass(frozen=True)
class KeyInputs:
    """Everything that decides whether a stored executable may serve a compilation."""

    hlo: bytes  # module bytecode with debug info stripped
    compile_options: bytes  # serialized CompileOptionsProto, debug-only fields cleared
    jaxlib_version: str
    platform: str
    platform_version: str
    device_kinds: tuple[str, ...]
    topology: str  # topology fingerprint, or "" where the backend has none
    xla_flags: tuple[str, ...]  # already filtered and sorted: see codegen_flags()


def cache_key(inputs: KeyInputs) -> str:
    """The hex SHA-256 that names an entry."""
    h = hashlib.sha256()
    parts: list[tuple[str, bytes]] = [
        ("format", str(FORMAT_VERSION).encode()),
        ("hlo", inputs.hlo),
        ("compile_options", inputs.compile_options),
        ("jaxlib", inputs.jaxlib_version.encode()),
        ("platform", inputs.platform.encode()),
        ("platform_version", inputs.platform_version.encode()),
        ("device_kinds", "\0".join(inputs.device_kinds).encode()),
        ("device_count", str(len(inputs.device_kinds)).encode()),
        ("topology", inputs.topology.encode()),
        ("xla_flags", "\0".join(inputs.xla_flags).encode()),
    ]
    for name, value in parts:
        h.update(name.encode())
        h.update(len(value).to_bytes(8, "big"))
        h.update(value)
    return h.hexdigest()


def affects_codegen(flag_name: str) -> bool:
    """Whether an XLA flag or DebugOptions field (with or without leading --) matters."""
    name = flag_name.lstrip("-").split("=", 1)[0]
    return not name.startswith(NON_CODEGEN_FLAG_PREFIXES)


def codegen_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """Keep the flags that affect code generation, in a canonical order."""
    return tuple(sorted({f.strip() for f in flags if f.strip() and affects_codegen(f)}))


def is_valid_key(key: str) -> bool:
    """Whether `key` is a well-formed cache key (64 lowercase hex digits, nothing more)."""
    return is_sha256_hex(key)
