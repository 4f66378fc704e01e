"""TLS and mutual TLS with throwaway certificates made by the openssl command."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from srvutil import make_entry, start_server

from xlacache.errors import StoreUnavailableError
from xlacache.stores import open_store
from xlacache.stores.resilience import CircuitBreaker

pytestmark = [
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
