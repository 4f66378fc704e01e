"""Client settings, declared once: `SETTINGS`, one row per setting.

A row names the setting, its kind (type and parser), default, environment variables,
help and the page that documents it. Everything else is derived from the table:
`initialize_cache`'s keyword arguments (its signature and the list in its docstring),
`CacheConfig`'s fields, the parsing of the environment (`from_env`), the CLI's TLS
options, and the settings table of the README (`tools/doctables.py`; a test fails when
it is stale). A new client setting is one row here; the code that uses it reads
`CacheConfig.<name>`.

Arguments win over the environment. `role` and `readonly` are two spellings of one
choice (`resolve_role`); without either, the rank decides (RANK, TPU_WORKER_ID or
CLOUD_TPU_TASK_ID: rank 0 writes, the others read).

This module is where the client reads the environment: the settings' variables and the
rank variables. `quiet_grpc_logging` sets GRPC_VERBOSITY's default before a gRPC client
starts. Elsewhere, by design (docs/architecture.md lists them, a test checks the list):
`jax_bridge` reads XLA_FLAGS and LIBTPU_INIT_ARGS (key inputs, not settings),
`stores/gcs_objects` STORAGE_EMULATOR_HOST (and defaults GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT),
the lazy runtime its own (torch_xla's XLA_* and XLACACHE_LAZY_*, the launcher's RANK,
MASTER_ADDR, ...), and the server its XLACACHE_SERVE_* (`xlacache.server.config`).
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from xlacache import counters
from xlacache.errors import ConfigError
from xlacache.units import parse_duration, parse_size

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
BOOL_FORMS = "1, true, yes, on or 0, false, no, off"
ROLES = ("writer", "reader")
RANK_VARIABLES = ("RANK", "TPU_WORKER_ID", "CLOUD_TPU_TASK_ID")
DEFAULT_WRITER_GRACE = 10.0


def parse_bool(value: str | bool, name: str = "value") -> bool:
    """True from 1/true/yes/on, False from 0/false/no/off or nothing; else ConfigError."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean ({BOOL_FORMS})")


def split_list(value: str | os.PathLike | Iterable[str | os.PathLike]) -> tuple[str, ...]:
    """Items of a comma-separated string or of a list, stripped, empty ones dropped."""
    items = os.fspath(value).split(",") if isinstance(value, (str, os.PathLike)) else value
    return tuple(text for item in items if (text := os.fspath(item).strip()))


def whole(value: Any, name: str, minimum: int = 0) -> int:
    """A whole number of at least `minimum` (a count), else ConfigError naming `name`."""
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        number = None
    if number is None or isinstance(value, bool) or number < minimum:
        raise ConfigError(f"{name}={value!r} is not a whole number of {minimum} or more")
    return number


def duration(value: Any, name: str, positive: bool = False) -> float:
    """Seconds from a duration with its unit (`units.parse_duration`), 0 or more (more
    than 0 when `positive`), else ConfigError naming `name`."""
    seconds = parse_duration(value, name)
    if not (seconds > 0 if positive else seconds >= 0):
        bound = "more than 0" if positive else "0 or more"
        raise ConfigError(f"{name} must be a duration of {bound}")
    return seconds


def role(value: Any, name: str) -> str:
    text = str(value).strip().lower()
    if text not in ROLES:
        raise ConfigError(f"{name}={value!r}: expected writer or reader")
    return text


@dataclass(frozen=True)
class Kind:
    """A kind of setting: what `initialize_cache` accepts, what the setting holds, and the
    parser that turns either (or an environment variable's text) into the latter."""

    name: str  # as the docs show it
    accepts: Any  # the argument's annotation
    holds: Any  # the CacheConfig field's annotation
    parse: Callable[[Any, str], Any]  # (value, setting or variable name) -> value


TEXT = Kind("text", str | None, str | None, lambda v, n: str(v))
ROLE = Kind("writer|reader", str | None, str | None, role)
PATH = Kind("path", str | os.PathLike | None, str, lambda v, n: os.fspath(v))
FILE = Kind("file", str | os.PathLike | None, str | None, lambda v, n: os.fspath(v))
BOOL = Kind("bool", bool | None, bool, parse_bool)
COUNT = Kind("count", int | None, int, whole)
SIZE = Kind("size", int | str | None, int | None, parse_size)
DURATION = Kind("duration", float | str | None, float, duration)
FILES = Kind(
    "list",
    str | os.PathLike | Iterable[str | os.PathLike] | None,
    tuple[str, ...] | None,
    lambda v, n: split_list(v),
)


@dataclass(frozen=True)
class Setting:
    name: str  # initialize_cache's argument and CacheConfig's field
    kind: Kind
    default: Any
    env: tuple[str, ...]  # environment variables, the first one set wins
    help: str
    doc: str  # the page that documents it
    secret: bool = False  # never shown (CacheConfig.describe)
    env_file: str | None = None  # a variable naming a file that holds the value
    option: str | None = None  # the command-line option, where not --name (serve's flags)
    # What a bad environment value becomes (None: the default): the safe side where the
    # default is not (a bad XLACACHE_READONLY makes a reader, which writes nothing).
    when_invalid: Any = None

    def variables(self) -> tuple[str, ...]:
        return self.env + ((self.env_file,) if self.env_file else ())


SETTINGS: tuple[Setting, ...] = (
    Setting("path", PATH, None, ("XLACACHE_DIR", "XLA_PERSISTENT_CACHE_PATH"),
            "this process's local cache directory (required)", "README.md"),
    Setting("readonly", BOOL, False, ("XLACACHE_READONLY", "XLA_PERSISTENT_CACHE_READ_ONLY"),
            "never write anything (the reader role); works on read-only mounts", "README.md",
            when_invalid=True),
    Setting("role", ROLE, None, ("XLACACHE_ROLE",),
            "writer or reader; default: rank 0 writes, other ranks read, no rank writes",
            "docs/pods.md", when_invalid="reader"),
    Setting("remote", TEXT, None, ("XLACACHE_REMOTE",),
            "shared store: grpc://host:7070 (grpcs:// with TLS) or gs://bucket/prefix",
            "README.md"),
    Setting("token", TEXT, None, ("XLACACHE_TOKEN",),
            "bearer token for grpc:// (XLACACHE_TOKEN_FILE: a file holding it); for gs://, "
            "gcsfs's token", "README.md", secret=True, env_file="XLACACHE_TOKEN_FILE"),
    Setting("tls_ca", FILE, None, ("XLACACHE_TLS_CA",),
            "CA certificate (PEM) that signed a grpcs:// server's certificate, if not a CA "
            "the system trusts", "docs/trust.md"),
    Setting("tls_cert", FILE, None, ("XLACACHE_TLS_CERT",),
            "client certificate (PEM) for a grpcs:// server that asks for one (mutual TLS)",
            "docs/trust.md"),
    Setting("tls_key", FILE, None, ("XLACACHE_TLS_KEY",),
            "the client certificate's private key (PEM)", "docs/trust.md"),
    Setting("max_size", SIZE, None, ("XLACACHE_MAX_SIZE",),
            "local size cap, e.g. 20GB (least recently used go first)", "README.md"),
    Setting("max_age", DURATION, None, ("XLACACHE_MAX_AGE",),
            "drop local entries older than this, e.g. 30d", "README.md"),
    Setting("min_compile_seconds", DURATION, 0.0, ("XLACACHE_MIN_COMPILE_SECONDS",),
            "store only executables that took at least this long to compile", "README.md"),
    Setting("prefetch", COUNT, 32, ("XLACACHE_PREFETCH",),
            "how many recently used executables to load ahead at start-up (0: off)",
            "README.md"),
    Setting("job", TEXT, None, ("XLACACHE_JOB",),
            "this process's job name (1-128 of A-Z a-z 0-9 . _ -): a writer records what it "
            "used in the shared store, a new worker of the job prefetches it", "docs/pods.md"),
    Setting("explain", BOOL, False, ("XLACACHE_EXPLAIN",),
            "log why each miss missed and record it (xlacache explain)",
            "docs/why-recompile.md"),
    Setting("keep_hlo", BOOL, False, ("XLACACHE_KEEP_HLO",),
            "keep the stripped module text in entries (HLO diffs)", "docs/why-recompile.md"),
    Setting("signing_key", FILE, None, ("XLACACHE_SIGNING_KEY",),
            "sign every entry written with this key (key text or file)", "docs/trust.md",
            secret=True),
    Setting("trusted_keys", FILES, None, ("XLACACHE_TRUSTED_KEYS",),
            "load only entries signed by one of these keys (comma-separated texts or files)",
            "docs/trust.md", secret=True),
    Setting("single_flight", BOOL, True, ("XLACACHE_SINGLE_FLIGHT",),
            "workers that miss one program at once compile it once (0: each compiles)",
            "docs/pods.md"),
    Setting("lease_ttl", DURATION, 30.0, ("XLACACHE_LEASE_TTL",),
            "a dead compiler's lease expires after this", "docs/pods.md"),
    Setting("max_wait", DURATION, 1800.0, ("XLACACHE_MAX_WAIT",),
            "longest wait for another worker's compile", "docs/pods.md"),
    Setting("writer_grace", DURATION, None, ("XLACACHE_WRITER_GRACE",),
            "how long a reader waits for a writer to start compiling a program (default "
            "10s for readers by rank or role, 0 for readonly)", "docs/pods.md"),
    Setting("strict", BOOL, False, ("XLACACHE_STRICT",),
            "raise StrictModeError where a fallback would hide an exception (tests, "
            "debugging): no cache failure is absorbed", "README.md"),
)  # fmt: skip
BY_NAME = {s.name: s for s in SETTINGS}


def _describe(self) -> str:
    """The settings, secrets hidden, unset and false ones left out (for messages)."""
    shown = {f.name: getattr(self, f.name) for f in fields(self)}
    for name, value in shown.items():
        if name in BY_NAME and BY_NAME[name].secret and value:
            shown[name] = "***"
    return ", ".join(f"{k}={v!r}" for k, v in shown.items() if v not in (None, False))


_RESOLVED = {"path": "", "role": "writer"}  # always set once resolved (resolve_role)


def _field(setting: Setting):
    if setting.name in _RESOLVED:
        return setting.name, str, field(default=_RESOLVED[setting.name])
    holds = setting.kind.holds
    return setting.name, holds if setting.default is not None else holds | None, setting.default


CacheConfig = make_dataclass(
    "CacheConfig",
    [*(_field(s) for s in SETTINGS), ("role_origin", str, field(default="default"))],
    frozen=True,
    namespace={"describe": _describe, "__module__": __name__},
)
CacheConfig.__doc__ = (
    "The resolved settings of this process's cache: one field per row of SETTINGS, plus "
    "`role_origin` (what decided the role)."
)


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        if env.get(name):
            return name, env[name]
    return None


def env_value(name: str, env: Mapping[str, str] = os.environ) -> Any:
    """One setting as the environment gives it, parsed; None when unset."""
    setting = BY_NAME[name]
    if hit := _first(env, *setting.env):
        return setting.kind.parse(hit[1], hit[0])
    if setting.env_file and (path := env.get(setting.env_file)):
        try:
            text = Path(path).expanduser().read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{setting.env_file}: cannot read {path}: {exc.strerror}") from None
        return setting.kind.parse(text, setting.env_file) if text else None
    return None


counters.read_strict_from(lambda: bool(env_value("strict")))


class SettingWarning(UserWarning):
    """A setting of the environment that is ignored: misspelled, or a value that does not
    parse (that one setting keeps its default)."""


_warned: set[str] = set()  # messages given once per process


def warn_once(message: str) -> None:
    """Warn about a setting, once per message and process, from the caller's line (the
    first frame outside this package: the user's initialize_cache or import)."""
    if message in _warned:
        return
    _warned.add(message)
    package = str(Path(__file__).parent)
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, SettingWarning, stacklevel=level)


def tolerant(rows: Iterable[Setting], read: Callable[[str], Any], where: str) -> dict:
    """Each row's value `read(name)` gives, a bad one dropped: it warns (naming the
    variable, from the ConfigError) and the row keeps its default, or its `when_invalid`
    value; the other settings stand (one typo never turns the cache off). Strict mode
    (`counters.hidden`) raises instead."""
    values = {}
    for row in rows:
        try:
            value = read(row.name)
        except ConfigError as exc:
            counters.hidden(where, exc)
            value = row.when_invalid
            instead = "keeps its default" if value is None else f"is {value!r} (the safe side)"
            warn_once(f"xlacache: {exc} (ignored: {row.name} {instead})")
        if value is not None:
            values[row.name] = value
    return values


def from_env(env: Mapping[str, str] = os.environ) -> dict:
    """The settings the environment gives, parsed, as initialize_cache keyword arguments
    (a value that does not parse: a warning, and that setting's default)."""
    return tolerant(SETTINGS, lambda name: env_value(name, env), "settings")


def remote_token(env: Mapping[str, str] = os.environ) -> str | None:
    """The bearer token for remote stores: XLACACHE_TOKEN, else the XLACACHE_TOKEN_FILE's."""
    return env_value("token", env)


def remote_tls_files(env: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """PEM file paths for grpcs:// remotes by setting (tls_ca, tls_cert, tls_key)."""
    return {name: env_value(name, env) for name in ("tls_ca", "tls_cert", "tls_key")}


def quiet_grpc_logging(env: MutableMapping[str, str] = os.environ) -> None:
    """Keep gRPC's core from logging to stderr (TLS handshake failures, reconnects): a
    client's failures reach the user as one warning or error line instead. Takes effect
    only before gRPC is first imported; a GRPC_VERBOSITY the user set wins."""
    env.setdefault("GRPC_VERBOSITY", "ERROR")


def env_rank(env: Mapping[str, str] = os.environ) -> tuple[int, str] | None:
    """(rank, variable) from RANK, TPU_WORKER_ID or CLOUD_TPU_TASK_ID, or None."""
    if hit := _first(env, *RANK_VARIABLES):
        return whole(hit[1], hit[0]), hit[0]
    return None


class Role(NamedTuple):
    """Who writes, as `resolve_role` decided it."""

    name: str  # "writer" or "reader"
    origin: str  # what decided it, for people (CacheConfig.role_origin)
    pod_writer: bool = True  # a reader's pod has a writer compiling the same programs
    # (a reader by rank or role); False for readonly=True, which names no writer


def resolve_role(arguments: Mapping, environment: Mapping, rank: tuple[int, str] | None) -> Role:
    """Who writes (`Role`).

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
            name = "reader" if readonly else "writer"
            return Role(name, f"readonly={bool(readonly)} ({level})", pod_writer=False)
        role = str(role).strip().lower()
        if role not in ROLES:
            raise ConfigError(f"role={role!r} ({level}): expected writer or reader")
        if readonly is not None and bool(readonly) != (role == "reader"):
            raise ConfigError(f"role={role!r} contradicts readonly={readonly} ({level})")
        return Role(role, f"role={role} ({level})")
    if rank is None:
        return Role("writer", "no rank: a single process writes")
    number, source = rank
    return Role("writer" if number == 0 else "reader", f"rank {number} ({source})")


def _writer_grace(role: Role) -> float:
    """How long a reader waits, by default, for a writer to start compiling a program.

    A reader by rank or role has a writer in its pod that compiles the same programs:
    it waits for it (where a writer has made the store: `CompilationCache`). readonly=True
    names no writer: it waits only for compiles it sees under way.
    """
    if role.name != "reader" or not role.pod_writer:
        return 0.0
    return DEFAULT_WRITER_GRACE


def resolve(
    path: str | os.PathLike | None = None, *, rank: tuple[int, str] | None = None, **overrides
) -> CacheConfig:
    """Merge arguments over the environment; a path must come from one of them.

    `rank`: (rank, where from) when the caller knows it (jax.process_index() of a running
    jax.distributed job); else RANK, TPU_WORKER_ID or CLOUD_TPU_TASK_ID (`resolve_role`).
    """
    if unknown := set(overrides) - set(BY_NAME):
        raise ConfigError(f"unknown cache settings: {', '.join(sorted(unknown))}")
    arguments = {k: BY_NAME[k].kind.parse(v, k) for k, v in overrides.items() if v is not None}
    if path is not None:
        arguments["path"] = os.fspath(path)
    settings = from_env()
    role = resolve_role(arguments, settings, rank if rank is not None else env_rank())
    settings.update(arguments)
    if not settings.get("path"):
        raise ConfigError(
            "initialize_cache needs a path (argument, XLACACHE_DIR or XLA_PERSISTENT_CACHE_PATH)"
        )
    settings["path"] = str(Path(settings["path"]).expanduser().absolute())
    if settings.get("writer_grace") is None:
        settings["writer_grace"] = _writer_grace(role)
    settings.update(role=role.name, role_origin=role.origin, readonly=role.name == "reader")
    return replace(CacheConfig(), **settings)


def signature() -> inspect.Signature:
    """initialize_cache's signature: `path` and `readonly` first, the rest keyword-only."""
    head = [BY_NAME["path"], BY_NAME["readonly"]]
    params = [
        inspect.Parameter(s.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                          annotation=s.kind.accepts)
        for s in head
    ] + [
        inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=s.kind.accepts)
        for s in SETTINGS if s not in head
    ]  # fmt: skip
    return inspect.Signature(params, return_annotation=None)


def argument_docs() -> str:
    """The settings as initialize_cache's docstring lists them."""
    lines = ["Settings (argument, environment, default: what):", ""]
    for s in SETTINGS:
        default = "" if s.default is None else f", default {s.default!r}"
        lines.append(f"    {s.name} ({', '.join(s.variables())}{default}): {s.help}")
    return "\n".join(lines)
