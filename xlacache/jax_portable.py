"""A program as it survives a JAX upgrade: its canonical text and its compile options' recipe.

- `canonical_text(module)`: the module in MLIR's generic form, without debug information,
  its private functions renamed by order of appearance. The key's ``hlo`` component is its
  SHA-256. JAX names private functions from a process-wide counter in some versions
  (``@log_softmax_68``) and per module in others (``@log_softmax_1``), and its printer's
  pretty form changed spacing between versions; the generic form of the renamed module is
  the same text for the same program (a GPT train step lowered by jax 0.8.3, 0.9.2 and
  0.10.2 gives one text; docs/compat.md has the measurement). It is exact: MLIR prints
  every attribute and float so that it parses back to the same module.
- `parse(text)`: the module a text describes, in this JAX (for `xlacache rewarm`), checked to
  print back to the same text, so that a rebuilt executable is keyed by what this JAX
  itself makes of the program.
- `options_recipe(options)` and `rebuild_options(recipe, backend, devices)`: what decides a
  program's compile options beyond JAX's configuration (replicas, partitions, tupled
  arguments, sharding propagation, compiler options given to `jax.jit`), and the options
  this JAX builds from it (`jax._src.compiler.get_compile_options`, as `jax.jit` calls
  it), checked to give the same recipe back.

Every JAX internal used here is a row of `jax_internals.INTERNALS`.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from xlacache.jax_internals import parameters_of

PROGRAM_FORM = "mlir-generic/1"  # what an entry's program holds: `canonical_text`
_PRIVATE = "xlacache.p"  # prefix of the canonical names of private functions
_TEMPORARY = "xlacache.t"


class NotRebuildable(Exception):
    """A stored program or recipe this JAX cannot turn back into what its key needs."""


def canonical_text(computation: Any) -> bytes:
    """The canonical text of an MLIR module (see the module docstring); the module itself
    is left as it was."""
    with computation.context:
        module = computation.operation.clone()
        _rename_private_functions(module)
        out = io.BytesIO()
        module.print(
            file=out,
            binary=True,
            enable_debug_info=False,
            print_generic_op_form=True,
            assume_verified=True,
        )
    return out.getvalue()


def _rename_private_functions(module: Any) -> None:
    """Rename the module's private functions, in order of appearance, to names no other
    symbol of the module has (every reference follows), in two steps so that no name is
    ever taken twice."""
    from jax._src.lib.mlir import ir

    top = list(module.regions[0].blocks[0].operations)
    names = [_symbol(op) for op in top]
    private = [
        (op, name)
        for op, name in zip(top, names, strict=True)
        if name is not None and _visibility(op) == "private"
    ]
    if not private:
        return
    everyone = {n for n in names if n is not None}
    kept = everyone - {name for _, name in private}  # the final names avoid these only,
    final = _fresh(_PRIVATE, kept)  # so a canonical text renames to itself
    temporary = _fresh(_TEMPORARY, everyone)
    for step, prefix in enumerate((temporary, final)):
        for i, (op, name) in enumerate(private):
            old = name if step == 0 else f"{temporary}{i}"
            new = f"{prefix}{i}"
            ir.SymbolTable.replace_all_symbol_uses(old, new, module)
            ir.SymbolTable.set_symbol_name(op, new)


def _fresh(prefix: str, taken: set[str]) -> str:
    """`prefix`, lengthened until no taken name starts with it."""
    while any(name.startswith(prefix) for name in taken):
        prefix += "_"
    return prefix


def _symbol(op: Any) -> str | None:
    from jax._src.lib.mlir import ir

    attributes = op.operation.attributes
    return ir.StringAttr(attributes["sym_name"]).value if "sym_name" in attributes else None


def _visibility(op: Any) -> str:
    from jax._src.lib.mlir import ir

    attributes = op.operation.attributes
    if "sym_visibility" not in attributes:
        return "public"
    return ir.StringAttr(attributes["sym_visibility"]).value


def parse(text: bytes) -> Any:
    """The module `text` describes, in a fresh context of this JAX; NotRebuildable when it
    does not parse, or prints back otherwise (this JAX reads the program differently)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    context = mlir.make_ir_context()
    try:
        with context:
            module = ir.Module.parse(text.decode())
    except Exception as exc:  # noqa: BLE001 - the text names what does not parse
        first = " ".join(str(exc).split())[:300]
        raise NotRebuildable(f"this JAX does not parse the program: {first}") from None
    if canonical_text(module) != text:
        raise NotRebuildable("this JAX prints the program differently: it reads it otherwise")
    return module


# -- compile options -------------------------------------------------------------------

# Recipe fields read from the options, and how (`options_recipe`); the rest of the options
# are JAX's configuration and this version's defaults, which `rebuild_options` applies.
_BUILD_LISTS = (
    "allow_spmd_sharding_propagation_to_parameters",
    "allow_spmd_sharding_propagation_to_output",
    "auto_spmd_partitioning_mesh_shape",
    "auto_spmd_partitioning_mesh_ids",
)


def options_recipe(options: Any) -> dict:
    """What decides `options` (a CompileOptions JAX built for a program) beyond JAX's
    configuration, as JSON values (see `rebuild_options`)."""
    build = options.executable_build_options
    fdo = _get(build, "fdo_profile") or b""
    return {
        "num_replicas": int(options.num_replicas),
        "num_partitions": int(options.num_partitions),
        "device_assignment": bool(options.device_assignment),
        "parameter_is_tupled_arguments": bool(options.parameter_is_tupled_arguments),
        "use_spmd_partitioning": bool(build.use_spmd_partitioning),
        "use_auto_spmd_partitioning": bool(_get(build, "use_auto_spmd_partitioning")),
        **{name: [_plain(v) for v in (_get(build, name) or ())] for name in _BUILD_LISTS},
        "env_option_overrides": [[n, _plain(v)] for n, v in options.env_option_overrides],
        "fdo_profile": base64.b64encode(bytes(fdo)).decode(),
        "detailed_logging": bool(build.debug_options.xla_detailed_logging),
    }


def rebuild_options(recipe: dict, backend: Any, devices: Any) -> Any:
    """The compile options this JAX builds for a program of `recipe` on `devices` (the
    program's devices, in order, as a numpy array): `get_compile_options` with the
    recipe's arguments, then the fields `jax.jit` sets after it. NotRebuildable when this
    JAX cannot build them (a parameter it lacks, or options that give another recipe)."""
    from jax._src import compiler

    replicas, partitions = recipe["num_replicas"], recipe["num_partitions"]
    if devices.size != replicas * partitions:
        raise NotRebuildable(f"{devices.size} devices for {replicas}x{partitions} programs")
    accepted = set(parameters_of(compiler.get_compile_options))
    wanted = {
        "num_replicas": replicas,
        "num_partitions": partitions,
        "device_assignment": (
            devices.reshape((replicas, partitions)) if recipe["device_assignment"] else None
        ),
        "use_spmd_partitioning": recipe["use_spmd_partitioning"],
        "use_auto_spmd_partitioning": recipe["use_auto_spmd_partitioning"],
        "env_options_overrides": dict(recipe["env_option_overrides"]) or None,
        "fdo_profile": base64.b64decode(recipe["fdo_profile"]) or None,
        "detailed_logging": recipe["detailed_logging"],
        "backend": backend,
    }
    try:
        options = compiler.get_compile_options(
            **{name: value for name, value in wanted.items() if name in accepted}
        )
        build = options.executable_build_options
        options.parameter_is_tupled_arguments = recipe["parameter_is_tupled_arguments"]
        for name in _BUILD_LISTS:
            if recipe[name]:
                setattr(build, name, list(recipe[name]))
    except Exception as exc:  # noqa: BLE001 - named in the report
        raise NotRebuildable(f"this JAX cannot build the compile options: {exc}") from None
    rebuilt = options_recipe(options)
    if rebuilt != recipe:
        differ = sorted(name for name in recipe if rebuilt.get(name) != recipe[name])
        raise NotRebuildable(f"this JAX builds other compile options ({', '.join(differ)})")
    return options


def _get(obj: Any, name: str) -> Any:
    """A field the bindings of some versions lack or cannot convert: None."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def _plain(value: Any) -> Any:
    """A JSON value of an option (bool, int, float, str)."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)
