"""Tokens rotate without a restart (issue 27, 4): the server reloads its token file when its
content changes and on SIGHUP, all at once; a malformed file keeps the old tokens.

The file is rotated as Kubernetes rotates a Secret mounted as a volume: the path is a
symlink through `..data`, and the kubelet swaps `..data` to a new directory atomically.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from srvutil import start_server

from tests.waiting import wait_for
from xlacache.errors import UnauthenticatedError
from xlacache.stores import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OLD = "old-token-0123456789abcdef"
NEW = "new-token-0123456789abcdef"
RELOAD_WAIT = 30.0  # a bound on the wait, far above the check interval; no speed asserted


def _accepted(url: str, token: str) -> bool:
    """Whether the server takes `token` now (a read: the store's summary)."""
    with open_store(url, token=token, readonly=True) as store:
        try:
            store.summary()
        except UnauthenticatedError:
            return False
    return True


class SecretVolume:
    """A directory laid out as the kubelet mounts a Secret: `tokens -> ..data/tokens`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.version = 0
        (root / "tokens").symlink_to("..data/tokens")

    @property
    def path(self) -> Path:
        return self.root / "tokens"

    def publish(self, text: str) -> None:
        """A new version, swapped in with one rename of the `..data` link."""
        self.version += 1
        version = self.root / f"..v{self.version}"
        version.mkdir()
        (version / "tokens").write_text(text)
        (self.root / "..data_tmp").symlink_to(version.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")


def test_a_rotated_secret_is_reloaded_and_a_malformed_one_kept_out(tmp_path):
    secret = SecretVolume(tmp_path / "secret")
    secret.publish(f"read {OLD} worker\n")
    srv = start_server(tmp_path, "--tokens", str(secret.path), "--token-check-interval", "0.2s")
    try:
        assert _accepted(srv.url, OLD) and not _accepted(srv.url, NEW)
        secret.publish(f"read {NEW} worker\n")
        wait_for(lambda: _accepted(srv.url, NEW), RELOAD_WAIT, "the new token to be accepted",
                 procs=[srv.proc])  # fmt: skip
        assert not _accepted(srv.url, OLD)
        assert "token file" in srv.log_text() and "reloaded: 1 tokens" in srv.log_text()

        secret.publish(f"read {OLD}\nread short\n")  # line 2 is no token: the whole file is
        wait_for(lambda: "not reloaded" in srv.log_text(), RELOAD_WAIT, "the refusal logged",
                 procs=[srv.proc])  # fmt: skip
        assert "tokens need at least 16 characters" in srv.log_text()
        assert _accepted(srv.url, NEW) and not _accepted(srv.url, OLD)  # the old table stands

        os.remove(secret.root / "..data")  # gone for a moment: still the table before
        wait_for(lambda: "No such file" in srv.log_text(), RELOAD_WAIT, "the missing file logged",
                 procs=[srv.proc])  # fmt: skip
        assert _accepted(srv.url, NEW)
        assert srv.log_text().count("not reloaded") == 2  # each problem logged once
    finally:
        srv.stop(signal.SIGKILL)


def test_sighup_reloads_at_once(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {OLD} worker\n")
    srv = start_server(tmp_path, "--tokens", str(tokens), "--token-check-interval", "0")
    try:
        tokens.write_text(f"read {NEW} worker\n")  # edited in place; no polling (interval 0)
        assert _accepted(srv.url, OLD) and not _accepted(srv.url, NEW)
        srv.send(signal.SIGHUP)
        wait_for(lambda: _accepted(srv.url, NEW), RELOAD_WAIT, "SIGHUP's reload",
                 procs=[srv.proc])  # fmt: skip
        assert not _accepted(srv.url, OLD)
        assert srv.proc.poll() is None  # SIGHUP reloads; it does not stop the server
    finally:
        srv.stop(signal.SIGKILL)
