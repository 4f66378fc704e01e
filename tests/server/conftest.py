"""Fixtures: servers as real subprocesses on free loopback ports."""

from __future__ import annotations

import signal

import pytest
from srvutil import start_server, write_tokens


@pytest.fixture
def server(tmp_path):
    """An open server on loopback (no tokens)."""
    srv = start_server(tmp_path, "--metrics-listen", "127.0.0.1:0")
    yield srv
    srv.stop(signal.SIGKILL)


@pytest.fixture
def auth_server(tmp_path):
    """A server with read, write and admin tokens."""
    srv = start_server(tmp_path, "--tokens", str(write_tokens(tmp_path / "tokens")))
    yield srv
    srv.stop(signal.SIGKILL)
