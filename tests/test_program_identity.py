"""The key's program part: one digest per program, whatever JAX names its private functions.

The key's ``hlo`` component is the SHA-256 of the module's canonical text
(`jax_portable.canonical_text`): MLIR's generic form without debug information, private
functions renamed by order of appearance. jax 0.9.2 names them ``@log_softmax_68``, 0.10.2
``@log_softmax_1``: the same program must give the same digest; any other difference must
not.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlacache import jax_bridge, jax_portable
from xlacache.key import program_component

MODULE = """
module @jit_step {{
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = call @{first}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = call @{second}(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
  func.func private @{first}(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = stablehlo.{op} %arg0, %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }}
  func.func private @{second}(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = stablehlo.constant dense<{constant}> : tensor<4xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }}
}}
"""
NAMED_BY_0_9 = {"first": "log_softmax_68", "second": "_where_107"}
NAMED_BY_0_10 = {"first": "log_softmax_0", "second": "_where_1"}


def module(first="log_softmax_68", second="_where_107", op="multiply", constant="1.0"):
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    text = MODULE.format(first=first, second=second, op=op, constant=constant)
    with mlir.make_ir_context():
        return ir.Module.parse(text)


def key_of(computation) -> str:
    """The key a live process gives `computation` compiled on one device."""
    from jax._src import compiler, xla_bridge

    backend = xla_bridge.get_backend()
    devices = np.array(jax.devices()[:1], dtype=object)
    options = compiler.get_compile_options(1, 1, backend=backend)
    return jax_bridge.identity(backend, computation, devices, options).key


def test_private_function_names_do_not_change_the_program_digest():
    by_0_9, by_0_10 = module(**NAMED_BY_0_9), module(**NAMED_BY_0_10)
    assert jax_portable.canonical_text(by_0_9) == jax_portable.canonical_text(by_0_10)
    assert key_of(by_0_9) == key_of(by_0_10)
    assert "log_softmax_68" in str(by_0_9)  # the module itself is left as it was


@pytest.mark.parametrize(
    "change", [{"op": "add"}, {"constant": "2.0"}, {"first": "a", "second": "b", "op": "subtract"}]
)
def test_any_other_difference_changes_the_program_digest(change):
    base = module(**NAMED_BY_0_9)
    assert key_of(module(**{**NAMED_BY_0_9, **change})) != key_of(base)


def test_a_public_function_with_a_canonical_name_is_kept_apart():
    """Renaming never makes two functions one: the canonical names avoid every kept name."""
    clash = module(first="xlacache.p0", second="xlacache.p1")
    text = jax_portable.canonical_text(clash).decode()
    assert text.count('sym_name = "xlacache.p0"') == 1
    public = MODULE.replace("func.func private @{second}", "func.func public @{second}")
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        kept = ir.Module.parse(public.format(first="f", second="xlacache.p0", op="add",
                                             constant="1.0"))  # fmt: skip
    text = jax_portable.canonical_text(kept).decode()
    assert text.count('sym_name = "xlacache.p0"') == 1  # the public one, not renamed
    assert '"xlacache.p_0"' in text  # the private one, named around it


def test_the_canonical_text_parses_back_to_itself():
    text = jax_portable.canonical_text(module(**NAMED_BY_0_9))
    assert jax_portable.canonical_text(jax_portable.parse(text)) == text
    with pytest.raises(jax_portable.NotRebuildable, match="does not parse"):
        jax_portable.parse(text.replace(b"stablehlo.multiply", b"stablehlo.no_such_op"))


def test_a_jax_lowering_renamed_by_hand_keeps_its_key():
    """A real lowering (private functions from jnp.where, log_softmax), its private
    functions given other names as another JAX version would: the same key."""
    from jax._src.lib.mlir import ir

    def loss(x):
        return jnp.where(x > 0, jax.nn.log_softmax(x), 0.0).sum()

    lowered = jax.jit(jax.grad(loss)).lower(jnp.ones((4, 8)))
    computation = lowered.compiler_ir("stablehlo")
    with computation.context:
        renamed = computation.operation.clone()  # an operation serves as a computation
        body = renamed.regions[0].blocks[0].operations
        private = [op for op in body if jax_portable._visibility(op) == "private"]
        assert private, "expected private functions in the lowering"
        for i, op in enumerate(private):
            old = ir.StringAttr(op.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(old, f"{old}_{i + 68}", renamed)
            ir.SymbolTable.set_symbol_name(op, f"{old}_{i + 68}")
    assert str(renamed) != str(computation)
    assert key_of(renamed) == key_of(computation)
    text = jax_portable.canonical_text(computation)
    ident = jax_bridge.identity(*_args(computation))
    assert ident.components["hlo"] == program_component(text)  # what an entry keeps


def _args(computation):
    from jax._src import compiler, xla_bridge

    backend = xla_bridge.get_backend()
    devices = np.array(jax.devices()[:1], dtype=object)
    return backend, computation, devices, compiler.get_compile_options(1, 1, backend=backend)


def test_compile_options_round_trip_through_their_recipe():
    from jax._src import compiler, xla_bridge

    backend = xla_bridge.get_backend()
    devices = np.array(jax.devices()[:1], dtype=object)
    options = compiler.get_compile_options(1, 1, devices.reshape(1, 1), backend=backend)
    options.parameter_is_tupled_arguments = True
    recipe = jax_portable.options_recipe(options)
    rebuilt = jax_portable.rebuild_options(recipe, backend, devices)
    normalized = jax_bridge._normalized_options
    assert normalized(rebuilt, "cpu") == normalized(options, "cpu")
    with pytest.raises(jax_portable.NotRebuildable, match="devices"):
        jax_portable.rebuild_options({**recipe, "num_partitions": 2}, backend, devices)
