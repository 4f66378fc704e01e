"""The store registry: `open_store` finds a backend by URL scheme, `register_store` adds
one, and a backend whose optional dependencies are missing names the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xlacache.errors import ConfigError, NotACacheError
from xlacache.stores import _REGISTRY, open_store, register_store
from xlacache.stores.local import LocalStore


@pytest.fixture
def registry():
    saved = dict(_REGISTRY)
    yield
    _REGISTRY.clear()
    _REGISTRY.update(saved)


def test_a_registered_scheme_opens_with_its_factory(registry, tmp_path):
    calls = []

    def factory(url, *, readonly, create, **options):
        calls.append((url, readonly, create, options))
        return LocalStore(tmp_path / "c", readonly=readonly, create=create)

    register_store("mem", factory)
    with open_store("mem://x", readonly=False, fsync="off") as store:
        assert isinstance(store, LocalStore)
    assert calls == [("mem://x", False, True, {"fsync": "off"})]
    with pytest.raises(ValueError, match="already registered"):
        register_store("mem", factory)
    register_store("mem", "xlacache.stores:_open_local", replace=True)  # by name, lazily
    with pytest.raises(NotACacheError, match="unsupported cache URL scheme 's3'"):
        open_store("s3://bucket/cache")


def test_a_missing_dependency_names_the_extra(registry):
    def needs_boto(url, **_):
        import boto_that_is_not_installed  # noqa: F401

    register_store("s3", needs_boto, extra="s3")
    with pytest.raises(ConfigError) as caught:
        open_store("s3://bucket/cache")
    message = str(caught.value)
    assert "boto_that_is_not_installed" in message and "pip install 'xlacache[s3]'" in message
    register_store("s3x", "boto_that_is_not_installed.store:S3Store", extra="s3")
    with pytest.raises(ConfigError, match=r"xlacache\[s3\]"):
        open_store("s3x://bucket/cache")


def test_gs_without_gcsfs_is_one_line_naming_the_gcs_extra():
    code = (
        "import sys; sys.modules['gcsfs'] = None\n"
        "sys.argv = ['xlacache', 'stats', 'gs://bucket/cache']\n"
        "from xlacache.cli.main import main; main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("xlacache: error: ") and "xlacache[gcs]" in lines[0]


def test_schemes_are_listed_in_the_registry_only():
    """No module but the registry names a store scheme in code (comparisons, tuples;
    messages and display URLs, f-strings, aside), so a new backend is one registration."""
    import ast
    from pathlib import Path

    import xlacache

    schemes = {"grpc", "grpcs", "gs", "gcs"}
    names = schemes | {f"{s}://" for s in schemes} | {"file://"}
    package = Path(xlacache.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" and path.parent.name == "stores" or "_proto" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        shown = {id(c) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for c in f.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):  # scheme == "file", in ("", "file")
                for side in [node.left, *node.comparators]:
                    parts = side.elts if isinstance(side, (ast.Tuple, ast.Set)) else [side]
                    found += [
                        f"{path.relative_to(package)}:{node.lineno} {p.value!r}"
                        for p in parts
                        if isinstance(p, ast.Constant) and p.value == "file"
                    ]
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in shown:
                found.append(f"{path.relative_to(package)}:{node.lineno} {node.value!r}")
    assert not found, found


def test_a_registered_bucket_scheme_is_a_bucket_everywhere(registry):
    from xlacache.server.config import load_config
    from xlacache.stores import is_bucket_url, is_remote_url, schemes_of, store_kind
    from xlacache.stores.gcs_objects import parse_url
    from xlacache.stores.remote import parse_target

    assert schemes_of("bucket") == ("gs", "gcs") and schemes_of("server") == ("grpc", "grpcs")
    assert parse_target("grpcs://h:1") == ("h:1", True)
    register_store("gsx", "xlacache.stores:_open_gcs", extra="gcs", kind="bucket")
    register_store("rpcx", "xlacache.stores:_open_grpc", kind="server", tls=True)
    assert is_bucket_url("gsx://b/p") and store_kind("gsx://b/p") == "bucket"
    assert parse_url("gsx://b/p") == ("b", "p")
    assert is_remote_url("rpcx://h:1") and parse_target("rpcx://h:1") == ("h:1", True)
    config = load_config(cli={"store": "gsx://b/p", "cache_dir": "/tmp/d"}, env={})
    assert config.store == "gsx://b/p"
    with pytest.raises(ValueError, match="store kind"):
        register_store("x", "m:f", kind="cloud")
