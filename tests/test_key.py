"""Cache identity: every component changes the key; nothing else does."""

import dataclasses
import json

import pytest

from tests.conftest import JAX_PROGRAM, run_json, run_python, xla_flags
from xlacache.key import KeyInputs, cache_key, codegen_flags, is_valid_key

BASE = KeyInputs(
    hlo=b"module @jit_step {}",
    compile_options=b"\x08\x01",
    jaxlib_version="0.10.2",
    platform="cpu",
    platform_version="cpu 1",
    device_kinds=("cpu",),
    topology="",
    xla_flags=("--xla_cpu_enable_fast_math=true",),
)


def test_key_is_hex_sha256_and_deterministic():
    assert is_valid_key(cache_key(BASE))
    assert cache_key(BASE) == cache_key(dataclasses.replace(BASE))


@pytest.mark.parametrize(
    "field, value",
    [
        ("hlo", b"module @jit_step { }"),
        ("compile_options", b"\x08\x02"),
        ("jaxlib_version", "0.10.3"),
        ("platform", "gpu"),
        ("platform_version", "cuda 13.0"),
        ("device_kinds", ("cpu", "cpu")),
        ("device_kinds", ("TPU v5e",)),
        ("topology", "1234"),
        ("xla_flags", ()),
    ],
)
def test_each_component_changes_the_key(field, value):
    assert cache_key(dataclasses.replace(BASE, **{field: value})) != cache_key(BASE)


def test_components_cannot_bleed_into_each_other():
    a = dataclasses.replace(BASE, platform="cp", platform_version="ucpu 1")
    b = dataclasses.replace(BASE, platform="cpu", platform_version="cpu 1")
    assert cache_key(a) != cache_key(b)


def test_format_version_is_part_of_the_key(monkeypatch):
    import xlacache.key as key_mod

    before = cache_key(BASE)
    monkeypatch.setattr(key_mod, "FORMAT_VERSION", 99)
    assert cache_key(BASE) != before


def test_flags_debug_excluded_and_order_free():
    a = codegen_flags(["--xla_b=1", "--xla_a=2", "--xla_dump_to=/tmp/x", "--xla_dump_hlo_as_text"])
    b = codegen_flags(["--xla_a=2", "--xla_b=1"])
    assert a == b == ("--xla_a=2", "--xla_b=1")
    assert codegen_flags(["--xla_force_host_platform_device_count=8"]) == ()


# --- keys of real JAX programs, computed in separate processes ---------------------

KEYS_OF = (
    JAX_PROGRAM
    + """
from xlacache.stores.local import LocalStore
print(json.dumps(sorted(i.key for i in LocalStore(sys.argv[1]).list())))
"""
)


def keys_of(tmp_path, name, program=KEYS_OF, env=None):
    return run_json(program, str(tmp_path / name), env=env)


@pytest.mark.slow
def test_same_program_same_key_across_processes_and_locations(tmp_path):
    first = keys_of(tmp_path, "a")
    assert first and all(is_valid_key(k) for k in first)
    assert keys_of(tmp_path, "b") == first  # another process, another directory


@pytest.mark.slow
def test_source_comments_and_moved_lines_do_not_change_the_key(tmp_path):
    moved = KEYS_OF.replace(
        "def step(w, x):", "\n\n# a comment moves everything down\n\ndef step(w, x):"
    )
    assert keys_of(tmp_path, "a") == keys_of(tmp_path, "b", program=moved)


@pytest.mark.slow
def test_program_change_changes_the_key(tmp_path):
    changed = KEYS_OF.replace("w - 0.1 * g", "w - 0.2 * g")
    assert set(keys_of(tmp_path, "a")) != set(keys_of(tmp_path, "b", program=changed))


@pytest.mark.slow
def test_debug_flags_do_not_change_the_key_codegen_flags_do(tmp_path):
    base = set(keys_of(tmp_path, "a"))
    dump = tmp_path / "dump"
    debug = set(
        keys_of(
            tmp_path,
            "b",
            env={"XLA_FLAGS": xla_flags(f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text")},
        )
    )
    assert debug == base
    assert dump.is_dir()  # the flag really reached XLA
    codegen = set(
        keys_of(tmp_path, "c", env={"XLA_FLAGS": xla_flags("--xla_backend_optimization_level=1")})
    )
    assert codegen.isdisjoint(base)


@pytest.mark.slow
def test_compile_options_change_the_key(tmp_path):
    program = """
import json, sys, jax, jax.numpy as jnp, xlacache
from xlacache.stores.local import LocalStore
xlacache.initialize_cache(sys.argv[1])
f = jax.jit(lambda x: jnp.sin(x) * 2)
x = jnp.ones(8)
f.lower(x).compile()
f.lower(x).compile(compiler_options={"xla_backend_optimization_level": 1})
labels = [i.label for i in LocalStore(sys.argv[1]).list()]
print(json.dumps(labels))
"""
    labels = run_json(program, str(tmp_path / "c"))
    # jax < 0.7 names a lambda's module jit__lambda_, later jit__lambda
    assert sum(label.rstrip("_") == "jit__lambda" for label in labels) == 2, labels


@pytest.mark.slow
def test_key_inputs_extracted_from_jax(tmp_path):
    proc = run_python("""
import json, jax, jax.numpy as jnp
from jax._src import compiler
from xlacache import jax_bridge
seen = {}
orig = compiler.compile_or_get_cached
def spy(backend, computation, devices, compile_options, *a, **k):
    seen["inputs"] = jax_bridge.key_inputs(backend, computation, devices, compile_options)
    return orig(backend, computation, devices, compile_options, *a, **k)
compiler.compile_or_get_cached = spy
jax.jit(lambda x: x + 1)(jnp.ones(3))
i = seen["inputs"]
d = jax.devices()[0]
print(json.dumps({"platform": i.platform, "kinds": list(i.device_kinds), "jaxlib": i.jaxlib_version,
                  "has_loc": b"loc(" in i.hlo, "hlo_len": len(i.hlo),
                  "jax_platform": d.client.platform, "jax_kind": d.device_kind}))
""")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    # the platform it runs on: cpu here, cuda on a GPU machine
    assert got["platform"] == got["jax_platform"] and got["kinds"] == [got["jax_kind"]]
    assert got["platform"] in ("cpu", "cuda", "rocm", "tpu")
    assert got["jaxlib"].startswith("0.") and got["hlo_len"] > 0


# --- named components ---------------------------------------------------------------

COMPONENT_OF = {
    "hlo": "hlo",
    "compile_options": "compile_options",
    "jaxlib_version": "jaxlib",
    "platform": "platform",
    "platform_version": "platform",
    "device_kinds": "devices",
    "topology": "devices",
    "xla_flags": "xla_flags",
}


@pytest.mark.parametrize(
    "field, value",
    [
        ("hlo", b"module @jit_step { }"),
        ("compile_options", b"\x08\x02"),
        ("jaxlib_version", "0.10.3"),
        ("platform_version", "cuda 13.0"),
        ("device_kinds", ("cpu", "cpu")),
        ("topology", "1234"),
        ("xla_flags", ()),
    ],
)
def test_each_input_changes_exactly_its_named_component(field, value):
    from xlacache.key import COMPONENTS, component_digests, key_from_components

    before = component_digests(BASE)
    after = component_digests(dataclasses.replace(BASE, **{field: value}))
    assert set(before) == set(COMPONENTS)
    assert [c for c in COMPONENTS if before[c] != after[c]] == [COMPONENT_OF[field]]
    assert key_from_components(before) == cache_key(BASE)


def test_identity_summary_is_readable():
    from xlacache.key import Identity

    ident = Identity(BASE, label="jit_step", details=lambda: {"devices": {"processes": 2}})
    assert ident.key == cache_key(BASE)
    summary = ident.summary()
    assert summary["jaxlib"] == {"version": "0.10.2"}
    assert summary["devices"] == {"count": 1, "kinds": {"cpu": 1}, "processes": 2}
    assert summary["xla_flags"] == {"flags": ["--xla_cpu_enable_fast_math=true"]}


def test_one_key_check_for_every_store_and_the_server(tmp_path):
    """`key.check_key` is the check: a directory, a bucket's object names, a server's
    client and the server itself raise its InvalidKeyError, which a server answers with
    INVALID_ARGUMENT (reason invalid_key)."""
    from xlacache.errors import ConfigError, InvalidKeyError, kind_of
    from xlacache.key import check_key
    from xlacache.protocol.status import Code, status_of
    from xlacache.stores.local import LocalStore
    from xlacache.stores.remote import GrpcStore

    try:
        from xlacache.stores.gcs import entry_name
    except ConfigError:  # no gcsfs: the [gcs] extra (make compat installs the package bare)
        entry_name = None
    good = "ab" * 32
    assert check_key(good) == good
    for bad in ("AB" * 32, "ab" * 31, "ab" * 32 + "\n", "../" + "a" * 61, "x" * 500):
        with pytest.raises(InvalidKeyError) as caught:
            check_key(bad)
        assert len(str(caught.value)) < 200 and kind_of(caught.value) == "invalid_request"
        assert status_of(caught.value) == (Code.INVALID_ARGUMENT, "invalid_key")
        with LocalStore(tmp_path / "c") as store, pytest.raises(InvalidKeyError):
            store.contains(bad)
        if entry_name is not None:
            with pytest.raises(InvalidKeyError):
                entry_name(bad)
        with GrpcStore("grpc://127.0.0.1:1", timeout=1) as remote, pytest.raises(InvalidKeyError):
            remote.get(bad)
