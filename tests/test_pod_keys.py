"""One key for one program on every process of a `jax.distributed` job (real 2-process jobs
on loopback), and prefetch of executables placed on global device ids."""

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import child_env
from xlacache.lazy.distributed.env import reserve_port
from xlacache.stores.local import LocalStore

POD_PROGRAM = """
import json, sys, threading
port, nproc, pid, ndev = (int(a) for a in sys.argv[1:5])
cache = sys.argv[5]
import jax
jax.config.update("jax_num_cpu_devices", ndev)
address = f"127.0.0.1:{port}"
jax.distributed.initialize(address, nproc, pid, coordinator_bind_address=address,
                           initialization_timeout=120, heartbeat_timeout_seconds=60)
import numpy as np, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import xlacache
from xlacache import jax_bridge

keys = []
original = jax_bridge.identity
def spy(*args):
    ident = original(*args)
    keys.append([ident.label, ident.key, ident.summary()["devices"]])
    return ident
jax_bridge.identity = spy

xlacache.initialize_cache(cache)
jax.devices()  # the backend is up: let the prefetch of the last run's programs finish first
for t in threading.enumerate():
    if t.name == "xlacache-prefetch":
        t.join(300)

def sharded_step(v):
    return jnp.sum(jnp.sin(v) ** 2)

n = 8 * len(jax.devices())
sharding = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x"))
x = jax.make_array_from_callback((n,), sharding, lambda i: np.arange(n, dtype=np.float32)[i])
y = jax.jit(sharded_step)(x)
print(json.dumps({"keys": keys, "y": float(y), "stats": xlacache.stats()}))
"""


def run_job(cache, processes: int, devices_each: int, timeout: float = 600) -> list[dict]:
    """Run POD_PROGRAM as one jax.distributed job; each process's JSON result."""
    reserved = reserve_port()  # held for the job: a concurrent job never gets it
    port = str(reserved.getsockname()[1])
    code = textwrap.dedent(POD_PROGRAM)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                port,
                str(processes),
                str(i),
                str(devices_each),
                str(cache),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for i in range(processes)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        reserved.close()
    return results


def sharded_key(result: dict) -> str:
    (key,) = {k for label, k, _ in result["keys"] if label == "jit_sharded_step"}
    return key


@pytest.mark.slow
def test_every_process_of_a_job_computes_the_same_key_and_prefetches(tmp_path):
    cache = tmp_path / "shared"
    LocalStore(cache).close()  # the job's shared directory, made before it starts
    first = run_job(cache, processes=2, devices_each=2)
    p0, p1 = first
    assert p0["keys"] and p0["keys"] == p1["keys"]  # every program, same key on both
    devices = {json.dumps(d, sort_keys=True) for _, _, d in p0["keys"]}
    assert json.loads(devices.pop())["processes"] == 2
    assert p0["y"] == p1["y"]
    # Process 1 is a reader (jax.process_index() == 1): it compiled nothing, but waited for
    # and loaded process 0's entries.
    assert p0["stats"]["writes"] == p0["stats"]["misses"] >= 1
    assert p1["stats"]["writes"] == p1["stats"]["misses"] == 0
    assert p1["stats"]["hits"] == p0["stats"]["misses"]
    # A job of another shape (2 processes x 1 device) keys the program differently.
    other = run_job(tmp_path / "other", processes=2, devices_each=1)
    assert sharded_key(other[0]) == sharded_key(other[1]) != sharded_key(p0)
    # The same job again: every program is prefetched on both processes, although the
    # executables sit on global device ids (2048, 2049) that process 0 does not own.
    again = run_job(cache, processes=2, devices_each=2)
    for before, after in zip(first, again, strict=True):
        stats = after["stats"]
        assert stats["errors"] == {} and stats["misses"] == 0, stats
        programs = before["stats"]["misses"] + before["stats"]["hits"]
        assert stats["prefetch_hits"] == stats["hits"] == programs >= 1, (stats, before["stats"])
        assert after["y"] == before["y"] and after["keys"] == before["keys"]
