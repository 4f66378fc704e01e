"""What loading an executable by alias needs from JAX (internals, like `jax_bridge`).

- `environment()`: this process's part of an alias key: JAX's version and configuration,
  the device a single-device program runs on, and the ENVIRONMENT_COMPONENTS digests of the
  key a compilation on that device would get.
- `signature_of(executable)`: the parameter and result shapes of a loaded executable.
- `Program`: a loaded executable called like a compiled `jax.jit` function.
"""

from __future__ import annotations

import enum
import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xlacache import jax_bridge
from xlacache.key import KeyInputs, codegen_flags, environment_digests


class NotDescribable(Exception):
    """Something that decides a program cannot be described exactly (no alias then)."""


@dataclass(frozen=True)
class Environment:
    """This process's part of an alias key, and what a loaded alias is checked against."""

    parts: dict[str, bytes]  # alias-key parts: "frontend", "executable_devices"
    digests: dict[str, str]  # ENVIRONMENT_COMPONENTS digests for `device`
    device: Any  # the device single-device programs run on
    device_ids: list[int]  # the load context's device ids for that device


def environment() -> Environment:
    """The environment of a single-device program compiled now on JAX's default device.

    Raises NotDescribable when JAX's configuration holds a value with no exact encoding or
    names a default device (then the placement is not the runtime's to describe).
    """
    import jax
    from jax._src import config, xla_bridge
    from jax._src.lib import version_str as jaxlib_version

    if config.default_device.value is not None:
        raise NotDescribable("jax_default_device is set")
    device = jax.local_devices()[0]
    backend = xla_bridge.get_backend(device.platform)
    devices = _device_array(device)
    inputs = KeyInputs(
        hlo=b"",
        compile_options=b"",
        jaxlib_version=jaxlib_version,
        platform=backend.platform,
        platform_version=backend.platform_version,
        device_kinds=(device.device_kind,),
        topology=jax_bridge._topology(backend, devices),
        xla_flags=codegen_flags(jax_bridge._xla_flags()),
    )
    frontend = [f"jax {jax.__version__}", f"jaxlib {jaxlib_version}", f"python {sys.version}"]
    frontend += [f"{name}={_encode(value)}" for name, value in sorted(_config_values().items())]
    where = f"{device.id}/{device.process_index}/{device.device_kind}/{device.platform}"
    return Environment(
        parts={
            "frontend": hashlib.sha256("\n".join(frontend).encode()).digest(),
            "executable_devices": where.encode(),
        },
        digests=environment_digests(inputs),
        device=device,
        device_ids=[device.id],
    )


def _device_array(device: Any) -> Any:
    import numpy as np

    devices = np.empty(1, dtype=object)
    devices[0] = device
    return devices


def _config_values() -> dict[str, Any]:
    """Every JAX configuration value as this thread sees it (thread-local overrides too)."""
    import jax
    from jax._src import config

    values = dict(jax.config.values)
    for name, state in config.config_states.items():
        values[name] = state.value
    return values


def _encode(value: Any) -> str:
    """A typed, exact encoding of a configuration value (NotDescribable for anything else)."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return "f" + float.hex(value)
    if isinstance(value, str):
        return "s" + repr(value)
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_encode(v) for v in value) + ")"
    raise NotDescribable(f"a JAX configuration value of type {type(value).__qualname__}")


def signature_of(executable: Any) -> dict[str, list]:
    """``{"inputs": [[dims, dtype], ...], "outputs": [...]}`` of a loaded executable."""
    import numpy as np
    from jax._src.lib import xla_client

    module = executable.hlo_modules()[0]
    shape = xla_client.XlaComputation(module.as_serialized_hlo_module_proto()).program_shape()
    result = shape.result_shape()
    outs = result.tuple_shapes() if result.is_tuple() else [result]

    def rows(shapes: Any) -> list:
        return [[list(s.dimensions()), np.dtype(s.numpy_dtype()).name] for s in shapes]

    return {"inputs": rows(shape.parameter_shapes()), "outputs": rows(outs)}


def check_signature(executable: Any, signature: Mapping[str, Any]) -> None:
    """Raise ValueError unless the executable takes and returns what `signature` says."""
    have = signature_of(executable)
    for part in ("inputs", "outputs"):
        want = [[list(dims), str(dtype)] for dims, dtype in signature[part]]
        if have[part] != want:
            raise ValueError(f"loaded executable's {part} {have[part]} are not {want}")


class Program:
    """A loaded single-device executable, called with arrays like a compiled jit function:
    ``program(*args) -> list of jax arrays`` (host arrays are put on its device first; donated
    inputs are consumed, as with jit)."""

    def __init__(self, executable: Any, device: Any, key: str = "") -> None:
        self.executable = executable
        self.device = device
        self.key = key

    def __call__(self, *args: Any) -> list[Any]:
        import jax

        device = self.device
        bufs = [a if isinstance(a, jax.Array) else jax.device_put(a, device) for a in args]
        results = self.executable.execute_sharded(bufs)
        return [shards[0] for shards in results.disassemble_into_single_device_arrays()]
