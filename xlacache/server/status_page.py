"""The daemon's HTTP side: /metrics for Prometheus, / for people, /healthz for probes."""

from __future__ import annotations

import html
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xlacache.server.httpd import BoundedHTTPServer
from xlacache.units import format_size

StatusFn = Callable[[], dict]


def render_html(status: dict) -> str:
    """A one-page summary of a status dict (see CacheServer.status)."""
    store = status["store"]
    rows = [
        ("Version", status["version"]),
        ("Listening on", status["listen"]),
        ("Auth", status["auth"]),
        ("TLS", status["tls"]),
        ("Store", store["path"]),
        ("Entries", f"{store['entries']:,}"),
        ("Size", f"{format_size(store['bytes'])} of {store['max_size']}"),
        ("Compile time held", f"{store['compile_seconds']:.1f} s"),
        ("Hits / misses", f"{status['hits']:,} / {status['misses']:,} ({status['hit_rate']})"),
        ("Sent / received", f"{format_size(status['bytes_sent'])} / "
                            f"{format_size(status['bytes_received'])}"),
        ("Active RPCs", status["active_rpcs"]),
        ("Uptime", f"{status['uptime_seconds']:.0f} s"),
        ("State", status["state"]),
    ]  # fmt: skip
    req_rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:,.0f}</td></tr>"
        for k, v in sorted(status["requests"].items())
    )
    body = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>xlacache server</title>"
        "<style>body{font-family:sans-serif;margin:2em}th{text-align:left;padding-right:2em}"
        "td{padding-right:2em}</style></head><body><h1>xlacache server</h1>"
        f"<table>{body}</table><h2>Requests</h2><table>"
        f"<tr><th>method.status</th><th>count</th></tr>{req_rows}</table>"
        "<p><a href='/metrics'>/metrics</a> · <a href='/status.json'>/status.json</a></p>"
        "</body></html>"
    )


class StatusServer:
    """A small HTTP server on its own address (threads bounded: `server.httpd`)."""

    def __init__(self, host: str, port: int, registry, status: StatusFn) -> None:
        registry_ = registry
        status_ = status

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
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
