"""Cache settings: from `initialize_cache` arguments, else from the environment.

Environment variables (arguments win over them):

    XLACACHE_DIR                local cache directory (torch_xla: XLA_PERSISTENT_CACHE_PATH)
    XLACACHE_READONLY           1/true: never write (torch_xla: XLA_PERSISTENT_CACHE_READ_ONLY)
    XLACACHE_ROLE               writer or reader (default: rank 0 writes, other ranks read)
    RANK, TPU_WORKER_ID, CLOUD_TPU_TASK_ID   this process's rank, for the default role
    XLACACHE_SINGLE_FLIGHT      0: every worker that misses compiles (default 1: one does)
    XLACACHE_LEASE_TTL          a dead compiler's lease expires after this (default 30s)
    XLACACHE_MAX_WAIT           longest wait for another worker's compile (default 30m)
    XLACACHE_WRITER_GRACE       how long a reader waits for a writer to start compiling
                                (default 10s for readers by rank or role, 0 for readonly;
                                only in a store a writer has made)
    XLACACHE_REMOTE             shared store URL: grpc://cache:7070 or gs://bucket/prefix
    XLACACHE_TOKEN              bearer token for grpc:// (or XLACACHE_TOKEN_FILE); for gs://,
                                gcsfs's token (a key file; unset: default credentials)
    XLACACHE_MAX_SIZE           local size cap, e.g. 20GB (least recently used go first)
    XLACACHE_MAX_AGE            drop local entries older than this, e.g. 30d
    XLACACHE_MIN_COMPILE_SECONDS  store only executables that took at least this long
    XLACACHE_PREFETCH           how many recently used executables to load ahead (0: off)
    XLACACHE_JOB                this process's job name: a writer records what it used in
                                the shared store, a new worker of the job prefetches it
    XLACACHE_EXPLAIN            1: log why each miss missed and record it (xlacache explain)
    XLACACHE_KEEP_HLO           1: keep the stripped module text in entries (HLO diffs)
    XLACACHE_SIGNING_KEY        sign every entry written with this key (text or file)
    XLACACHE_TRUSTED_KEYS       load only entries signed by one of these (comma-separated)
    XLACACHE_TLS_CA, XLACACHE_TLS_CERT, XLACACHE_TLS_KEY   PEM files for grpcs:// remotes
    XLACACHE_SERVE_<SETTING>    settings of `xlacache serve` (see xlacache.server.config)

This module is the only one that reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from xlacache.errors import ConfigError
from xlacache.units import parse_duration, parse_size

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
ENV_TOKEN = "XLACACHE_TOKEN"
ENV_TOKEN_FILE = "XLACACHE_TOKEN_FILE"
ENV_TLS = {
    "tls_ca": "XLACACHE_TLS_CA",
    "tls_cert": "XLACACHE_TLS_CERT",
    "tls_key": "XLACACHE_TLS_KEY",
}
SERVE_PREFIX = "XLACACHE_SERVE_"
ROLES = ("writer", "reader")
RANK_VARIABLES = ("RANK", "TPU_WORKER_ID", "CLOUD_TPU_TASK_ID")
DEFAULT_LEASE_TTL = 30.0
DEFAULT_MAX_WAIT = 1800.0
DEFAULT_WRITER_GRACE = 10.0


@dataclass(frozen=True)
class CacheConfig:
    path: str
    readonly: bool = False  # the reader role: nothing is written anywhere
    role: str = "writer"  # "writer" or "reader" (readonly), as resolve_role decided
    role_origin: str = "default"  # what decided it (an argument, the environment, a rank)
    remote: str | None = None
    token: str | None = None
    max_size: int | None = None
    max_age: float | None = None
    min_compile_seconds: float = 0.0
    prefetch: int = 32
    job: str | None = None  # the job's name in the shared store's manifests (prefetch)
    explain: bool = False
    keep_hlo: bool = False
    signing_key: str | None = None  # key text or file (xlacache.signing)
    trusted_keys: tuple[str, ...] | None = None  # key texts or files
    single_flight: bool = True  # workers missing one key at once compile it once
    lease_ttl: float = DEFAULT_LEASE_TTL
    max_wait: float = DEFAULT_MAX_WAIT
    writer_grace: float = 0.0

    def describe(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        for secret in ("token", "signing_key", "trusted_keys"):
            if shown[secret]:
                shown[secret] = "***"
        return ", ".join(f"{k}={v!r}" for k, v in shown.items() if v not in (None, False))


def parse_bool(value: str | bool, name: str = "value") -> bool:
    """True from 1/true/yes/on, False from 0/false/no/off or nothing; else ConfigError."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use 1 or 0)")


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        if env.get(name):
            return name, env[name]
    return None


def split_list(value: str | os.PathLike | Iterable[str | os.PathLike]) -> tuple[str, ...]:
    """Items of a comma-separated string or of a list, stripped, empty ones dropped."""
    items = os.fspath(value).split(",") if isinstance(value, (str, os.PathLike)) else value
    return tuple(text for item in items if (text := os.fspath(item).strip()))


def from_env(env: Mapping[str, str] = os.environ) -> dict:
    """The settings the environment gives, as initialize_cache keyword arguments."""
    found: dict = {}
    if hit := _first(env, "XLACACHE_DIR", "XLA_PERSISTENT_CACHE_PATH"):
        found["path"] = hit[1]
    if hit := _first(env, "XLACACHE_READONLY", "XLA_PERSISTENT_CACHE_READ_ONLY"):
        found["readonly"] = parse_bool(hit[1], hit[0])
    if hit := _first(env, "XLACACHE_REMOTE"):
        found["remote"] = hit[1]
    if token := remote_token(env):
        found["token"] = token
    if hit := _first(env, "XLACACHE_MAX_SIZE"):
        found["max_size"] = parse_size(hit[1])
    if hit := _first(env, "XLACACHE_MAX_AGE"):
        found["max_age"] = parse_duration(hit[1])
    if hit := _first(env, "XLACACHE_MIN_COMPILE_SECONDS"):
        found["min_compile_seconds"] = parse_duration(hit[1])
    if hit := _first(env, "XLACACHE_PREFETCH"):
        try:
            found["prefetch"] = int(hit[1])
        except ValueError:
            raise ConfigError(f"XLACACHE_PREFETCH={hit[1]!r} is not a whole number") from None
    if hit := _first(env, "XLACACHE_JOB"):
        found["job"] = hit[1]
    if hit := _first(env, "XLACACHE_EXPLAIN"):
        found["explain"] = parse_bool(hit[1], hit[0])
    if hit := _first(env, "XLACACHE_KEEP_HLO"):
        found["keep_hlo"] = parse_bool(hit[1], hit[0])
    if hit := _first(env, "XLACACHE_SIGNING_KEY"):
        found["signing_key"] = hit[1]
    if hit := _first(env, "XLACACHE_TRUSTED_KEYS"):
        found["trusted_keys"] = split_list(hit[1])
    if hit := _first(env, "XLACACHE_ROLE"):
        found["role"] = hit[1]
    if hit := _first(env, "XLACACHE_SINGLE_FLIGHT"):
        found["single_flight"] = parse_bool(hit[1], hit[0])
    for name in ("lease_ttl", "max_wait", "writer_grace"):
        if hit := _first(env, f"XLACACHE_{name.upper()}"):
            found[name] = parse_duration(hit[1])
    return found


def env_rank(env: Mapping[str, str] = os.environ) -> tuple[int, str] | None:
    """(rank, variable) from RANK, TPU_WORKER_ID or CLOUD_TPU_TASK_ID, or None."""
    if hit := _first(env, *RANK_VARIABLES):
        try:
            rank = int(hit[1])
        except ValueError:
            raise ConfigError(f"{hit[0]}={hit[1]!r} is not a whole number") from None
        if rank < 0:
            raise ConfigError(f"{hit[0]}={hit[1]!r} is negative")
        return rank, hit[0]
    return None


def resolve_role(
    arguments: Mapping, environment: Mapping, rank: tuple[int, str] | None
) -> tuple[str, str]:
    """(role, origin): who writes.

    `role` ("writer"/"reader") and `readonly` (True: reader) are two spellings of one
    setting. Arguments decide if they give either; else the environment (XLACACHE_ROLE,
    XLACACHE_READONLY); within one level a contradiction is a ConfigError. Otherwise
    the rank does: rank 0 writes and the others read (one writer per SPMD pod); with
    no rank at all, a single process writes.
    """
    for level, values in (("argument", arguments), ("environment", environment)):
        role, readonly = values.get("role"), values.get("readonly")
        if role is None and readonly is None:
            continue
        if role is None:
            return ("reader" if readonly else "writer"), f"readonly={bool(readonly)} ({level})"
        role = str(role).strip().lower()
        if role not in ROLES:
            raise ConfigError(f"role={role!r} ({level}): expected writer or reader")
        if readonly is not None and bool(readonly) != (role == "reader"):
            raise ConfigError(f"role={role!r} contradicts readonly={readonly} ({level})")
        return role, f"role={role} ({level})"
    if rank is None:
        return "writer", "no rank: a single process writes"
    number, source = rank
    return ("writer" if number == 0 else "reader"), f"rank {number} ({source})"


def remote_token(env: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token for remote stores: XLACACHE_TOKEN, else the XLACACHE_TOKEN_FILE's."""
    if token := env.get(ENV_TOKEN):
        return token
    if path := env.get(ENV_TOKEN_FILE):
        return Path(path).expanduser().read_text().strip() or None
    return None


def remote_tls_files(env: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """PEM file paths for grpcs:// remotes by option name (tls_ca, tls_cert, tls_key)."""
    return {option: env.get(name) or None for option, name in ENV_TLS.items()}


def serve_env(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`xlacache serve` settings from XLACACHE_SERVE_<NAME> variables, by lowercase name."""
    return {k[len(SERVE_PREFIX) :].lower(): v for k, v in env.items() if k.startswith(SERVE_PREFIX)}


def _writer_grace(role: str, origin: str) -> float:
    """How long a reader waits, by default, for a writer to start compiling a program.

    A reader by rank or role has a writer in its pod that compiles the same programs:
    it waits for it (where a writer has made the store: `CompilationCache`). readonly=True
    names no writer: it waits only for compiles it sees under way.
    """
    if role != "reader" or origin.startswith("readonly"):
        return 0.0
    return DEFAULT_WRITER_GRACE


def resolve(
    path: str | os.PathLike | None = None, *, rank: tuple[int, str] | None = None, **overrides
) -> CacheConfig:
    """Merge arguments over the environment; a path must come from one of them.

    `rank`: (rank, where from) when the caller knows it (jax.process_index() of a running
    jax.distributed job); else RANK, TPU_WORKER_ID or CLOUD_TPU_TASK_ID (`resolve_role`).
    """
    settings = from_env()
    arguments = {k: v for k, v in overrides.items() if v is not None}
    role, origin = resolve_role(arguments, settings, rank if rank is not None else env_rank())
    for name in ("role", "readonly"):
        settings.pop(name, None)
        arguments.pop(name, None)
    if path is not None:
        settings["path"] = str(path)
    settings.update(arguments)
    settings.update(role=role, role_origin=origin, readonly=role == "reader")
    for name in ("lease_ttl", "max_wait", "writer_grace"):
        if isinstance(settings.get(name), str):
            settings[name] = parse_duration(settings[name])
        if name in settings and not float(settings[name]) >= 0:
            raise ConfigError(f"{name} must be a duration of 0 or more")
    if not settings.get("path"):
        raise ConfigError(
            "initialize_cache needs a path (argument, XLACACHE_DIR or XLA_PERSISTENT_CACHE_PATH)"
        )
    settings["path"] = str(Path(settings["path"]).expanduser().absolute())
    if settings.get("writer_grace") is None:
        settings["writer_grace"] = _writer_grace(role, origin)
    if isinstance(settings.get("max_size"), str):
        settings["max_size"] = parse_size(settings["max_size"])
    if isinstance(settings.get("max_age"), str):
        settings["max_age"] = parse_duration(settings["max_age"])
    if settings.get("signing_key") is not None:
        settings["signing_key"] = os.fspath(settings["signing_key"])
    if settings.get("trusted_keys") is not None:
        settings["trusted_keys"] = split_list(settings["trusted_keys"])
    known = {f.name for f in fields(CacheConfig)}
    if unknown := set(settings) - known:
        raise ConfigError(f"unknown cache settings: {', '.join(sorted(unknown))}")
    return replace(CacheConfig(path=settings.pop("path")), **settings)
