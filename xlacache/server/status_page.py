"""The daemon's HTTP side: /metrics for Prometheus, / for people, /healthz for probes.

The page itself is `status_html.render_html` of the same dict /status.json serves. With
a token file, `/`, `/status.json` and `/metrics` need one of its tokens (any role,
`metrics` included): `Authorization: Bearer TOKEN`, as Prometheus sends it, or basic
auth with the token as the password, as a browser asks for it; else 401. `/healthz` and
`/readyz` stay open (probes carry no credentials; they show only the state).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xlacache.server.auth import TokenTable
from xlacache.server.httpd import BoundedHTTPServer
from xlacache.server.status_html import render_html

StatusFn = Callable[[], dict]
PROTECTED = {"/", "/index.html", "/status.json", "/metrics"}  # a token when the server has them


class StatusServer:
    """A small HTTP server on its own address (threads bounded: `server.httpd`)."""

    def __init__(
        self, host: str, port: int, registry, status: StatusFn, tokens: TokenTable | None = None
    ) -> None:
        registry_ = registry
        status_ = status
        tokens_ = tokens or TokenTable()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                if (
                    path in PROTECTED
                    and tokens_.http_principal(self.headers.get("Authorization")) is None
                ):
                    self._refuse()
                elif path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry_))
                elif path in ("/healthz", "/readyz"):
                    state = status_()["state"]
                    ok = state == "serving"
                    self._send(200 if ok else 503, "text/plain", f"{state}\n".encode())
                elif path == "/status.json":
                    self._send(200, "application/json", json.dumps(status_(), indent=2).encode())
                elif path in ("/", "/index.html"):
                    self._send(200, "text/html; charset=utf-8", render_html(status_()).encode())
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _refuse(self) -> None:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="xlacache", charset="UTF-8"')
                self.send_header("WWW-Authenticate", 'Bearer realm="xlacache"')
                body = b"a token from the server's token file is needed\n"
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: scrapes every few seconds
                pass

        self.httpd = BoundedHTTPServer((host, port), Handler)  # timeouts, bounded threads
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="xlacache-http", daemon=True
        )
        self.started = time.time()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
