"""The cache's uses of JAX internals (with `jax_programs`, which the alias path uses).

xlacache wraps `jax._src.compiler.compile_or_get_cached`, the function through which
every `jax.jit` compilation passes (pxla calls it as a module attribute). The
wrapper computes xlacache's own key (`xlacache.key`) rather than JAX's, whose key
embeds the cache directory, then asks `CompilationCache.get_or_compile`.
Every internal used is a row of `jax_internals.INTERNALS`, its arguments bound by name;
`tests/test_jax_internals.py` fails loudly, row by row, when JAX moves one (the lazy
runtime's `lazy/distributed/env.py` uses are rows too).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import hashlib
import inspect
import io
import json
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from xlacache import counters, jax_portable, jax_readable
from xlacache.cache import CompilationCache
from xlacache.errors import ForeignEntryError
from xlacache.jax_internals import INTERNALS, check_compatible, parameters_of  # noqa: F401
from xlacache.key import (
    ENVIRONMENT_COMPONENTS,
    Identity,
    KeyInputs,
    affects_codegen,
    codegen_flags,
    environment_digests,
    key_from_components,
    legacy_components,
)

_original = None
_signature: inspect.Signature | None = None  # the original compile_or_get_cached's
_cache: CompilationCache | None = None
_captures = threading.local()  # see capture()
_topologies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # backend -> topology


def _compiler():
    from jax._src import compiler

    return compiler


def install(cache: CompilationCache, prefetch: int = 0) -> None:
    """Send every JAX compilation of this process through `cache`.

    With prefetch > 0, up to that many of the most recently used executables are
    loaded in the background as soon as JAX's backend is up.
    """
    global _original, _signature, _cache
    try:
        check_compatible()
    except Exception as exc:  # noqa: BLE001 - an incompatible JAX compiles uncached
        counters.record_error("jax_integration", exc)
        return
    _cache = cache
    compiler = _compiler()
    if _original is None:
        _original = compiler.compile_or_get_cached
        _signature = inspect.signature(_original)
        _compile_or_get_cached.__wrapped__ = _original  # type: ignore[attr-defined]
        compiler.compile_or_get_cached = _compile_or_get_cached  # (INTERNALS reads through)
    if prefetch > 0:
        cache.prefetch(load_entry, ready=_backend_ready, limit=prefetch)


def uninstall() -> None:
    global _original, _signature, _cache
    if _original is not None:
        _compiler().compile_or_get_cached = _original
    _original = None
    _signature = None
    _compile_or_get_cached.__dict__.pop("__wrapped__", None)
    _cache = None


def process_index() -> int | None:
    """This process's index in a running jax.distributed job, or None (no job: not
    initialized, or JAX not even imported yet). Starts no backend."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import distributed

        state = distributed.global_state
        return None if state.client is None else int(state.process_id)
    except Exception:  # noqa: BLE001 - JAX moved it: the rank comes from the environment
        return None


def key_inputs(
    backend, computation, devices, compile_options, text: bytes | None = None
) -> KeyInputs:
    """The components of xlacache's key, taken from JAX's compile arguments (`text`: the
    module's canonical text, if already made)."""
    if text is None:
        text = jax_portable.canonical_text(computation)
    return _inputs(
        backend,
        devices,
        hlo=hashlib.sha256(text).digest(),
        hlo_size=len(text),
        compile_options=_normalized_options(compile_options, backend.platform),
    )


def _inputs(backend, devices, **program) -> KeyInputs:
    from jax._src.lib import version_str as jaxlib_version

    return KeyInputs(
        jaxlib_version=jaxlib_version,
        platform=backend.platform,
        platform_version=backend.platform_version,
        device_kinds=tuple(d.device_kind for d in devices.flat),
        topology=topology_of(backend, devices),
        xla_flags=codegen_flags(xla_flags_in_env()),
        **program,
    )


def environment_of(backend, devices) -> dict[str, str]:
    """This process's ENVIRONMENT_COMPONENTS digests for a program on `devices` (a numpy
    array of the backend's devices): what an entry's header must record to be loaded here."""
    return environment_digests(_inputs(backend, devices, hlo=b"", compile_options=b""))


def legacy_key(inputs: KeyInputs, computation) -> tuple[str, dict[str, str]]:
    """The key and components entry format 2 gave this compilation (its key digested the
    module's stripped bytecode; every other component is the same)."""
    components = legacy_components(replace(inputs, hlo=_stripped_bytecode(computation)))
    return key_from_components(components), components


def identity(backend, computation, devices, compile_options) -> Identity:
    """xlacache's key for a JAX compilation, with its named components and, on demand,
    readable details (compile options, processes), the stripped module text, and the
    portable program an entry keeps (canonical text, compile options' recipe)."""
    text = jax_portable.canonical_text(computation)
    inputs = key_inputs(backend, computation, devices, compile_options, text=text)
    return Identity(
        inputs,
        label=module_name(computation),
        details=lambda: jax_readable.details(inputs),
        module_text=lambda: jax_readable.module_text(computation),
        program=lambda: (text, program_description(compile_options)),
        legacy=lambda: legacy_key(inputs, computation),
    )


def program_description(compile_options) -> dict:
    """The header's `program` field: the program's form and its compile options' recipe."""
    return {
        "form": jax_portable.PROGRAM_FORM,
        "options": jax_portable.options_recipe(compile_options),
    }


def module_name(computation) -> str:
    from jax._src.lib.mlir import ir

    return ir.StringAttr(computation.operation.attributes["sym_name"]).value


def _compile_or_get_cached(*args: Any, **kwargs: Any) -> Any:
    """JAX's compile_or_get_cached through the cache; its arguments are bound by name
    (`INTERNALS` lists the ones used), whatever their order in this JAX."""
    original = _original
    cache = _cache

    def compile_():
        return original(*args, **kwargs)

    if original is None or _signature is None:  # uninstalled meanwhile
        return _compiler().compile_or_get_cached(*args, **kwargs)
    bound = _signature.bind(*args, **kwargs)
    bound.apply_defaults()
    named = bound.arguments
    backend, computation = named["backend"], named["computation"]
    devices, compile_options = named["devices"], named["compile_options"]
    host_callbacks, executable_devices = named["host_callbacks"], named["executable_devices"]
    if cache is None or host_callbacks or not _serializable(backend):
        return compile_()
    try:
        ident = identity(backend, computation, devices, compile_options)
    except Exception as exc:  # noqa: BLE001
        counters.record_error("key", exc)
        return compile_()
    result, outcome = cache.get_or_compile_outcome(
        ident.key,
        compile=compile_,
        load=lambda payload: _deserialize(backend, payload, executable_devices, compile_options),
        serialize=backend.serialize_executable,
        label=ident.label,
        platform=backend.platform,
        context=load_context(compile_options, executable_devices),
        identity=ident,
    )
    captured = getattr(_captures, "into", None)
    if captured is not None:
        captured.append((ident, outcome))
    return result


@contextlib.contextmanager
def capture() -> Iterator[list]:
    """Collect ``(Identity, outcome)`` for each compilation this thread sends through the
    cache inside the block (outcome: `cache.Outcome`, "hit", "stored" or "compiled")."""
    outer = getattr(_captures, "into", None)
    captured: list = []
    _captures.into = captured
    try:
        yield captured
    finally:
        _captures.into = outer
        if outer is not None:
            outer.extend(captured)


def load_context(compile_options, executable_devices) -> dict:
    """What deserializing needs besides the payload, as JSON-able values."""
    return {
        "compile_options": base64.b64encode(compile_options.SerializeAsString()).decode(),
        "device_ids": [d.id for d in executable_devices],
    }


def load_entry(found):
    """Load an entry from its stored context alone (prefetch, aliases): only an entry whose
    header records this process's environment for its devices (entry format, jaxlib,
    platform, devices and topology, XLA flags), checked before any byte reaches XLA
    (ForeignEntryError otherwise: another jaxlib's executable can crash XLA's loader)."""
    from jax._src.lib import xla_client

    header = found.header
    backend, devices = entry_devices(header)
    check_environment(header, environment_of(backend, devices))
    options = xla_client.CompileOptions.ParseFromString(
        base64.b64decode(header.context["compile_options"])
    )
    executable_devices = xla_client.DeviceList(tuple(devices.flat))
    return _deserialize(backend, found.payload(), executable_devices, options)


def entry_devices(header):
    """(backend, devices as a numpy array) an entry's stored context names, in this process;
    ForeignEntryError when this process has no such backend or devices."""
    import numpy as np
    from jax._src import xla_bridge

    ids = header.context.get("device_ids")
    if not isinstance(ids, list) or not ids:
        raise ForeignEntryError(f"entry {header.key[:12]} records no devices to load on")
    try:
        backend = xla_bridge.get_backend(header.platform or None)
    except Exception as exc:  # noqa: BLE001 - no such platform here
        where = f"entry {header.key[:12]} is for {header.platform}"
        raise ForeignEntryError(f"{where}: {exc}") from None
    by_id = {d.id: d for d in backend.devices()}  # global ids, as in a multi-process job
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ForeignEntryError(f"entry {header.key[:12]} runs on devices {missing} absent here")
    devices = np.empty(len(ids), dtype=object)
    devices[:] = [by_id[i] for i in ids]
    return backend, devices


def check_environment(header, environment: dict[str, str]) -> None:
    """ForeignEntryError unless `header` records `environment` (ENVIRONMENT_COMPONENTS)."""
    differ = [
        name for name in ENVIRONMENT_COMPONENTS if header.components.get(name) != environment[name]
    ]
    if differ:
        wrote = header.jaxlib or "an unknown jaxlib"
        raise ForeignEntryError(
            f"entry {header.key[:12]} ({header.label or '?'}, jaxlib {wrote}) was compiled "
            f"for another {', '.join(differ)}: not loaded"
        )


def compile_module(backend, module, devices, compile_options):
    """Compile `module` as a `jax.jit` call on `devices` (a numpy array) does, with JAX's own
    compile_or_get_cached (never through an installed cache): `xlacache rewarm`."""
    from jax._src.lib import xla_client

    compile_ = _original if _original is not None else _compiler().compile_or_get_cached
    return compile_(
        backend=backend,
        computation=module,
        devices=devices,
        compile_options=compile_options,
        host_callbacks=[],
        executable_devices=xla_client.DeviceList(tuple(devices.flat)),
    )


def _deserialize(backend, payload: bytes, executable_devices, compile_options):
    return backend.deserialize_executable(
        payload, executable_devices=executable_devices, compile_options=compile_options
    )


def _backend_ready() -> bool:
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def _serializable(backend) -> bool:
    return getattr(backend, "supports_executable_serialization", True)


def _stripped_bytecode(computation) -> bytes:
    from jax._src.lib.mlir import passmanager

    with computation.context:
        module = computation.operation.clone()
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module)
        out = io.BytesIO()
        module.write_bytecode(file=out)
    return out.getvalue()


def _normalized_options(compile_options, platform: str) -> bytes:
    options = copy.deepcopy(compile_options)
    debug = options.executable_build_options.debug_options
    for name in dir(debug):
        if name.startswith("xla_") and not affects_codegen(name):
            value = getattr(debug, name)
            if isinstance(value, (bool, int, float, str)):
                setattr(debug, name, type(value)())
    options.env_option_overrides = [
        (name, value) for name, value in options.env_option_overrides if affects_codegen(name)
    ]
    da = options.device_assignment
    if da and (platform == "gpu" or da.replica_count() * da.computation_count() == 1):
        # Multi-process GPU jobs see different physical ids for the same program, and a
        # single-device program is one program whichever device runs it (each process of a
        # CPU job runs its own programs on its own device: 0, 2048, 4096...). An executable
        # is always loaded onto the requesting call's devices.
        import numpy as np
        from jax._src.lib import xla_client

        ids = np.arange(da.replica_count() * da.computation_count())
        options.device_assignment = xla_client.DeviceAssignment.create(
            ids.reshape([da.replica_count(), da.computation_count()])
        )
    return options.SerializeAsString()


def topology_of(backend, devices) -> str:
    """The job's topology, the same on every process of a multi-process job.

    Every global device (id, process, kind, and chip coordinates where the platform has
    them), the process count, and the machine. XLA's own topology fingerprint describes
    only the local process's devices on CPU, so there the machine is the fingerprint of
    a one-device CPU topology (the host's code-generation target); elsewhere it is the
    fingerprint of the computation's devices' topology, as before.
    """
    try:
        return _topologies[backend]
    except (KeyError, TypeError):
        pass
    rows = []
    for d in sorted(backend.devices(), key=lambda d: d.id):
        row = [d.id, d.process_index, d.device_kind]
        row += [[name, getattr(d, name)] for name in _CHIP_ATTRIBUTES if hasattr(d, name)]
        rows.append(row)
    description = {
        "processes": len({row[1] for row in rows}),
        "devices": rows,
        "machine": _machine(backend, devices),
    }
    topology = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    with contextlib.suppress(TypeError):  # not weak-referenceable: computed each time
        _topologies[backend] = topology
    return topology


_CHIP_ATTRIBUTES = ("coords", "core_on_chip", "slice_index")


def _machine(backend, devices) -> str:
    from jax._src.lib import xla_client

    if backend.platform == "cpu":
        with contextlib.suppress(Exception):  # else the local topology: exact, per process
            return _cpu_machine()
    try:
        return _fingerprint(xla_client.get_topology_for_devices(list(devices.flat)))
    except Exception:  # noqa: BLE001 - backends without topology: the device list serves
        return ""


@functools.cache
def _cpu_machine() -> str:
    from jax._src.lib import xla_client

    client = xla_client.make_cpu_client(num_devices=1)
    return _fingerprint(xla_client.get_topology_for_devices(client.devices()))


def _fingerprint(topology) -> str:
    """XLA's fingerprint of a topology; before jaxlib 0.7 (no `fingerprint`), the SHA-256
    of its serialized description (on CPU: the code-generation target and its features)."""
    if hasattr(topology, "fingerprint"):
        return str(topology.fingerprint())
    return "sha256:" + hashlib.sha256(topology.serialize()).hexdigest()


def xla_flags_in_env() -> list[str]:
    flags = os.environ.get("XLA_FLAGS", "").split()
    flags += os.environ.get("LIBTPU_INIT_ARGS", "").split()
    flags += [arg for arg in sys.argv if arg.startswith("--xla")]
    return flags
