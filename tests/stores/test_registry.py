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
