"""A second process with the same cache compiles nothing and gets the same losses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_module_json

ROOT = Path(__file__).resolve().parents[2]


def _child(cache: Path) -> dict:
    return run_module_json("tests.lazy._persist_child", str(cache))


@pytest.mark.slow
def test_second_process_compiles_nothing(tmp_path):
    cold = _child(tmp_path / "cache")
    warm = _child(tmp_path / "cache")
    assert cold["counters"]["UncachedCompile"] >= 1
    assert cold["counters"]["PersistentCacheMiss"] >= 1
    assert warm["counters"]["UncachedCompile"] == 0
    assert warm["counters"]["PersistentCacheMiss"] == 0
    assert warm["counters"]["PersistentCacheHit"] == cold["counters"]["UncachedCompile"]
    assert warm["losses"] == cold["losses"]
