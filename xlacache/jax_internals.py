"""Every JAX internal the cache uses (`INTERNALS`), with the parameters it binds by name.

`jax_bridge.check_compatible` runs at install; `tests/test_jax_internals.py` keeps one
tripwire per row. Supported: jax/jaxlib 0.6.2 to 0.10.x (docs/compat.md).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Internal:
    """A JAX internal the cache uses: ``module.name`` (``Client.method`` for a method of
    a backend), with the parameters bound by name (``parameters``: each must exist)."""

    module: str
    name: str
    parameters: tuple[str, ...] = ()

    def resolve(self) -> Any:
        """The object, or AttributeError/ImportError naming what is missing."""
        target: Any = importlib.import_module(self.module)
        for part in self.name.split("."):
            target = getattr(target, part)
        return target

    def problem(self) -> str | None:
        """What is wrong with it in this JAX (None: present, with every parameter)."""
        try:
            target = self.resolve()
        except (ImportError, AttributeError) as exc:
            return f"{self.module}.{self.name} is gone ({exc})"
        if not self.parameters:
            return None
        have = parameters_of(getattr(target, "__wrapped__", target))
        missing = [p for p in self.parameters if p not in have]
        if missing:
            return f"{self.module}.{self.name} takes {have}, lacking {missing}"
        return None


_COMPILE_PARAMETERS = (
    "backend",
    "computation",
    "devices",
    "compile_options",
    "host_callbacks",
    "executable_devices",
)

# Every JAX internal the cache (this module, `jax_programs`) and the lazy runtime use, with the
# parameters each binds by name. `check_compatible` and tests/test_jax_internals.py (one tripwire
# each) read this table; supported: jax/jaxlib 0.6.2 to 0.10.x (docs/compat.md).
INTERNALS = (
    Internal("jax._src.compiler", "compile_or_get_cached", _COMPILE_PARAMETERS),
    Internal(
        "jax._src.lib",
        "xla_client.Client.deserialize_executable",
        ("serialized", "executable_devices", "compile_options"),
    ),
    Internal("jax._src.lib", "xla_client.Client.serialize_executable"),
    Internal("jax._src.lib", "xla_client.make_cpu_client", ("num_devices",)),
    Internal("jax._src.lib", "xla_client.get_topology_for_devices"),
    Internal("jax._src.lib", "xla_client.CompileOptions.ParseFromString"),
    Internal("jax._src.lib", "xla_client.DeviceAssignment.create"),
    Internal("jax._src.lib", "xla_client.DeviceList"),
    Internal("jax._src.lib", "xla_client.XlaComputation"),
    Internal("jax._src.lib", "xla_client.HloSharding.from_proto"),
    Internal("jax._src.lib", "version_str"),
    Internal("jax._src.lib.mlir", "ir.StringAttr"),
    Internal("jax._src.lib.mlir", "passmanager.PassManager.parse"),
    # the canonical program text of the key and of a stored program (`jax_portable`)
    Internal("jax._src.lib.mlir", "ir.Operation.print"),
    Internal("jax._src.lib.mlir", "ir.SymbolTable.replace_all_symbol_uses"),
    Internal("jax._src.lib.mlir", "ir.SymbolTable.set_symbol_name"),
    Internal("jax._src.lib.mlir", "ir.Module.parse"),
    Internal("jax._src.interpreters.mlir", "make_ir_context"),
    # compile options rebuilt by `xlacache rewarm` as `jax.jit` builds them
    Internal(
        "jax._src.compiler",
        "get_compile_options",
        (
            "num_replicas",
            "num_partitions",
            "device_assignment",
            "env_options_overrides",
            "fdo_profile",
            "detailed_logging",
            "backend",
        ),
    ),  # fmt: skip
    Internal("jax._src.xla_bridge", "get_backend"),
    Internal("jax._src.xla_bridge", "backends_are_initialized"),
    Internal("jax._src.distributed", "global_state"),
    Internal("jax._src.config", "default_device"),
    Internal("jax._src.config", "config_states"),
    # a loaded single-device program's results, wrapped natively as jit wraps them
    Internal(
        "jax._src.lib",
        "xla_client.array_result_handler",
        ("aval", "sharding", "committed", "_skip_checks"),
    ),
    Internal("jax._src.lib", "_jax.ExecuteResults.consume_with_handlers"),
    # where the lazy runtime puts host values and zeros (`lazy.transfer.put`, `zeros_array`)
    Internal("jax._src.interpreters.pxla", "batched_device_put", ("committed",)),
    Internal("jax._src.interpreters.pxla", "get_default_device"),
    # an int graph input of the lazy runtime, typed as the Python int it stands for
    Internal("jax._src.lax.lax", "_convert_element_type", ("weak_type",)),
)


def parameters_of(function: Any) -> tuple[str, ...]:
    """Parameter names of a Python function, or of a native one from the signature line
    nanobind writes first in its docstring (``name(self, a: T, b: T = x, /) -> R``)."""
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        pass
    line = (getattr(function, "__doc__", None) or "").split("\n", 1)[0]
    start = line.find("(")
    if start < 0:
        return ()
    names, depth, token = [], 0, ""
    for char in line[start + 1 :]:
        if char in "([" or (char == ")" and depth > 0) or char == "]":
            depth += 1 if char in "([" else -1
        elif char == ")" or (char == "," and depth == 0):
            names.append(token.split(":")[0].split("=")[0].strip())
            token = ""
            if char == ")":
                break
            continue
        token += char
    return tuple(n for n in names if n and n not in ("self", "/", "*"))


def check_compatible() -> None:
    """Raise RuntimeError naming what changed if JAX no longer has the internals we use."""
    import jax

    problems = [p for p in (i.problem() for i in INTERNALS) if p is not None]
    if problems:
        raise RuntimeError(
            f"xlacache supports jax 0.6.2 to 0.10.x; in jax {jax.__version__}: "
            + "; ".join(problems)
        )
