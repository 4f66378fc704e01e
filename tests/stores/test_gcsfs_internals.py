"""Tripwires: the private gcsfs/fsspec parts `stores/gcs_objects.py` overrides or calls.

`_OneAttemptGCSFileSystem._request` replaces gcsfs's (one attempt, the status kept), and
every call goes through `GCSFileSystem._call`; each assertion names the gcsfs version, so
an upgrade past the tested range (pyproject's bound) says what moved.
"""

import inspect

import fsspec
import gcsfs
import pytest

from xlacache.stores import gcs_objects  # noqa: F401 - sets gcsfs's environment first

GCSFileSystem = gcsfs.core.GCSFileSystem
WHERE = f"gcsfs {gcsfs.__version__}, fsspec {fsspec.__version__}"

# What gcs_objects passes or reads, by name, for each private method.
METHODS = {
    "_request": ("method", "path", "headers", "json", "data", "cache_type", "cache_source"),
    "_call": ("method", "path", "json_out", "info_out"),
    "_set_session": (),
    "_format_path": ("path", "args"),
    "_get_params": ("kwargs",),
    "_get_headers": ("headers", "cache_type", "cache_source"),
    "url": ("path",),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_private_method_is_there_with_the_parameters_we_use(name):
    method = getattr(GCSFileSystem, name, None)
    assert method is not None, f"{WHERE}: GCSFileSystem.{name} is gone"
    have = tuple(inspect.signature(method).parameters)
    missing = [p for p in METHODS[name] if p not in have]
    assert not missing, f"{WHERE}: GCSFileSystem.{name}{have} lacks {missing}"


def test_call_goes_through_request_and_unpacks_four_values():
    source = inspect.getsource(GCSFileSystem._call)
    assert "await self._request(" in source, f"{WHERE}: _call no longer calls _request"
    assert "status, headers, info, contents" in source, f"{WHERE}: _request's result changed"


def test_instance_attributes_we_read():
    fs = GCSFileSystem(token="anon", skip_instance_cache=True)
    for name in ("_location", "requests_timeout", "loop"):
        assert hasattr(fs, name), f"{WHERE}: GCSFileSystem().{name} is gone"
    assert "session" in inspect.getsource(GCSFileSystem._set_session), WHERE


def test_helpers_we_import():
    assert "timeout" in inspect.signature(fsspec.asyn.sync).parameters, WHERE
    assert gcsfs.core.quote("a b/c") != "a b/c", f"{WHERE}: gcsfs.core.quote"
    assert callable(gcsfs.retry.is_retriable), f"{WHERE}: gcsfs.retry.is_retriable"
