"""Helpers for the server tests: run `xlacache serve` as a real subprocess, make entries."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import make_key
from tests.waiting import wait_for
from xlacache import entry

READ_TOKEN = "read-token-0123456789abcdef"
WRITE_TOKEN = "write-token-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
STARTUP_SECONDS = 30.0
_LISTEN = re.compile(r"listening on (\S+):(\d+)")
_HTTP = re.compile(r"metrics on http://(\S+):(\d+)/")


def make_entry(name: str, size: int = 4096) -> tuple[str, bytes]:
    """A valid encoded entry of about `size` payload bytes (incompressible)."""
    key = make_key(name)
    payload = hashlib.sha256(name.encode()).digest() * (size // 32 + 1)
    payload = bytes(a ^ b for a, b in zip(payload[:size], os.urandom(size), strict=True))
    return key, entry.encode(key, payload, compile_seconds=0.5, label=name)


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    store: Path
    log: Path
    port: int = 0
    http_port: int | None = None
    args: list[str] = field(default_factory=list)
    cache_dir: Path | None = None  # a bucket server's local directory

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def send(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        self.send(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_server(
    tmp_path: Path,
    *extra: str,
    store: Path | str | None = None,
    listen: str = "127.0.0.1:0",
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Run the daemon with --listen 127.0.0.1:0 and wait until it says where it listens.

    `store` may be a gs:// URL (pass --cache-dir in `extra`, and the emulator in `env`)."""
    store = store or tmp_path / "server-store"
    log = tmp_path / f"server-{time.monotonic_ns()}.log"
    args = [
        sys.executable, "-m", "xlacache", "serve",
        "--store", str(store), "--listen", listen, *extra,
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    server = ServerProcess(proc, store, log, args=args)

    def listening() -> str | None:
        text = server.log_text()
        if _LISTEN.search(text) and ("--metrics-listen" not in extra or _HTTP.search(text)):
            return text
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{text}")
        return None

    try:
        text = wait_for(listening, STARTUP_SECONDS, "the server to start")
    except AssertionError as exc:
        proc.kill()
        raise RuntimeError(f"{exc}:\n{server.log_text()}") from None
    server.port = int(_LISTEN.search(text).group(2))
    http = _HTTP.search(text)
    server.http_port = int(http.group(2)) if http else None
    return server


def start_bucket_server(
    tmp_path: Path, url: str, env: dict[str, str], *extra: str, name: str = "replica"
) -> ServerProcess:
    """A server over a bucket (an emulator named in `env`) with its own local directory."""
    cache_dir = tmp_path / f"{name}-{time.monotonic_ns()}"
    server = start_server(tmp_path, "--cache-dir", str(cache_dir), *extra, store=url, env=env)
    server.cache_dir = cache_dir
    return server


def write_tokens(path: Path) -> Path:
    path.write_text(
        f"# role token name\nread {READ_TOKEN} worker\nwrite {WRITE_TOKEN} trainer\n"
        f"admin sha256:{hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()} ops\n"
    )
    return path
