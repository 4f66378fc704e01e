"""What loading an executable by alias needs from JAX (internals, like `jax_bridge`).

- `environment(devices)`: this process's part of an alias key: JAX's version and
  configuration, the devices the program runs on (by default the one a single-device
  program runs on), and the ENVIRONMENT_COMPONENTS digests of the key a compilation on those
  devices would get.
- `signature_of(executable)`: the parameter and result shapes of a loaded executable.
- `Program`: a loaded executable called like a compiled `jax.jit` function.
- `placements_of(compiled)`, `shardings_from(record)`, `check_placements`, `ShardedProgram`:
  the same for a program over several devices (SPMD, a mesh across processes): its inputs'
  and outputs' shardings as JSON, rebuilt and checked against a loaded executable.
"""

from __future__ import annotations

import enum
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xlacache import jax_bridge


class NotDescribable(Exception):
    """Something that decides a program cannot be described exactly (no alias then)."""


@dataclass(frozen=True)
class Environment:
    """This process's part of an alias key, and what a loaded alias is checked against."""

    parts: dict[str, bytes]  # alias-key parts: "frontend", "executable_devices"
    digests: dict[str, str]  # ENVIRONMENT_COMPONENTS digests for `device`
    device: Any  # the device single-device programs run on (else the program's first)
    device_ids: list[int]  # the load context's device ids: the program's devices


def environment(devices: Sequence[Any] | None = None) -> Environment:
    """The environment of a program compiled now on ``devices`` (its device assignment, in
    order; by default JAX's default device, for a single-device program).

    Raises NotDescribable when JAX's configuration holds a value with no exact encoding or
    names a default device (then the placement is not the runtime's to describe).
    """
    import jax
    from jax._src import config, xla_bridge
    from jax._src.lib import version_str as jaxlib_version

    if config.default_device.value is not None:
        raise NotDescribable("jax_default_device is set")
    if not devices:
        devices = (jax.local_devices()[0],)
    device = devices[0]
    backend = xla_bridge.get_backend(device.platform)
    frontend = [f"jax {jax.__version__}", f"jaxlib {jaxlib_version}", f"python {sys.version}"]
    frontend += [f"{name}={_encode(value)}" for name, value in sorted(_config_values().items())]
    where = ";".join(f"{d.id}/{d.process_index}/{d.device_kind}/{d.platform}" for d in devices)
    return Environment(
        parts={
            "frontend": hashlib.sha256("\n".join(frontend).encode()).digest(),
            "executable_devices": where.encode(),
        },
        digests=jax_bridge.environment_of(backend, _device_array(devices)),
        device=device,
        device_ids=[d.id for d in devices],
    )


def _device_array(devices: Sequence[Any]) -> Any:
    import numpy as np

    array = np.empty(len(devices), dtype=object)
    array[:] = list(devices)
    return array


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
        # by whether an input was committed: native result handlers, one per result, built at
        # the first call (later calls wrap results as jit does, with no Python per result)
        self._handlers: dict[bool, list] = {}

    def __call__(self, *args: Any) -> list[Any]:
        import jax

        device = self.device
        committed = False
        bufs = []
        for a in args:
            if isinstance(a, jax.Array):
                committed = committed or a.committed
                bufs.append(a)
            else:
                bufs.append(jax.device_put(a, device))
        results = self.executable.execute_sharded(bufs)
        handlers = self._handlers.get(committed)
        if handlers is not None:
            return results.consume_with_handlers(handlers)
        outs = [shards[0] for shards in results.disassemble_into_single_device_arrays()]
        handlers = self._handlers[committed] = [_result_handler(o, committed) for o in outs]
        return [h([o]) for h, o in zip(handlers, outs, strict=True)]


def _result_handler(a: Any, committed: bool) -> Any:
    """JAX's native handler wrapping a result buffer shaped and placed as ``a``: committed as
    a jit result is (uncommitted when no input was, so that a later multi-device program may
    place it as it would place the jit's)."""
    from jax._src.lib import xla_client

    return xla_client.array_result_handler(
        a.aval, a.sharding, committed=committed, _skip_checks=True
    )


# Programs over several devices: their placements, described exactly as JSON.


def placements_of(compiled: Any) -> dict | None:
    """``{"inputs": [...], "outputs": [...]}``: each parameter's and result's sharding of a
    compiled jit program (``jax.stages.Compiled``); None for a single-device program.
    Raises NotDescribable for a sharding that is not a mesh sharding."""
    ins = list(compiled.input_shardings[0])
    outs = list(compiled.output_shardings)
    if all(len(s.device_set) == 1 for s in (*ins, *outs)):
        return None
    return {"inputs": [_describe(s) for s in ins], "outputs": [_describe(s) for s in outs]}


def _describe(sharding: Any) -> dict:
    from jax.sharding import Mesh, NamedSharding

    if not isinstance(sharding, NamedSharding) or not isinstance(sharding.mesh, Mesh):
        raise NotDescribable(f"a {type(sharding).__name__} placement")
    spec = sharding.spec
    if spec.unreduced or spec.reduced:
        raise NotDescribable("an unreduced or reduced partition spec")
    mesh = sharding.mesh
    return {
        "ids": [d.id for d in mesh.devices.flat],
        "shape": list(mesh.devices.shape),
        "names": [str(n) for n in mesh.axis_names],
        "types": [t.name for t in mesh.axis_types],
        "spec": [_spec_entry(e) for e in spec],
        "memory": sharding.memory_kind,
    }


def _spec_entry(e: Any) -> Any:
    if e is None or isinstance(e, str):
        return e
    if isinstance(e, tuple) and all(isinstance(a, str) for a in e):
        return list(e)
    raise NotDescribable(f"partition spec entry {e!r}")


def shardings_from(placements: Mapping[str, Any]) -> tuple[list, list]:
    """The input and output shardings a ``placements_of`` record describes, on this job's
    devices (ValueError if it names a device this job lacks)."""
    import jax

    by_id = {d.id: d for d in jax.devices()}
    meshes: dict[str, Any] = {}

    def build(desc: Mapping[str, Any]) -> Any:
        import numpy as np
        from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

        mesh_key = json.dumps([desc["ids"], desc["shape"], desc["names"], desc["types"]])
        mesh = meshes.get(mesh_key)
        if mesh is None:
            missing = [i for i in desc["ids"] if i not in by_id]
            if missing:
                raise ValueError(f"the program runs on devices {missing} this job lacks")
            devices = np.asarray([by_id[i] for i in desc["ids"]], dtype=object)
            mesh = meshes[mesh_key] = Mesh(
                devices.reshape(desc["shape"]),
                tuple(desc["names"]),
                axis_types=tuple(AxisType[t] for t in desc["types"]),
            )
        spec = PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in desc["spec"]))
        return NamedSharding(mesh, spec, memory_kind=desc["memory"])

    return [build(d) for d in placements["inputs"]], [build(d) for d in placements["outputs"]]


def check_placements(
    executable: Any, signature: Mapping[str, Any], ins: Sequence[Any], outs: Sequence[Any]
) -> None:
    """Raise ValueError unless the executable takes and returns ``signature``'s (global)
    shapes placed as ``ins`` and ``outs`` say: each device's shapes and XLA's shardings."""
    from jax._src.lib import xla_client

    have = signature_of(executable)
    have_shardings = {
        "inputs": executable.get_parameter_shardings(),
        "outputs": executable.get_output_shardings(),
    }
    for part, shardings in (("inputs", ins), ("outputs", outs)):
        rows = signature[part]
        if len(rows) != len(shardings) or len(have_shardings[part] or ()) != len(rows):
            raise ValueError(f"the program's {part} are not the recorded placements")
        want = [
            [list(s.shard_shape(tuple(dims))), str(dtype)]
            for (dims, dtype), s in zip(rows, shardings, strict=True)
        ]
        if have[part] != want:
            raise ValueError(f"loaded executable's {part} {have[part]} are not {want}")
        for op, s, (dims, _) in zip(have_shardings[part], shardings, rows, strict=True):
            if xla_client.HloSharding.from_proto(op) != s._to_xla_hlo_sharding(len(dims)):
                raise ValueError(f"loaded executable's {part} are placed otherwise")


class ShardedProgram:
    """A loaded executable over several devices, called like a compiled jit function: global
    arrays (or values every process holds alike) in, global arrays placed as ``outs`` out."""

    def __init__(
        self, executable: Any, ins: Sequence[Any], outs: Sequence[Any], shapes: Sequence[tuple]
    ) -> None:
        self.executable = executable
        self.ins, self.outs, self.shapes = list(ins), list(outs), [tuple(s) for s in shapes]

    def __call__(self, *args: Any) -> list[Any]:
        import jax

        bufs = [_placed(a, s) for a, s in zip(args, self.ins, strict=True)]
        results = self.executable.execute_sharded(bufs)
        parts = results.disassemble_into_single_device_arrays()
        return [
            jax.make_array_from_single_device_arrays(shape, s, shards)
            for shape, s, shards in zip(self.shapes, self.outs, parts, strict=True)
        ]


def _placed(a: Any, sharding: Any) -> Any:
    """``a`` as the program takes it: as it is when so placed; a value every process holds
    alike (host data, uncommitted one-device data) is placed; other placements are refused."""
    import jax
    import numpy as np

    if isinstance(a, jax.Array):
        if a.sharding == sharding or a.sharding.is_equivalent_to(sharding, a.ndim):
            return a
        if a.committed:
            raise ValueError(f"an input placed as {a.sharding} for a program taking {sharding}")
    if sharding.is_fully_addressable:
        return jax.device_put(a, sharding)
    host = np.asarray(a)  # this process's shards of it (as jit places such inputs)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
