"""Tripwires: one per JAX internal the cache uses (`jax_internals.INTERNALS`).

Each fails naming the JAX version and what moved, so a JAX upgrade that breaks the cache
says where before any program runs (supported: docs/compat.md).
"""

import jax
import pytest

from xlacache import jax_bridge, jax_internals, jax_readable
from xlacache._version import JAX_MIN, LAZY_MIN_JAX, jax_too_old


@pytest.mark.parametrize("internal", jax_internals.INTERNALS, ids=lambda i: i.name)
def test_internal_is_there_with_the_parameters_we_bind(internal):
    problem = internal.problem()
    assert problem is None, f"jax {jax.__version__}, jaxlib {jax.lib.__version__}: {problem}"


def test_a_missing_parameter_or_internal_is_named():
    gone = jax_internals.Internal("jax._src.compiler", "compile_or_get_cached", ("no_such",))
    assert "lacking ['no_such']" in gone.problem()
    assert "is gone" in jax_internals.Internal("jax._src.compiler", "no_such_thing").problem()


def test_pxla_calls_compile_or_get_cached_through_the_module():
    from jax._src.interpreters import pxla

    with open(pxla.__file__) as f:
        source = f.read()
    assert "compiler.compile_or_get_cached(" in source, (
        f"jax {jax.__version__}: pxla no longer calls compiler.compile_or_get_cached"
    )


def test_an_executable_round_trips_with_arguments_bound_by_name():
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    backend = xla_bridge.get_backend()
    compiled = jax.jit(lambda x: x * 3 + 1).lower(2.0).compile()
    payload = backend.serialize_executable(compiled.runtime_executable())
    devices = xla_client.DeviceList(tuple(jax.devices()[:1]))
    loaded = jax_bridge._deserialize(backend, payload, devices, xla_client.CompileOptions())
    out = loaded.execute_sharded([jax.device_put(2.0, jax.devices()[0])])
    assert float(out.disassemble_into_single_device_arrays()[0][0]) == 7.0


def test_native_signatures_are_read_from_their_docstring():
    doc = "f(self, a: list[tuple[int, str]], b: dict = {}, /) -> int\n\nWhat it does."
    native = type("Native", (), {"__doc__": doc})()  # no signature, like nanobind's
    assert jax_bridge.parameters_of(native) == ("a", "b")


def test_key_machine_and_readable_options():
    assert jax_bridge._cpu_machine() != ""
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions()
    assert xla_client.CompileOptions.ParseFromString(options.SerializeAsString()).num_replicas == 1
    assert jax_readable._options_summary(options.SerializeAsString())["num_replicas"] == 1


def test_lazy_runtime_names_the_jax_it_needs():
    message = jax_too_old("0.6.2", LAZY_MIN_JAX, "xlacache.lazy")
    assert message is not None and "\n" not in message
    assert f"jax>={LAZY_MIN_JAX}" in message and "jax 0.6.2" in message and JAX_MIN in message
    assert jax_too_old("0.10.2", "0.10.0", "xlacache.lazy") is None
    assert jax_too_old("0.9.0.1", "0.10.0", "x") is not None
    assert jax_too_old("0.11.0.dev20270101", "0.10.0", "x") is None


def test_the_table_reads_through_our_own_wrapper(tmp_path):
    """Installed, compile_or_get_cached is xlacache's: the check still sees JAX's."""
    from jax._src import compiler

    import xlacache

    xlacache.initialize_cache(tmp_path / "c")
    assert compiler.compile_or_get_cached is jax_bridge._compile_or_get_cached
    jax_bridge.check_compatible()
    assert float(jax.jit(lambda x: x * 5)(2.0)) == 10.0
    assert xlacache.stats()["writes"] == 1


def test_the_lazy_runtimes_distributed_state_is_still_there():
    """`lazy/distributed/env.py` reads these attributes of JAX's distributed state."""
    from jax._src.distributed import global_state

    for name in ("client", "num_processes", "process_id", "coordinator_address"):
        assert hasattr(global_state, name), f"jax._src.distributed.global_state.{name} is gone"
