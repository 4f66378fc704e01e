"""What people read of a JAX compilation (explain, diff, entry summaries): the compile
options' fields, the job's shape, the module as text. JAX internals, as `jax_bridge`."""

from __future__ import annotations

import json

from xlacache.key import KeyInputs, affects_codegen


def details(inputs: KeyInputs) -> dict[str, dict]:
    """Readable key details beyond KeyInputs: compile options fields, job shape."""
    job = json.loads(inputs.topology) if inputs.topology else {}
    return {
        "compile_options": _options_summary(inputs.compile_options),
        "devices": {
            "processes": job.get("processes", 1),
            "global_devices": len(job.get("devices", ())),
        },
    }


_OPTION_FIELDS = (
    "num_replicas",
    "num_partitions",
    "parameter_is_tupled_arguments",
    "compile_portable_executable",
    "profile_version",
    "device_assignment",
)
_BUILD_FIELDS = (
    "num_replicas",
    "num_partitions",
    "use_spmd_partitioning",
    "use_auto_spmd_partitioning",
    "use_shardy_partitioner",
    "allow_spmd_sharding_propagation_to_output",
    "allow_spmd_sharding_propagation_to_parameters",
    "auto_spmd_partitioning_mesh_shape",
    "auto_spmd_partitioning_mesh_ids",
    "optimization_level",
    "memory_fitting_level",
    "exec_time_optimization_effort",
    "memory_fitting_effort",
    "fdo_profile",
    "result_layout",
)
_MAX_SHOWN = 200


def _readable(value):
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, bytes):
        return f"{len(value)} bytes" if value else ""
    text = str(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _options_summary(serialized: bytes) -> dict:
    """The compile options' fields people can read (XLA_FLAGS reach the debug options)."""
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions.ParseFromString(serialized)
    build = options.executable_build_options
    fields = {name: _readable(_field(options, name)) for name in _OPTION_FIELDS}
    fields.update({f"build.{n}": _readable(_field(build, n)) for n in _BUILD_FIELDS})
    fields["env_option_overrides"] = [f"{n}={v}" for n, v in options.env_option_overrides]
    for name, value in _debug_fields(build.debug_options).items():
        if affects_codegen(name):
            fields[f"debug.{name}"] = _readable(value)
    return fields


def _field(obj, name: str):
    """A field the bindings may lack or fail to convert (jaxlib 0.6's effort enums): None."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def _debug_fields(debug) -> dict:
    values = {}
    for name in dir(debug):
        if name.startswith("xla_"):
            try:
                values[name] = getattr(debug, name)
            except Exception:  # noqa: BLE001 - a field the bindings cannot read
                continue
    return values


def module_text(computation) -> str:
    """The module as text, debug info stripped and large constants elided."""
    from jax._src.lib.mlir import passmanager

    with computation.context:
        module = computation.operation.clone()
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module)
        return module.get_asm(enable_debug_info=False, large_elements_limit=32)
