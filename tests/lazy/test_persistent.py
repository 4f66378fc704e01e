"""A second process with the same cache compiles nothing and gets the same losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _child(cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "tests.lazy._persist_child", str(cache)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


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
