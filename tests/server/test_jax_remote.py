"""Real jax compiles through initialize_cache(..., remote=grpc://...), one process per worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from srvutil import WRITE_TOKEN

from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WORKER = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp
    import xlacache

    local, remote, token, phases = sys.argv[1], sys.argv[2], sys.argv[3] or None, int(sys.argv[4])
    xlacache.initialize_cache(local, remote=remote, token=token)
    for phase in range(phases):
        for n in range(3):
            f = jax.jit(lambda x, n=n, p=phase: jnp.tanh(x * (n + 1)) + p)
            f(jnp.ones((4 + n + 8 * phase,))).block_until_ready()
        print(json.dumps({"phase": phase}), flush=True)
        if phase + 1 < phases:
            sys.stdin.readline()  # the test does something to the server, then goes on
    stats = xlacache.stats()
    print(json.dumps({"stats": {k: v for k, v in stats.items() if k != "errors"},
                      "errors": stats["errors"]}), flush=True)
    """
)


def run_worker(tmp_path, local, url, token="", phases=1) -> subprocess.Popen:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(
        [sys.executable, str(script), str(local), url, token, str(phases)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip


def final_stats(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_worker_b_with_empty_dir_hits_what_worker_a_compiled(tmp_path, auth_server):
    a = run_worker(tmp_path, tmp_path / "a", auth_server.url, WRITE_TOKEN)
    out, err = a.communicate(timeout=180)
    assert a.returncode == 0, err
    a_stats = final_stats(out)["stats"]
    assert a_stats["writes"] >= 3
    remote = GrpcStore(auth_server.url, token=WRITE_TOKEN)
    assert remote.summary().entries >= 3  # uploads finished by exit

    b = run_worker(tmp_path, tmp_path / "b", auth_server.url, WRITE_TOKEN)
    out, err = b.communicate(timeout=180)
    assert b.returncode == 0, err
    b_stats = final_stats(out)["stats"]
    assert b_stats["remote_hits"] >= 3 and b_stats["writes"] == 0
    assert LocalStore(tmp_path / "b", readonly=True).summary().entries >= 3
    assert remote.server_stats().counters["hits"] >= 3


@pytest.mark.fallback
def test_server_killed_mid_run_leaves_training_running(tmp_path, server):
    w = run_worker(tmp_path, tmp_path / "w", server.url, phases=2)
    first = w.stdout.readline()
    assert json.loads(first) == {"phase": 0}
    server.stop(signal.SIGKILL)
    out, err = w.communicate("go on\n", timeout=180)
    assert w.returncode == 0, err
    lines = out.strip().splitlines()
    assert json.loads(lines[0]) == {"phase": 1}
    result = final_stats(out)
    assert result["stats"]["writes"] >= 6  # phase-two programs compiled and cached locally
    assert LocalStore(tmp_path / "w", readonly=True).summary().entries >= 6
    assert err.count("xlacache: remote error") == 1  # one warning, however many failures
