"""Real JAX training steps with initialize_cache(remote="gs://..."), one process per worker.

GCS answers 429 and 503 now and then (a fault-injecting proxy in front of the
emulator): training completes with the right numbers, the entries reach the bucket,
a second worker (configured by XLACACHE_REMOTE) loads instead of compiling, and a
read-only worker loads too without sending a single write request.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import run_python
from xlacache.stores.gcs import GCSStore
from xlacache.stores.local import LocalStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORKER = """
import json, sys
import jax, jax.numpy as jnp
import xlacache
from xlacache import api

xlacache.initialize_cache(sys.argv[1], **json.loads(sys.argv[2]))

def step(w, x):
    def loss(w):
        return jnp.mean(jnp.tanh(x @ w) ** 2)
    l, g = jax.value_and_grad(loss)(w)
    return w - 0.1 * g, l

w = jnp.full((32, 32), 0.01, jnp.float32)
x = jnp.ones((8, 32), jnp.float32)
losses = []
for _ in range(3):
    w, l = jax.jit(step)(w, x)
    losses.append(float(l))
store = api.get_cache().store
flushed = store.flush(60) if hasattr(store, "flush") else True
print(json.dumps({"stats": xlacache.stats(), "losses": losses, "flushed": flushed,
                  "store": type(store).__name__}))
"""


def run_worker(local, env: dict, **settings) -> dict:
    proc = run_python(WORKER, str(local), json.dumps(settings), env={"JAX_PLATFORMS": "cpu", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_training_through_gcs_faults_then_a_second_worker_and_a_reader_hit(gcs, tmp_path):
    url = gcs.url("pod-cache")
    gcs.proxy.fail(503, times=8, every=3)
    gcs.proxy.fail(429, times=8, every=4)

    cold = run_worker(tmp_path / "a", gcs.env, remote=url)
    assert cold["store"] == "TieredStore" and cold["flushed"]
    stats = cold["stats"]
    assert stats["misses"] >= 1 and stats["writes"] >= 1 and stats["uploads"] >= 1
    assert stats["gcs_retries"] >= 1 and gcs.proxy.injected() >= 2
    assert stats["errors"] == {}  # every fault was absorbed by a retry
    expected = math.tanh(0.32) ** 2  # the first step's loss, by hand
    assert cold["losses"][0] == pytest.approx(expected, rel=1e-5)
    stored = {i.key for i in GCSStore(url, readonly=True).list()}
    assert stored >= {i.key for i in LocalStore(tmp_path / "a", readonly=True).list()}

    warm = run_worker(tmp_path / "b", {**gcs.env, "XLACACHE_REMOTE": url})
    assert warm["stats"]["misses"] == 0 and warm["stats"]["remote_hits"] >= 1
    assert warm["stats"]["writes"] == 0
    assert warm["losses"] == cold["losses"]  # bit for bit: the same executables

    LocalStore(tmp_path / "c").close()  # the reader's own (empty) local cache
    gcs.proxy.clear()
    gcs.proxy.reset_log()
    reader = run_worker(tmp_path / "c", gcs.env, remote=url, readonly=True)
    assert reader["stats"]["misses"] == 0 and reader["stats"]["remote_hits"] >= 1
    assert reader["losses"] == cold["losses"]
    assert gcs.proxy.requests and gcs.proxy.writes() == []
    assert LocalStore(tmp_path / "c", readonly=True).summary().entries == 0
