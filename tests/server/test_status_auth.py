"""Who may see the status page and /metrics (issue 20, item 6), and token file errors."""

from __future__ import annotations

import base64
import signal
import urllib.error
import urllib.request

import pytest
from srvutil import READ_TOKEN, start_server, write_tokens

from xlacache.errors import ConfigError, PermissionDeniedError
from xlacache.server.auth import TokenTable
from xlacache.server.config import load_config
from xlacache.stores import open_store

pytestmark = pytest.mark.timeout(120)

METRICS_TOKEN = "metrics-token-0123456789abcdef"


def _get(url: str, authorization: str | None = None) -> int:
    headers = {"Authorization": authorization} if authorization else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10):
            return 200
    except urllib.error.HTTPError as exc:
        assert exc.code != 401 or "Basic" in exc.headers.get("WWW-Authenticate", "")
        return exc.code


def _basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"prometheus:{password}".encode()).decode()


def test_with_a_token_file_the_page_and_metrics_need_a_token(tmp_path):
    tokens = write_tokens(tmp_path / "tokens")
    tokens.write_text(tokens.read_text() + f"metrics {METRICS_TOKEN} prometheus\n")
    srv = start_server(tmp_path, "--tokens", str(tokens), "--metrics-listen", "0")
    try:
        assert "127.0.0.1" in srv.log_text().split("metrics on http://")[1].split("/")[0]
        base = f"http://127.0.0.1:{srv.http_port}"
        for path in ("/", "/status.json", "/metrics"):
            assert _get(base + path) == 401
            assert _get(base + path, "Bearer not-a-known-token-at-all") == 401
            assert _get(base + path, f"Bearer {METRICS_TOKEN}") == 200
            assert _get(base + path, _basic(READ_TOKEN)) == 200
            assert _get(base + path, _basic("wrong")) == 401
        assert _get(base + "/healthz") == 200  # probes carry no credentials
        # A metrics token sees the page and nothing of the cache.
        with pytest.raises(PermissionDeniedError):
            open_store(srv.url, token=METRICS_TOKEN).contains("0" * 64)
    finally:
        srv.stop(signal.SIGKILL)


def test_the_metrics_port_defaults_to_loopback_and_is_not_opened_to_all_without_tokens():
    assert load_config({"store": "/s", "metrics_listen": "9090"}, env={}).metrics_listen == (
        "127.0.0.1:9090"
    )
    with pytest.raises(ConfigError, match="refusing to show the status page"):
        load_config({"store": "/s", "metrics_listen": "0.0.0.0:9090"}, env={})
    opened = {"store": "/s", "metrics_listen": "0.0.0.0:9090", "allow_open": True}
    assert load_config(opened, env={}).metrics_listen == "0.0.0.0:9090"


def test_a_token_file_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "tokens"
    path.write_text(f"read {READ_TOKEN} a\nreader {READ_TOKEN}x b\n")
    with pytest.raises(ConfigError, match=rf"{path}:2: unknown role 'reader'"):
        TokenTable.load(path)
    path.write_text("read short-token\n")
    with pytest.raises(ConfigError, match=rf"{path}:1: tokens need at least 16 characters"):
        TokenTable.load(path)
