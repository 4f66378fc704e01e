"""Checks made before the daemon listens, so that a port in use or a bad TLS file is a
one-line ConfigError rather than whatever grpcio raises (and logs) when it fails."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from xlacache.errors import ConfigError
from xlacache.server.config import ServerConfig, split_host_port


def check_bindable(address: str, what: str) -> None:
    """ConfigError unless some address `address` resolves to can be bound now.

    grpcio binds with SO_REUSEADDR and succeeds if any resolved address binds; this
    does the same with a throwaway socket. (A race with another process is still
    possible; the bind itself then fails, see `bind_failed`.)
    """
    host, port = split_host_port(address)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {address} for {what}: {exc.strerror}") from None
    failure: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(sockaddr)
                return
        except OSError as exc:
            failure = failure or exc
    raise bind_failed(address, what, failure)


def bind_failed(address: str, what: str, exc: BaseException | None = None) -> ConfigError:
    """The one-line error for an address that cannot be listened on."""
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        reason = "the port is in use"
    elif isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:
        reason = "not an address of this host"
    elif isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    else:
        reason = "the port is in use, or not an address of this host"
    return ConfigError(f"cannot listen on {address} for {what}: {reason}")


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None


def _certificates(data: bytes, path: str, what: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"{what} {path} holds no PEM certificate")
    return certs


def tls_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """The server's TLS credentials (None without --tls-cert), after checking that the
    certificate chain and key parse and that the key is the certificate's."""
    if not config.tls_cert:
        return None
    cert_pem = _read(config.tls_cert, "--tls-cert")
    key_pem = _read(config.tls_key, "--tls-key")
    chain = _certificates(cert_pem, config.tls_cert, "--tls-cert")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        reason = "it is encrypted" if isinstance(exc, TypeError) else "not a PEM private key"
        raise ConfigError(
            f"--tls-key {config.tls_key}: cannot load the private key: {reason}"
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    ours = key.public_key().public_bytes(serialization.Encoding.DER, public)
    if chain[0].public_key().public_bytes(serialization.Encoding.DER, public) != ours:
        raise ConfigError(
            f"--tls-key {config.tls_key} does not match the certificate in {config.tls_cert}"
        )
    client_ca = None
    if config.tls_client_ca:
        client_ca = _read(config.tls_client_ca, "--tls-client-ca")
        _certificates(client_ca, config.tls_client_ca, "--tls-client-ca (client CA)")
    return grpc.ssl_server_credentials(
        [(key_pem, cert_pem)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
