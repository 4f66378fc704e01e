"""Settings of `xlacache serve`: defaults < config file < environment < command line.

Every setting has one name used everywhere: `max_size` is `--max-size` on the command
line, `max_size` in a config file (TOML, JSON, or YAML when PyYAML is installed) and
`XLACACHE_SERVE_MAX_SIZE` in the environment. `XLACACHE_SERVE_CONFIG` names a config
file when `--config` is not given.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from xlacache.config import SERVE_PREFIX, parse_bool, serve_env, split_list
from xlacache.entry import MAX_ENTRY_SIZE
from xlacache.errors import ConfigError
from xlacache.protocol import DEFAULT_PORT
from xlacache.signing import TrustedKeys, load_trusted_keys
from xlacache.stores.durability import fsync_mode
from xlacache.units import parse_duration, parse_size

ENV_PREFIX = SERVE_PREFIX  # XLACACHE_SERVE_<SETTING> for every setting
DEFAULT_METRICS_PORT = 9090
LOOPBACK_NAMES = {"localhost"}


@dataclass(frozen=True)
class ServerConfig:
    store: str = ""  # a cache directory, or gs://bucket/prefix (then cache_dir is needed)
    cache_dir: str | None = None  # local directory in front of a gs:// store
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    max_size: int | None = None  # bytes; least recently used entries are evicted beyond it
    max_entry_size: int = MAX_ENTRY_SIZE
    metrics_listen: str | None = None  # host:port of the /metrics + status page listener
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None  # set: clients must present a certificate it signed
    tokens: str | None = None  # token file; none: the server is open
    # Key specs (texts or files, comma-separated): uploads must be signed by one of them.
    require_signed_by: str | None = None
    allow_open: bool = False  # serve without tokens on a non-loopback address
    workers: int = 128  # Cache RPCs running at once, a thread each; more: RESOURCE_EXHAUSTED
    max_streams: int = 256  # RPCs of any service at once, queued included (gRPC's own cap)
    upload_memory: int = 4 * 1024**3  # bytes received by uploads in progress; more wait
    request_timeout: float = 600.0  # seconds one RPC may run on the server
    idle_timeout: float = 20.0  # seconds a Get or Put may go without a message (0: never)
    shutdown_grace: float = 30.0  # seconds in-flight RPCs get after SIGTERM
    reconcile_interval: float = 600.0  # seconds between index/entry-file reconciles (0: off)
    chunk_size: int = 1024 * 1024
    fsync: str = "off"  # always | background | off: see xlacache/stores/durability.py
    direct_io: bool = False  # write uploads with O_DIRECT (not cached for readers)
    log_level: str = "INFO"
    sample_interval: float = 30.0  # seconds between the status page's history samples

    def validate(self) -> ServerConfig:
        if not self.store:
            raise ConfigError("no store: pass --store DIR or --store gs://BUCKET/PREFIX")
        scheme = urlparse(self.store).scheme
        if is_bucket_url(self.store):
            if not self.cache_dir:
                raise ConfigError(
                    f"--store {self.store} needs --cache-dir DIR (local disk in front of it)"
                )
        elif scheme not in ("", "file"):
            raise ConfigError(f"cannot serve {self.store!r}: use a directory or gs://BUCKET")
        elif self.cache_dir:
            raise ConfigError("--cache-dir goes with --store gs://...; a directory store is local")
        split_host_port(self.listen)
        if self.metrics_listen:
            split_host_port(self.metrics_listen)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
        for name in ("tls_cert", "tls_key", "tls_client_ca", "tokens"):
            value = getattr(self, name)
            if value and not Path(value).is_file():
                raise ConfigError(f"{name.replace('_', '-')} file not found: {value}")
        if not self.tokens and not self.allow_open and not is_loopback(self.listen):
            raise ConfigError(
                f"refusing to serve without tokens on {self.listen}, beyond loopback: "
                "pass --tokens FILE, or --allow-open to serve an open cache on purpose"
            )
        if self.max_entry_size <= 0 or self.chunk_size <= 0 or self.workers <= 0:
            raise ConfigError("sizes and counts must be positive")
        if self.upload_memory < self.max_entry_size:
            raise ConfigError("upload_memory must be at least max_entry_size")
        if self.max_streams <= self.workers:
            raise ConfigError("max_streams must be more than workers (room for health checks)")
        if self.idle_timeout < 0:
            raise ConfigError("idle_timeout must not be negative")
        if self.reconcile_interval < 0:
            raise ConfigError("reconcile_interval must not be negative")
        if self.sample_interval <= 0:
            raise ConfigError("sample_interval must be positive")
        self.trusted_keys()  # readable keys, or ConfigError now rather than at the first upload
        return self

    def trusted_keys(self) -> TrustedKeys | None:
        """The keys uploads must be signed by (--require-signed-by), or None."""
        if self.require_signed_by is None:
            return None
        try:
            return load_trusted_keys(self.require_signed_by)
        except ConfigError as exc:
            raise ConfigError(f"require_signed_by: {exc}") from None


_CONVERTERS: dict[str, Any] = {
    "max_size": parse_size,
    "max_entry_size": parse_size,
    "upload_memory": parse_size,
    "chunk_size": parse_size,
    "request_timeout": parse_duration,
    "idle_timeout": parse_duration,
    "shutdown_grace": parse_duration,
    "reconcile_interval": parse_duration,
    "sample_interval": parse_duration,
    "require_signed_by": lambda v: ",".join(split_list(v)),  # a config file may give a list
    "workers": int,
    "max_streams": int,
    "fsync": fsync_mode,
}


_BOOLEANS = {"allow_open", "direct_io"}


def _convert(name: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        if name in _BOOLEANS:
            return parse_bool(value, name)
        if name in _CONVERTERS:
            return _CONVERTERS[name](value)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {name}: {value!r}") from exc
    return str(value)


def _known(source: str, values: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(ServerConfig)}
    out = {}
    for raw_name, value in values.items():
        name = raw_name.replace("-", "_")
        if name not in names:
            raise ConfigError(f"unknown setting {raw_name!r} in {source}")
        out[name] = _convert(name, value)
    return out


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Settings from a TOML, JSON or YAML file (an optional top-level `serve` table)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            import tomllib

            data = tomllib.loads(text)
    except ImportError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - each parser has its own error types
        raise ConfigError(f"config file {path} is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table of settings")
    data = data.get("serve", data)
    return _known(str(path), data)


def env_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings from XLACACHE_SERVE_<NAME> variables (names that are no setting are ignored)."""
    names = {f.name for f in fields(ServerConfig)}
    found = serve_env() if env is None else serve_env(env)
    return _known("the environment", {k: v for k, v in found.items() if k in names})


def load_config(
    cli: Mapping[str, Any] | None = None,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Merge the layers (command-line values of None mean "not given") and validate.

    `env` stands in for the process environment (tests).
    """
    config_file = config_file or (serve_env() if env is None else serve_env(env)).get("config")
    merged: dict[str, Any] = {}
    if config_file:
        merged.update(read_config_file(config_file))
    merged.update(env_settings(env))
    merged.update(
        _known("the command line", {k: v for k, v in (cli or {}).items() if v is not None})
    )
    return replace(ServerConfig(), **merged).validate()


def is_bucket_url(store: str) -> bool:
    """Whether a --store value names a Cloud Storage bucket (gs:// or gcs://)."""
    return urlparse(store).scheme in ("gs", "gcs")


def split_host_port(address: str) -> tuple[str, int]:
    """('127.0.0.1', 7070) from '127.0.0.1:7070'; '[::1]:7070' for IPv6."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(f"invalid address {address!r} (expected HOST:PORT)")
    if not 0 <= int(port) <= 65535:
        raise ConfigError(f"invalid port in {address!r}")
    return host.strip("[]"), int(port)


def is_loopback(address: str) -> bool:
    host, _ = split_host_port(address)
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
