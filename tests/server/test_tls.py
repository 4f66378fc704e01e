"""TLS and mutual TLS with throwaway certificates made by the openssl command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from srvutil import make_entry, start_server

from tests.conftest import JAX_PROGRAM, child_env, run_json, run_python
from tests.docsutil import commands, section_block
from xlacache.errors import StoreUnavailableError
from xlacache.stores import open_store
from xlacache.stores.resilience import CircuitBreaker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=xlacache-test-ca", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", "san.ext", cwd=d)  # fmt: skip
    return d


def test_mutual_tls(tmp_path):
    pki = make_pki(tmp_path)
    srv = start_server(
        tmp_path,
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.pem"),
    )  # fmt: skip
    try:
        url = f"grpcs://127.0.0.1:{srv.port}"
        store = open_store(
            url,
            tls_ca=str(pki / "ca.pem"),
            tls_cert=str(pki / "client.pem"),
            tls_key=str(pki / "client.key"),
        )
        key, blob = make_entry("tls", 100_000)
        store.put(key, blob)
        assert store.get(key) == blob
        no_cert = open_store(url, tls_ca=str(pki / "ca.pem"), timeout=3,
                             breaker=CircuitBreaker(threshold=100))  # fmt: skip
        with pytest.raises(StoreUnavailableError):
            no_cert.contains(key)
        plain = open_store(f"grpc://127.0.0.1:{srv.port}", timeout=3)
        with pytest.raises(StoreUnavailableError):
            plain.contains(key)
        assert "mutual TLS" in srv.log_text()
    finally:
        srv.stop()


def _cli(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlacache", *args],
        capture_output=True, text=True, timeout=60, cwd=cwd, env=child_env(env),
    )  # fmt: skip


def test_the_private_ca_recipe_of_docs_trust(tmp_path):
    """docs/trust.md's openssl recipe, run as written; a client trusts the CA through
    --tls-ca, XLACACHE_TLS_CA or initialize_cache(tls_ca=), and one that does not gets
    one line naming XLACACHE_TLS_CA, without gRPC's own handshake logging."""
    recipe = section_block("docs/trust.md", "TLS with your own CA", "sh")
    subprocess.run(["bash", "-e", "-c", recipe.text], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    serve = commands(section_block("docs/trust.md", "TLS with your own CA", "sh", 1))[0]
    tls_args = [str(tmp_path / a) if a.endswith((".pem", ".key")) else a
                for a in serve[serve.index("--tls-cert") :]]  # fmt: skip
    srv = start_server(tmp_path, *tls_args)
    try:
        url = f"grpcs://127.0.0.1:{srv.port}"
        untrusted = _cli("stats", url, cwd=tmp_path)
        assert untrusted.returncode == 1
        lines = untrusted.stderr.strip().splitlines()
        assert len(lines) == 1 and "XLACACHE_TLS_CA" in lines[0], untrusted.stderr
        assert _cli("stats", url, "--tls-ca", "ca.pem", cwd=tmp_path).returncode == 0
        by_env = _cli("stats", url, "--json", cwd=tmp_path, env={"XLACACHE_TLS_CA": "ca.pem"})
        assert by_env.returncode == 0, by_env.stderr
        assert by_env.stderr == ""

        # A training process: trusted, it uploads; untrusted, one warning naming the setting.
        ca = str(tmp_path / "ca.pem")
        out = run_json(JAX_PROGRAM, str(tmp_path / "w1"), json.dumps({"remote": url, "tls_ca": ca}))
        writes = out["stats"]["writes"]
        assert out["warnings"] == [] and writes >= 1 and out["stats"]["uploads"] == writes
        summary = json.loads(_cli("stats", url, "--json", "--tls-ca", ca).stdout)
        assert summary["entries"] == writes
        proc = run_python(JAX_PROGRAM, str(tmp_path / "w2"), json.dumps({"remote": url}),
                          env={"XLACACHE_STRICT": "0"})  # a fallback, on purpose  # fmt: skip
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["stats"]["remote_hits"] == 0 and out["stats"]["errors"]
        assert any("XLACACHE_TLS_CA" in w for w in out["warnings"]), out["warnings"]
        assert "andshake" not in proc.stderr and "ssl_transport" not in proc.stderr, proc.stderr
    finally:
        srv.stop()


def test_connection_errors_name_the_fix(tmp_path):
    """grpc:// to a TLS server, grpcs:// to a mutual-TLS server without a client
    certificate, grpcs:// to a plain server: one line each, naming what to change."""
    pki = make_pki(tmp_path)
    tls = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]
    servers = [start_server(tmp_path, *tls, "--tls-client-ca", str(pki / "ca.pem")),
               start_server(tmp_path, store=tmp_path / "plain")]  # fmt: skip
    mutual, plain = (f"127.0.0.1:{s.port}" for s in servers)
    try:
        for url, needle in [
            (f"grpc://{mutual}", "the URL is grpcs://"),
            (f"grpcs://{mutual}", "--tls-cert and --tls-key"),
            (f"grpcs://{plain}", "the URL is grpc://"),
        ]:
            result = _cli("stats", url, "--tls-ca", str(pki / "ca.pem"))
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 1 and len(lines) == 1, result.stderr
            assert needle in lines[0], lines[0]
        with_cert = ["--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key")]
        ok = _cli("stats", f"grpcs://{mutual}", "--tls-ca", str(pki / "ca.pem"), *with_cert)
        assert ok.returncode == 0, ok.stderr
    finally:
        for srv in servers:
            srv.stop()


def test_the_stats_line_of_docs_trust_runs_against_its_server(tmp_path):
    """docs/trust.md's serve line (tokens and TLS) and its stats line, as written: the
    stats line needs the token the server asks for (issue 27, 8)."""
    recipe = section_block("docs/trust.md", "TLS with your own CA", "sh")
    subprocess.run(["bash", "-e", "-c", recipe.text], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    serve, stats = commands(section_block("docs/trust.md", "TLS with your own CA", "sh", 1))
    token = "read-token-for-the-docs-0123"
    (tmp_path / "tokens").write_text(f"read {token} docs\n")
    args = serve[serve.index("--tokens") :]
    args[1] = str(tmp_path / "tokens")
    srv = start_server(tmp_path, *[str(tmp_path / a) if a.endswith((".pem", ".key")) else a
                                   for a in args])  # fmt: skip
    try:
        line = " ".join(stats).replace("cache.internal:7070", f"127.0.0.1:{srv.port}")
        line = line.replace("$READ_TOKEN", '"$READ_TOKEN"')
        out = subprocess.run(["bash", "-c", f"{sys.executable} -m {line}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60,
                             env=child_env({"READ_TOKEN": token}))  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "entries" in out.stdout
    finally:
        srv.stop()
