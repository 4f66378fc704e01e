"""Settings of `xlacache serve`, declared once: `SERVER_SETTINGS`, one row per setting.

Every setting has one name used everywhere, derived from its row: `max_size` is
`--max-size` on the command line (`cli/serve.py` builds its options from the table),
`max_size` in a config file (TOML, JSON, or YAML when PyYAML is installed) and
`XLACACHE_SERVE_MAX_SIZE` in the environment; `ServerConfig`'s fields and the table of
deploy/README.md are derived too. Precedence: defaults < config file < environment <
command line. `XLACACHE_SERVE_CONFIG` names a config file when `--config` is not given.
This module is where the server reads the environment.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import make_dataclass, replace
from pathlib import Path
from typing import Any

from xlacache.config import BOOL, COUNT, DURATION, FILE, SIZE, TEXT, Kind, Setting, split_list
from xlacache.entry import MAX_ENTRY_SIZE
from xlacache.errors import ConfigError
from xlacache.protocol import DEFAULT_PORT
from xlacache.signing import TrustedKeys, load_trusted_keys
from xlacache.stores import is_bucket_url, store_kind
from xlacache.stores.durability import fsync_mode
from xlacache.units import compact_size

ENV_PREFIX = "XLACACHE_SERVE_"  # XLACACHE_SERVE_<SETTING> for every setting
CONFIG_VARIABLE = f"{ENV_PREFIX}CONFIG"  # names a config file (--config)
DEFAULT_METRICS_PORT = 9090
LOOPBACK_NAMES = {"localhost"}


def _address(value: Any, name: str = "address") -> str:
    """HOST:PORT as given; a bare PORT listens on loopback (127.0.0.1:PORT)."""
    text = str(value).strip()
    return f"127.0.0.1:{text}" if text.isdigit() else text


ADDRESS = Kind("address", str | None, str, _address)
KEYS = Kind("keys", str | None, str, lambda v, n: ",".join(split_list(v)))  # a file: a list
FSYNC = Kind("always|background|off", str | None, str, lambda v, n: fsync_mode(v))


def _serve(name: str, kind: Kind, default: Any, help: str, option: str | None = None) -> Setting:
    env = (f"{ENV_PREFIX}{name.upper()}",)
    return Setting(name, kind, default, env, help, "deploy/README.md", option=option)


SERVER_SETTINGS: tuple[Setting, ...] = (
    _serve("store", TEXT, "", "Cache directory to serve, or gs://BUCKET/PREFIX (with "
           "--cache-dir): several replicas may serve one bucket."),
    _serve("cache_dir", TEXT, None, "Local directory in front of a gs:// store "
           "(read-through, write-through; --max-size bounds it)."),
    _serve("listen", ADDRESS, f"127.0.0.1:{DEFAULT_PORT}",
           "HOST:PORT for gRPC (PORT alone: loopback)."),
    _serve("max_size", SIZE, None, "Evict least recently used entries beyond this (e.g. 50GB)."),
    _serve("max_entry_size", SIZE, MAX_ENTRY_SIZE, "Largest entry accepted."),
    _serve("metrics_listen", ADDRESS, None, "HOST:PORT (or PORT: loopback) for /metrics and "
           "the status page; with --tokens they need a token (Bearer, or basic auth with the "
           "token as password)."),
    _serve("tls_cert", FILE, None, "Server certificate (PEM)."),
    _serve("tls_key", FILE, None, "Server private key (PEM)."),
    _serve("tls_client_ca", FILE, None, "Require client certificates signed by this CA (mTLS)."),
    _serve("tokens", FILE, None, "Token file: lines of 'ROLE TOKEN [NAME]' "
           "(read|write|admin|metrics; tokens of 16+ characters); none: the server is open."),
    _serve("token_check_interval", DURATION, 2.0, "How often the token file is read for "
           "changes: a changed file is reloaded at once, a malformed one keeps the tokens "
           "loaded before (0: only on SIGHUP, which always reloads)."),
    _serve("require_signed_by", KEYS, None, "Accept only uploads signed by one of these keys "
           "(comma-separated key texts or files, as XLACACHE_TRUSTED_KEYS); others get "
           "PERMISSION_DENIED."),
    _serve("allow_open", BOOL, False, "Serve without tokens on a non-loopback address.",
           option="--allow-open"),
    _serve("workers", COUNT, 128, "Cache RPCs served at once, a thread each; more are refused "
           "at once with RESOURCE_EXHAUSTED. Health checks have threads of their own."),
    _serve("max_streams", COUNT, 256, "RPCs of any service in flight, queued included, before "
           "gRPC itself refuses them (more than --workers)."),
    _serve("upload_memory", SIZE, 4 * 1024**3,
           "Bytes received by uploads in progress at once; more wait."),
    _serve("request_timeout", DURATION, 600.0, "Longest one RPC may run."),
    _serve("idle_timeout", DURATION, 20.0,
           "Cancel a Get or Put that moves no message for this long (0: never)."),
    _serve("shutdown_grace", DURATION, 30.0, "Time in-flight RPCs get on SIGTERM."),
    _serve("reconcile_interval", DURATION, 600.0,
           "How often to match the index to the entry files (0: never)."),
    _serve("chunk_size", SIZE, 1024 * 1024, "Bytes of entry data per streamed message."),
    _serve("fsync", FSYNC, "off", "When stored entries reach the disk: 'always' (fsync "
           "before acknowledging), 'background' (fsynced within a second) or 'off' (the kernel "
           "writes back within ~30 s; a graceful stop syncs). Reads verify every entry: a "
           "machine crash costs recent entries, never bad data."),
    _serve("direct_io", BOOL, False, "Write uploads with O_DIRECT, bypassing the page cache: "
           "less CPU per stored byte, but an entry's first read comes from disk.",
           option="--direct-io/--no-direct-io"),
    _serve("log_level", TEXT, "INFO", "DEBUG, INFO, WARNING."),
    _serve("sample_interval", DURATION, 30.0, "Status page history: one sample every."),
)  # fmt: skip
SERVER_BY_NAME = {s.name: s for s in SERVER_SETTINGS}


def show_default(setting: Setting) -> str | None:
    """A setting's default as --help and the docs show it (None: no default)."""
    value = setting.default
    if value in (None, ""):
        return None
    if setting.kind is SIZE:
        return compact_size(value)
    if setting.kind is DURATION:
        return f"{value:g}s"
    if setting.kind is BOOL:
        return "on" if value else "off"
    return str(value)


class _Checks:
    """What ServerConfig checks once its fields are merged (the fields: SERVER_SETTINGS)."""

    def validate(self) -> ServerConfig:
        if not self.store:
            raise ConfigError("no store: pass --store DIR or --store gs://BUCKET/PREFIX")
        if is_bucket_url(self.store):
            if not self.cache_dir:
                raise ConfigError(
                    f"--store {self.store} needs --cache-dir DIR (local disk in front of it)"
                )
        elif store_kind(self.store) != "directory":
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
        for address, what in ((self.listen, "serve"), (self.metrics_listen, "show the status "
                              "page and metrics")):  # fmt: skip
            if address and not self.tokens and not self.allow_open and not is_loopback(address):
                raise ConfigError(
                    f"refusing to {what} without tokens on {address}, beyond loopback: pass "
                    "--tokens FILE, or --allow-open to serve an open cache on purpose"
                )
        if self.max_entry_size <= 0 or self.chunk_size <= 0 or self.workers <= 0:
            raise ConfigError("sizes and counts must be positive")
        if self.upload_memory < self.max_entry_size:
            raise ConfigError("upload_memory must be at least max_entry_size")
        if self.max_streams <= self.workers:
            raise ConfigError("max_streams must be more than workers (room for health checks)")
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


def _field(setting: Setting):
    holds = setting.kind.holds
    return setting.name, holds if setting.default is not None else holds | None, setting.default


ServerConfig = make_dataclass(
    "ServerConfig",
    [_field(s) for s in SERVER_SETTINGS],
    bases=(_Checks,),
    frozen=True,
    namespace={"__module__": __name__},
)
ServerConfig.__doc__ = "The settings of one `xlacache serve`: a field per row of SERVER_SETTINGS."


def _convert(name: str, value: Any, spelled: str) -> Any:
    """`value` of setting `name` parsed; errors call it `spelled` (the option, variable or
    config file key the user wrote)."""
    kind = SERVER_BY_NAME[name].kind
    if value is None:
        return None
    if kind in (SIZE, DURATION) and isinstance(value, (int, float)):
        value = str(value)  # a number in a config file needs its unit, as on the command line
    try:
        return kind.parse(value, spelled)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(spelled) else f"{spelled}: {text}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid {spelled}: {value!r}") from exc


def _known(source: str, values: Mapping[str, Any], spell=lambda raw: raw) -> dict[str, Any]:
    out = {}
    for raw_name, value in values.items():
        name = raw_name.replace("-", "_")
        if name not in SERVER_BY_NAME:
            raise ConfigError(f"unknown setting {raw_name!r} in {source}")
        out[name] = _convert(name, value, spell(raw_name))
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
    return _known(str(path), data, spell=lambda name: f"{name} ({path})")


def serve_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """XLACACHE_SERVE_<NAME> variables by lowercase name (`config` included)."""
    env = os.environ if env is None else env
    return {k[len(ENV_PREFIX) :].lower(): v for k, v in env.items() if k.startswith(ENV_PREFIX)}


def env_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings from XLACACHE_SERVE_<NAME> variables (names that are no setting are ignored)."""
    found = serve_env(env)
    return _known(
        "the environment",
        {k: v for k, v in found.items() if k in SERVER_BY_NAME},
        spell=lambda name: f"{ENV_PREFIX}{name.upper()}",
    )


def load_config(
    cli: Mapping[str, Any] | None = None,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Merge the layers (command-line values of None mean "not given") and validate.

    `env` stands in for the process environment (tests).
    """
    config_file = config_file or serve_env(env).get("config")
    merged: dict[str, Any] = {}
    if config_file:
        merged.update(read_config_file(config_file))
    merged.update(env_settings(env))
    merged.update(
        _known(
            "the command line",
            {k: v for k, v in (cli or {}).items() if v is not None},
            spell=lambda name: f"--{name.replace('_', '-')}",
        )
    )
    return replace(ServerConfig(), **merged).validate()


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
