"""Gloo's "[Gloo] Rank N is connected" lines stay out of a job's output unless asked for
(issue 27, 9): the filter of ``lazy/distributed/quiet.py``, and a real two-process job."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, child_env
from xlacache.lazy.distributed.quiet import is_connection_noise, keep

LINE = (
    b"[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3\n"
)
# Two threads' lines, interleaved as they come out of one process.
MIXED = (
    b"[Gloo] Rank [Gloo] Rank 0 is connected to 23 is connected to  peer ranks. 3Expected "
    b"number of connected peer ranks is :  peer ranks. 3Expected number of connected peer "
    b"ranks is : \n"
)


def test_connection_lines_whole_or_interleaved_are_noise_and_nothing_else_is():
    assert is_connection_noise(LINE) and is_connection_noise(MIXED)
    assert not is_connection_noise(b"[Gloo] Rank 1 is NOT connected to: [2]\n")
    assert not is_connection_noise(b"step 3  loss 4.2\n")
    assert not is_connection_noise(b"[Gloo] Rank 1 is connected to 3 peer ranks. loss 4.2\n")


def test_keep_drops_noise_and_holds_only_what_may_become_noise():
    assert keep(b"step 1\n" + LINE + b"step 2\n") == (b"step 1\nstep 2\n", b"")
    assert keep(b"epoch 1: 40%") == (b"epoch 1: 40%", b"")  # a progress line goes out at once
    assert keep(b"a\n[Gloo] Rank 0 is conn") == (b"a\n", b"[Gloo] Rank 0 is conn")
    assert keep(b"a\n[Glo") == (b"a\n", b"[Glo")  # may be the start of one


_JOB = """
import xlacache.lazy as xl
from tests.lazy import _dist_workers as workers
if __name__ == "__main__":
    results = xl.launch(workers.collectives, nprocs=2)
    print("sums", [r["sum"] for r in results], flush=True)
"""


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("asked", [False, True], ids=["quiet", "XLACACHE_GLOO_LOG=1"])
def test_a_two_process_job_prints_no_gloo_lines_unless_asked(tmp_path, asked):
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = child_env({"PYTHONPATH": str(REPO), **({"XLACACHE_GLOO_LOG": "1"} if asked else {})})
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sums [[3.0, 2.0], [3.0, 2.0]]" in out.stdout
    assert ("[Gloo] Rank" in out.stdout + out.stderr) is asked, out.stdout
