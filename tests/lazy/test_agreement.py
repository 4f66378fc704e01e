"""Agreement errors say what they are: a timeout, a mismatch, a peer that exited.

Rank 0 is this process's `agree`, over a real coordination service (jaxlib's, on
loopback); rank 1 is a second client of the same service, posting what the test says.
"""

from __future__ import annotations

import socket
import threading

import pytest
from jax._src import distributed
from jax._src.lib import _jax as xe

from xlacache.lazy.distributed import agreement
from xlacache.lazy.distributed.env import Job
from xlacache.lazy.state import STATE


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _on_both(clients, method: str) -> None:
    threads = [threading.Thread(target=getattr(c, method)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


@pytest.fixture
def job(monkeypatch):
    """A two-rank job: this process is rank 0; yields rank 1's client."""
    address = f"127.0.0.1:{_port()}"
    service = xe.get_distributed_runtime_service(address, 2, heartbeat_timeout=100)
    clients = [
        xe.get_distributed_runtime_client(
            address, rank, init_timeout=20, heartbeat_timeout=100, shutdown_on_destruction=False
        )
        for rank in range(2)
    ]
    _on_both(clients, "connect")
    monkeypatch.setattr(distributed.global_state, "client", clients[0])
    monkeypatch.setattr(STATE, "job", Job(0, 2, 0, 2, address))
    monkeypatch.setattr(agreement, "_SEQUENCES", {})
    monkeypatch.setattr(agreement, "_LAST", {})
    monkeypatch.setenv("XLACACHE_COLLECTIVE_TIMEOUT", "0.3s")
    yield clients[1]
    monkeypatch.undo()  # STATE.job first: the exit hook posts nothing to this job
    _on_both(clients, "shutdown")  # both at once (a barrier), then the service: no abort
    service.shutdown()


def _post(rank1, n: int, key: bytes, inputs: bytes = b"", what: str = "step") -> None:
    rank1.key_value_set(agreement._key("runs", n, 1), f"{key.hex()}/{inputs.hex()} {what}")


def test_agreeing_ranks_pass_and_each_failure_has_its_type(job):
    _post(job, 1, b"\x01")
    agreement.agree(b"\x01", "step")  # the same program: runs

    with pytest.raises(agreement.AgreementTimeout, match="rank 1 did not reach .* #2"):
        agreement.agree(b"\x01", "step")  # rank 1 never posts #2

    _post(job, 3, b"\x02")
    with pytest.raises(agreement.MismatchError, match="ranks run different programs"):
        agreement.agree(b"\x01", "step")

    _post(job, 4, b"\x01", inputs=b"\x09")
    with pytest.raises(agreement.MismatchError, match="with other inputs than rank 0"):
        agreement.agree(b"\x01", "step", inputs=b"\x08")

    job.key_value_set(agreement._key("runs", 5, 1), agreement._EXITED)
    with pytest.raises(agreement.PeerExitedError, match=r"rank\(s\) \[1\] exited"):
        agreement.agree(b"\x01", "step")


def test_a_failure_that_is_no_status_is_raised_as_it_is(job, monkeypatch):
    """Only the coordination service's status errors are classified; a bug is itself."""
    monkeypatch.setattr(agreement.env, "lazy_setting", lambda name: float("nan"))  # a bug
    with pytest.raises(ValueError, match="NaN"):
        agreement.agree(b"\x01", "step")
