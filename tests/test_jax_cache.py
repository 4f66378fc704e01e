"""`initialize_cache` with real JAX programs, each run in a fresh process."""

import json

import pytest

from tests.conftest import JAX_PROGRAM, run_json
from tests.test_local_store import readonly_mount_prefix
from xlacache import entry
from xlacache.stores.local import LocalStore

pytestmark = pytest.mark.slow  # measured: most tests here take seconds


def run(cache_dir, options=None, **kw):
    return run_json(JAX_PROGRAM, str(cache_dir), json.dumps(options or {}), **kw)


def test_second_process_hits_what_the_first_compiled(tmp_path):
    cold = run(tmp_path / "c")
    assert cold["stats"]["hits"] == 0 and cold["stats"]["misses"] >= 1
    assert cold["stats"]["writes"] == cold["stats"]["misses"]
    warm = run(tmp_path / "c")
    assert warm["stats"]["misses"] == 0 and warm["stats"]["hits"] == cold["stats"]["misses"]
    assert warm["stats"]["compile_seconds_saved"] > 0
    assert warm["loss"] == cold["loss"]
    assert cold["warnings"] == warm["warnings"] == []
    labels = {i.label for i in LocalStore(tmp_path / "c").list()}
    assert "jit_step" in labels


def test_moving_the_cache_directory_keeps_every_entry(tmp_path):
    cold = run(tmp_path / "before")
    (tmp_path / "before").rename(tmp_path / "after")
    warm = run(tmp_path / "after")
    assert warm["stats"]["misses"] == 0 and warm["stats"]["hits"] == cold["stats"]["misses"]


@pytest.mark.fallback
def test_corrupt_entry_is_recompiled_and_replaced(tmp_path):
    run(tmp_path / "c")
    store = LocalStore(tmp_path / "c")
    info = next(i for i in store.list() if i.label == "jit_step")
    path = store.entry_path(info.key)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    second = run(tmp_path / "c")
    assert second["stats"]["errors"] == {"corrupt": 1}
    assert second["stats"]["misses"] == 1 and second["stats"]["writes"] == 1
    assert len(second["warnings"]) == 1 and "corrupt" in second["warnings"][0]
    entry.decode(path.read_bytes(), info.key)  # replaced by a good entry
    third = run(tmp_path / "c")
    assert third["stats"]["misses"] == 0 and third["stats"]["errors"] == {}


@pytest.mark.fallback
def test_readonly_cache_on_a_read_only_mount(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    cold = run(src)
    prefix = readonly_mount_prefix(src, dst)
    ro = run(dst, {"readonly": True}, prefix=prefix)
    assert ro["stats"]["hits"] == cold["stats"]["misses"] and ro["stats"]["writes"] == 0
    assert ro["stats"]["errors"] == {} and ro["warnings"] == []
    # Asked to write on a read-only mount: one warning, then read-only service.
    rw = run(dst, prefix=prefix)
    assert rw["stats"]["hits"] == cold["stats"]["misses"]
    assert rw["stats"]["errors"] == {"permission": 1} and len(rw["warnings"]) == 1
    assert "falling back to read-only" in rw["warnings"][0], rw["warnings"]


def test_readonly_never_writes_new_programs(tmp_path):
    run(tmp_path / "c")
    before = sorted(p.name for p in (tmp_path / "c").rglob("*.xlac"))
    program = JAX_PROGRAM.replace("0.1 * g", "0.3 * g")  # a program the cache lacks
    out = run_json(program, str(tmp_path / "c"), json.dumps({"readonly": True}))
    assert out["stats"]["misses"] >= 1 and out["stats"]["writes"] == 0
    assert sorted(p.name for p in (tmp_path / "c").rglob("*.xlac")) == before


@pytest.mark.fallback
def test_full_disk_degrades_to_compiling(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    prefix = ["unshare", "--mount", "--map-root-user", "sh", "-c",
              f'mount -t tmpfs -o size=96k tmpfs "{mnt}" && exec "$0" "$@"']  # fmt: skip
    program = JAX_PROGRAM.replace(
        "with warnings.catch_warnings",
        "import os\nfrom xlacache.stores.local import LocalStore\nLocalStore(sys.argv[1])\n"
        "f = open(os.path.join(sys.argv[1], 'filler'), 'wb')\n"
        "try:\n    f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\nf.close()\n"
        "with warnings.catch_warnings",
    )
    out = run_json(program, str(mnt / "c"), prefix=prefix)
    assert out["loss"] > 0 and out["stats"]["writes"] == 0
    assert out["stats"]["errors"].get("disk_full", 0) >= 1 and len(out["warnings"]) == 1


@pytest.mark.fallback
def test_cache_path_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    out = run(tmp_path / "file")
    assert out["loss"] > 0 and out["stats"]["hits"] == 0
    assert sum(out["stats"]["errors"].values()) == 1 and len(out["warnings"]) == 1


def test_environment_configures_the_cache_torch_xla_names_too(tmp_path):
    call = JAX_PROGRAM.split("xlacache.initialize_cache(")[1].split("\n")[0]
    code = JAX_PROGRAM.replace(call, ")")
    assert "initialize_cache()" in code
    first = run_json(code, env={"XLA_PERSISTENT_CACHE_PATH": str(tmp_path / "tx")})
    assert first["stats"]["writes"] >= 1 and (tmp_path / "tx" / "XLACACHE").exists()
    second = run_json(code, env={"XLACACHE_DIR": str(tmp_path / "tx"), "XLACACHE_READONLY": "1"})
    assert second["stats"]["misses"] == 0 and second["stats"]["writes"] == 0


@pytest.mark.fallback
def test_an_entry_jax_cannot_load_is_counted_explained_and_replaced(tmp_path):
    """A verified entry whose executable JAX's loader rejects (jax#38445): one error
    counted and explained, the program compiled once and stored over it, then hits."""
    from xlacache.explain import MISS_LOG

    cold = run(tmp_path / "c")
    store = LocalStore(tmp_path / "c")
    info = next(i for i in store.list() if i.label == "jit_step")
    path = store.entry_path(info.key)
    header = entry.decode(path.read_bytes(), info.key).header
    path.write_bytes(
        entry.encode(
            info.key,
            b"not an executable" * 64,  # framing, header and checksums all valid
            compile_seconds=header.compile_seconds,
            label=header.label,
            platform_name=header.platform,
            context=header.context,
            components=header.components,
            summary=header.summary,
        )
    )
    entry.decode(path.read_bytes(), info.key)  # the store verifies it: only JAX rejects it
    second = run(tmp_path / "c", {"explain": True})
    stats = second["stats"]
    assert stats["errors"] == {"load_rejected": 1}, stats["errors"]
    assert stats["misses"] == 1 and stats["writes"] == 1
    assert stats["hits"] == cold["stats"]["misses"] - 1
    assert stats["misses_by_reason"] == {"load_rejected": 1}
    assert len(second["warnings"]) == 1 and "rejected" in second["warnings"][0]
    assert second["loss"] == cold["loss"]
    (record,) = [json.loads(line) for line in (tmp_path / "c" / MISS_LOG).read_text().splitlines()]
    assert record["reason"] == "load_rejected" and record["key"] == info.key
    assert "rejected" in record["note"]
    third = run(tmp_path / "c")
    assert third["stats"]["misses"] == 0 and third["stats"]["errors"] == {}
    assert third["stats"]["hits"] == cold["stats"]["misses"] and third["loss"] == cold["loss"]
