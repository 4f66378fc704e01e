"""Server settings (file < env < flags), token files and roles, generated code, CLI errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from xlacache.errors import ConfigError, PermissionDeniedError, UnauthenticatedError
from xlacache.server.auth import Role, TokenTable, token_digest
from xlacache.server.config import is_loopback, load_config

REPO = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh():
    pytest.importorskip("grpc_tools")
    spec = importlib.util.spec_from_file_location("protogen", REPO / "tools" / "protogen.py")
    protogen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protogen)
    assert protogen.stale_files() == [], "run: make proto (python tools/protogen.py)"


def test_settings_layering(tmp_path):
    cfg = tmp_path / "serve.toml"
    cfg.write_text('[serve]\nstore = "/srv/a"\nmax_size = "50GB"\nworkers = 8\n')
    env = {"XLACACHE_SERVE_MAX_SIZE": "10GB", "XLACACHE_SERVE_LISTEN": "127.0.0.1:7000"}
    c = load_config({"listen": "127.0.0.1:7001"}, config_file=str(cfg), env=env)
    assert (c.store, c.max_size, c.workers, c.listen) == ("/srv/a", 10 * 10**9, 8, "127.0.0.1:7001")
    json_cfg = tmp_path / "serve.json"
    json_cfg.write_text('{"store": "/srv/b", "request_timeout": "2m"}')
    c = load_config({}, env={"XLACACHE_SERVE_CONFIG": str(json_cfg)})
    assert c.store == "/srv/b" and c.request_timeout == 120


@pytest.mark.parametrize(
    "settings, message",
    [
        ({}, "no store"),
        ({"store": "/s", "listen": "0.0.0.0:7070"}, "refusing to serve without tokens"),
        ({"store": "/s", "listen": "nonsense"}, "invalid address"),
        ({"store": "/s", "max_size": "lots"}, "invalid size"),
        ({"store": "/s", "tls_cert": "/nonexistent.pem"}, "go together"),
        ({"store": "/s", "bogus": 1}, "unknown setting"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        load_config(settings, env={})


def test_open_server_beyond_loopback_needs_allow_open(tmp_path):
    c = load_config({"store": "/s", "listen": "0.0.0.0:7070", "allow_open": True}, env={})
    assert c.allow_open
    assert is_loopback("127.0.0.1:1") and is_loopback("[::1]:1") and not is_loopback("10.0.0.1:1")


def test_tokens_and_roles():
    table = TokenTable.parse(
        "read  reader-token-000000001 ci\n"
        f"admin sha256:{token_digest('admin-token-000000001')}  # hashed\n"
    )
    md = lambda t: (("authorization", f"Bearer {t}"),)  # noqa: E731
    assert table.authorize(md("reader-token-000000001"), Role.READ).name == "ci"
    with pytest.raises(PermissionDeniedError):
        table.authorize(md("reader-token-000000001"), Role.WRITE)
    assert table.authorize(md("admin-token-000000001"), Role.ADMIN).role is Role.ADMIN
    for bad in ((), md("wrong-token-0000000000"), (("authorization", "Basic abc"),)):
        with pytest.raises(UnauthenticatedError):
            table.authorize(bad, Role.READ)
    assert TokenTable().open
    for text in ("superuser abcdefabcdefabcdef", "read short", "", "read"):
        with pytest.raises(ConfigError):
            TokenTable.parse(text)


def _serve(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlacache", "serve", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


@pytest.mark.slow
def test_cli_errors_are_one_line_and_nonzero(tmp_path):
    for args, needle in [
        (["--store", str(tmp_path / "s"), "--listen", "0.0.0.0:0"], "refusing"),
        (["--store", str(tmp_path / "s"), "--max-size", "huge"], "invalid size"),
        (["--store", str(tmp_path / "s"), "--tokens", str(tmp_path / "missing")], "not found"),
        (["--listen", "127.0.0.1:0"], "no store"),
    ]:
        result = _serve(*args)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("xlacache serve:")
