"""Strict mode (the `strict` setting, XLACACHE_STRICT): no fallback hides an exception.

The suite itself runs strict (tests/conftest.py); these tests pin what strict mode does:
one setting, failures raised by where they came from instead of counted, failures of
background threads raised by the next foreground call, silent drops counted.
"""

from __future__ import annotations

import socket
import warnings

import pytest

import xlacache
from tests.conftest import make_blob, make_key
from xlacache import api, counters
from xlacache.cache import CompilationCache
from xlacache.errors import CorruptEntryError, StrictModeError
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.tiered import TieredStore


def _dead_url() -> str:
    """A grpc:// URL nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"grpc://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.slow  # initialize_cache installs into JAX (its import, on a fresh worker)
def test_strict_is_one_setting_and_the_argument_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("XLACACHE_STRICT", "0")
    assert not counters.strict_mode()
    monkeypatch.setenv("XLACACHE_STRICT", "1")
    assert counters.strict_mode()
    xlacache.initialize_cache(tmp_path / "c", strict=False, prefetch=0)
    assert api.get_config().strict is False and not counters.strict_mode()
    api._reset_for_tests()
    monkeypatch.setenv("XLACACHE_STRICT", "0")
    xlacache.initialize_cache(tmp_path / "c", strict=True, prefetch=0)
    assert counters.strict_mode()


def test_a_failure_the_cache_would_absorb_raises_named_by_where_it_came_from():
    with pytest.raises(StrictModeError, match=r"^corrupt: CorruptEntryError: bad") as caught:
        counters.record_error("corrupt", CorruptEntryError("bad"))
    assert caught.value.where == "corrupt" and isinstance(caught.value.__cause__, CorruptEntryError)
    assert counters.snapshot()["errors"] == {}  # raised, not counted
    with pytest.raises(StrictModeError, match=r"^wait_timeout: CacheError: waited"):
        counters.record_error("wait_timeout", "waited 1 s")  # a failure without an exception


@pytest.mark.fallback
def test_without_strict_mode_a_failure_is_counted_and_warned_about_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counters.record_error("corrupt", CorruptEntryError("bad"))
        counters.record_error("corrupt", CorruptEntryError("bad again"))
    assert counters.snapshot()["errors"] == {"corrupt": 2} and len(caught) == 1


def test_a_background_upload_failure_is_raised_by_the_next_compile_and_stats(tmp_path):
    """The upload thread carries on (it would only end itself); the foreground raises."""
    tier = TieredStore(LocalStore(tmp_path / "local"), GrpcStore(_dead_url(), timeout=2))
    cache = CompilationCache(tier)
    key, blob = make_blob(1)
    tier.put(key, blob)  # stored locally; its upload fails in the background
    assert tier.flush(60)
    with pytest.raises(StrictModeError, match=r"^remote: StoreUnavailableError"):
        cache.get_or_compile(make_key(2), compile=lambda: b"x", load=bytes, serialize=bytes)
    assert counters.take_deferred() == []  # raised once
    assert tier.local.get(key) == blob  # the local tier kept its entry
    tier.put(*make_blob(3))
    assert tier.flush(60)
    with pytest.raises(StrictModeError, match=r"^remote: "):
        xlacache.stats()
    tier.close()


def _racing_manifest(gcs):
    """A bucket's job manifests where every rewrite loses its race (412, as when another
    writer rewrote the manifest first)."""
    from xlacache.stores.gcs import GCSStore

    store = GCSStore(gcs.url())
    gcs.proxy.fail(status=412, times=100, method="POST", path="ifGenerationMatch=")
    return store


def test_a_job_record_that_loses_every_race_raises(gcs):
    store = _racing_manifest(gcs)
    with pytest.raises(StrictModeError, match=r"^job.record: .*lost 4 races"):
        store.jobs().record("job-1", "run-1", [make_key(1)])
    assert counters.snapshot()["job_records_dropped"] == 1
    store.close()


@pytest.mark.fallback
def test_a_job_record_that_loses_every_race_is_counted_not_silent(gcs):
    store = _racing_manifest(gcs)
    store.jobs().record("job-1", "run-1", [make_key(1)])  # given up, without an error
    assert counters.snapshot()["job_records_dropped"] == 1
    assert gcs.proxy.injected() == 4
    store.close()
