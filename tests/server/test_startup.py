"""`xlacache serve` refuses what it cannot serve with one line and a non-zero exit:
ports in use, bad TLS files, token files that would not mean what they say."""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from xlacache.errors import ConfigError
from xlacache.server.auth import TokenTable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOKEN = "read-token-0123456789abcdef"


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlacache", "serve", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("xlacache serve: error:")
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.fixture
def taken_port():
    """A loopback port held by a listening socket for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_grpc_port_in_use(tmp_path, taken_port):
    result = serve("--store", str(tmp_path / "s"), "--listen", f"127.0.0.1:{taken_port}")
    assert_one_line_error(result, f"127.0.0.1:{taken_port}", "in use")


def test_metrics_port_in_use(tmp_path, taken_port):
    result = serve(
        "--store", str(tmp_path / "s"), "--listen", "127.0.0.1:0",
        "--metrics-listen", f"127.0.0.1:{taken_port}",
    )  # fmt: skip
    assert_one_line_error(result, f"127.0.0.1:{taken_port}", "metrics", "in use")


def test_an_address_not_of_this_host(tmp_path):
    result = serve("--store", str(tmp_path / "s"), "--listen", "192.0.2.1:7070", "--allow-open")
    assert_one_line_error(result, "192.0.2.1:7070")


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _self_signed(key) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def pki(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "cert.pem").write_bytes(_self_signed(key))
    (tmp_path / "key.pem").write_bytes(_key_pem(key))
    (tmp_path / "other.key").write_bytes(_key_pem(ec.generate_private_key(ec.SECP256R1())))
    (tmp_path / "garbage.pem").write_text("not a PEM file\n")
    return tmp_path


@pytest.mark.parametrize(
    ("cert", "key", "client_ca", "needle"),
    [
        ("garbage.pem", "key.pem", None, "certificate"),
        ("cert.pem", "garbage.pem", None, "private key"),
        ("cert.pem", "other.key", None, "does not match"),
        ("cert.pem", "key.pem", "garbage.pem", "client CA"),
    ],
)
def test_bad_tls_files(pki, cert, key, client_ca, needle):
    args = ["--store", str(pki / "s"), "--listen", "127.0.0.1:0"]
    args += ["--tls-cert", str(pki / cert), "--tls-key", str(pki / key)]
    if client_ca:
        args += ["--tls-client-ca", str(pki / client_ca)]
    assert_one_line_error(serve(*args), needle)


def test_good_tls_files_pass_the_checks(pki):
    from xlacache.server.config import ServerConfig
    from xlacache.server.listen import tls_credentials

    config = ServerConfig(
        store=str(pki / "s"),
        tls_cert=str(pki / "cert.pem"),
        tls_key=str(pki / "key.pem"),
        tls_client_ca=str(pki / "cert.pem"),
    )
    assert tls_credentials(config) is not None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (f"read {TOKEN}#suffix worker\n", "'#'"),
        (f"read {TOKEN}#\n", "'#'"),
        (f"read {TOKEN} worker\nwrite {TOKEN} trainer\n", "line 1"),
    ],
)
def test_token_files_that_would_not_mean_what_they_say(text, needle):
    with pytest.raises(ConfigError) as caught:
        TokenTable.parse(text, source="tokens")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_token_file_comments_still_work():
    table = TokenTable.parse(f"# role token name\nread {TOKEN} worker  # a comment\n\n")
    assert len(table) == 1
    principal = table.authenticate([("authorization", f"Bearer {TOKEN}")])
    assert principal.name == "worker"


def test_a_bad_token_file_stops_the_server_with_one_line(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {TOKEN} worker\nadmin {TOKEN} ops\n")
    result = serve(
        "--store", str(tmp_path / "s"), "--listen", "127.0.0.1:0", "--tokens", str(tokens)
    )
    assert_one_line_error(result, "duplicate")
