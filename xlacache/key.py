"""Cache identity: the one place that decides what makes two compilations the same.

A key is a SHA-256 over named components, each itself a SHA-256 over its
length-prefixed parts (as JAX's cache_key.py, every component can be logged and
compared on its own, which is how `xlacache.explain` names the reason for a miss):

- ``hlo``: the program: the SHA-256 of the module's canonical text (MLIR's generic form,
  without debug/location metadata, private functions renamed by order of appearance), so
  comments or moved lines in user code do not change it, nor JAX's private function
  names or its printer's spacing (the same program lowered by jax 0.8.3 to 0.10.2 gives
  one text; `jax_portable.canonical_text`),
- ``compile_options``: with debug-only fields cleared (dump paths, cache paths),
- ``jaxlib``: the jaxlib version,
- ``platform``: platform name and version,
- ``devices``: device kinds and count, and the job's topology: every global device
  (id, process, kind), the process count and the machine, the same on every process
  of a multi-process job,
- ``xla_flags``: the XLA flags that affect code generation (dump/debug flags dropped,
  order-free),
- ``format``: xlacache's entry-format version (3; format 2 keyed the module's bytecode:
  `legacy_key`).

Nothing about where the cache lives enters the key, so entries survive moving the
cache directory, and the same program gives the same key on every machine and every
process that has the same setup. `xlacache.jax_bridge` extracts the components from
JAX objects.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from xlacache.entry import FORMAT_VERSION, is_sha256_hex
from xlacache.errors import InvalidKeyError

LEGACY_FORMAT = 2  # keys of format-2 entries: the hlo component digested stripped bytecode

# The named components of a key, in the order they are hashed.
COMPONENTS = ("format", "hlo", "compile_options", "jaxlib", "platform", "devices", "xla_flags")
# The components a process can work out without lowering its program (see alias_key).
ENVIRONMENT_COMPONENTS = ("format", "jaxlib", "platform", "devices", "xla_flags")

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

    hlo: bytes  # the SHA-256 of the module's canonical text (format 2: its stripped bytecode)
    compile_options: bytes  # serialized CompileOptionsProto, debug-only fields cleared
    jaxlib_version: str
    platform: str
    platform_version: str
    device_kinds: tuple[str, ...]
    topology: str  # process-independent description of the job's devices, or ""
    xla_flags: tuple[str, ...]  # already filtered and sorted: see codegen_flags()
    hlo_size: int = 0  # bytes of the canonical text (readable summary only)


def key_parts(
    inputs: KeyInputs, format_version: int | None = None
) -> dict[str, list[tuple[str, bytes]]]:
    """Each component's named parts, as hashed (`format_version`: FORMAT_VERSION unless given)."""
    version = FORMAT_VERSION if format_version is None else format_version
    return {
        "format": [("format", str(version).encode())],
        "hlo": [("hlo", inputs.hlo)],
        "compile_options": [("compile_options", inputs.compile_options)],
        "jaxlib": [("jaxlib", inputs.jaxlib_version.encode())],
        "platform": [
            ("platform", inputs.platform.encode()),
            ("platform_version", inputs.platform_version.encode()),
        ],
        "devices": [
            ("device_kinds", "\0".join(inputs.device_kinds).encode()),
            ("device_count", str(len(inputs.device_kinds)).encode()),
            ("topology", inputs.topology.encode()),
        ],
        "xla_flags": [("xla_flags", "\0".join(inputs.xla_flags).encode())],
    }


def _digest(parts: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for name, value in parts:
        h.update(name.encode())
        h.update(len(value).to_bytes(8, "big"))
        h.update(value)
    return h.hexdigest()


def component_digests(inputs: KeyInputs, format_version: int | None = None) -> dict[str, str]:
    """The hex SHA-256 of each named component."""
    return {name: _digest(parts) for name, parts in key_parts(inputs, format_version).items()}


def key_from_components(components: Mapping[str, str]) -> str:
    """The key that names an entry, from its component digests."""
    return _digest((name, bytes.fromhex(components[name])) for name in COMPONENTS)


def cache_key(inputs: KeyInputs) -> str:
    """The hex SHA-256 that names an entry."""
    return key_from_components(component_digests(inputs))


def program_component(text: bytes) -> str:
    """The ``hlo`` component digest of a program whose canonical text is `text` (what
    checks an entry's stored program against its key)."""
    return _digest([("hlo", hashlib.sha256(text).digest())])


def legacy_components(inputs: KeyInputs) -> dict[str, str]:
    """The components a format-2 entry of the same compilation recorded: `inputs.hlo` holds
    the module's stripped bytecode, as format 2 digested it (see `cache`'s legacy lookup)."""
    return component_digests(inputs, LEGACY_FORMAT)


def components_key_of(components: Mapping[str, str]) -> str | None:
    """The key `components` name, or None when one is missing (an entry that records none)."""
    if not all(is_sha256_hex(components.get(name)) for name in COMPONENTS):
        return None
    return key_from_components(components)


# The named parts of an alias key, in the order they are hashed; see alias_key.
ALIAS_PARTS = ("alias", "program", "lowering", "frontend", "executable_devices")
ALIAS_FORMAT = 1


def alias_key(parts: Mapping[str, bytes], environment: Mapping[str, str]) -> str:
    """The key under which an alias entry names the key of a program's executable.

    A runtime that can name its program exactly before lowering it (the lazy runtime's graph
    digest) looks the executable up by this key instead of lowering the program to compute
    the real one. So the alias key covers everything the real key depends on: `parts` give
    the program (``program``), what turns it into HLO and decides its compile options
    (``lowering``: the runtime's code, including how it calls ``jax.jit``; ``frontend``:
    JAX's version and whole configuration) and the device the executable runs on
    (``executable_devices``); `environment` holds this process's ENVIRONMENT_COMPONENTS
    digests (entry format, jaxlib, platform, devices and topology, XLA flags). An alias key
    never equals a real key: its first part is the alias format, and real keys hash
    component digests.
    """
    named = [("alias", f"xlacache-alias/{ALIAS_FORMAT}".encode())]
    named += [(name, parts[name]) for name in ALIAS_PARTS[1:]]
    named += [(f"env.{name}", bytes.fromhex(environment[name])) for name in ENVIRONMENT_COMPONENTS]
    return _digest(named)


def environment_digests(inputs: KeyInputs) -> dict[str, str]:
    """The ENVIRONMENT_COMPONENTS digests of `inputs` (its hlo and options are not read)."""
    parts = key_parts(inputs)
    return {name: _digest(parts[name]) for name in ENVIRONMENT_COMPONENTS}


def summarize(inputs: KeyInputs) -> dict[str, dict]:
    """What people can read of each component (a digest alone says only 'differs')."""
    return {
        "format": {"version": FORMAT_VERSION},
        "hlo": {"bytes": inputs.hlo_size or len(inputs.hlo)},
        "compile_options": {},
        "jaxlib": {"version": inputs.jaxlib_version},
        "platform": {"name": inputs.platform, "version": inputs.platform_version},
        "devices": {"count": len(inputs.device_kinds), "kinds": dict(Counter(inputs.device_kinds))},
        "xla_flags": {"flags": list(inputs.xla_flags)},
    }


@dataclass(frozen=True, eq=False)
class Identity:
    """A key with its named components: what an entry header records and a miss explains.

    The summary and the module text cost more than the key, so they are computed only
    when an entry is written or a miss explained (`details` and `module_text` supply
    what the backend knows beyond KeyInputs, e.g. readable compile options). `program`
    gives the portable program an entry keeps (its canonical text, and a description of it
    with the compile options' recipe) so `xlacache rewarm` can rebuild the executable.
    """

    inputs: KeyInputs
    label: str = ""
    details: Callable[[], Mapping[str, Mapping]] | None = None
    module_text: Callable[[], str] | None = None
    program: Callable[[], tuple[bytes, dict]] | None = None
    # The key and components entry format 2 gave this compilation (the legacy lookup).
    legacy: Callable[[], tuple[str, dict[str, str]]] | None = None
    components: dict[str, str] = field(init=False)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        components = component_digests(self.inputs)
        object.__setattr__(self, "components", components)
        object.__setattr__(self, "key", key_from_components(components))

    def summary(self) -> dict[str, dict]:
        summary = summarize(self.inputs)
        for name, extra in (self.details() if self.details else {}).items():
            summary.setdefault(name, {}).update(extra)
        return summary


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


def check_key(key: str) -> str:
    """`key` if it is a well-formed cache key, else InvalidKeyError (kind "invalid_key";
    a server answers INVALID_ARGUMENT). The one key check of every store and the server."""
    if not is_valid_key(key):
        shown = key if not isinstance(key, str) or len(key) <= 80 else key[:77] + "..."
        raise InvalidKeyError(f"malformed cache key {shown!r}: expected 64 lowercase hex digits")
    return key
