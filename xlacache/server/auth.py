"""Bearer tokens and the roles they grant.

Token file: one token a line, `ROLE TOKEN [NAME]`; a word starting with `#` starts a
comment. A token may not hold `#`, nor appear twice (both are refused at start-up:
a file that would not mean what it says)::

    read   3f1c...   ci-workers
    write  9ab2...   trainer
    admin  77de...   ops
    read   sha256:5e88...   hashed   # the token's SHA-256 instead of the token itself

Roles nest: write can do what read can, admin what write can; `metrics` may only see
the status page and /metrics (a Prometheus scraper's token). A token has at least 16
characters (`MIN_TOKEN_LENGTH`; `openssl rand -hex 32` makes a good one). With no token
file the server is open: every caller is admin (only allowed on loopback unless
--allow-open), and so is the status page.

The HTTP side (`status_page`) takes the same tokens, as `Authorization: Bearer TOKEN` or
HTTP basic auth with the token as the password (`http_principal`).

Rotation without a restart (`TokenFileWatcher`): the server reads its token file again
every `--token-check-interval` and on SIGHUP, and when its content changed, swaps the whole
table at once (a call sees the old table or the new one, never a mix). A new file that
would not load (malformed, empty, unreadable, or gone for a moment) keeps the old table
and logs why, once. The file is read by its path, so a Kubernetes Secret mounted as a
volume, which the kubelet updates by swapping a symlink (`..data`), is seen like an edit
in place; an inotify watch on the old file would not see it.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from xlacache.entry import is_sha256_hex
from xlacache.errors import ConfigError, PermissionDeniedError, UnauthenticatedError

MIN_TOKEN_LENGTH = 16
log = logging.getLogger("xlacache.server")


class Role(enum.IntEnum):
    METRICS = 0  # the status page and /metrics only
    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ConfigError(
                f"unknown role {text!r} (expected read, write, admin or metrics)"
            ) from None


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role


OPEN = Principal("anonymous (open server)", Role.ADMIN)


class TokenTable:
    """Token digests -> principals. Tokens are compared by SHA-256, never stored raw."""

    def __init__(self, principals: dict[str, Principal] | None = None) -> None:
        self._by_digest = dict(principals or {})

    @property
    def open(self) -> bool:
        return not self._by_digest

    def __len__(self) -> int:
        return len(self._by_digest)

    def replace_with(self, other: TokenTable) -> None:
        """Take `other`'s tokens, all at once: every lookup reads the table once."""
        self._by_digest = other._by_digest

    @classmethod
    def load(cls, path: str | Path | None) -> TokenTable:
        if not path:
            return cls()
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {path}: {exc.strerror}") from exc
        return cls.parse(text, source=str(path))

    @classmethod
    def parse(cls, text: str, source: str = "token file") -> TokenTable:
        table: dict[str, Principal] = {}
        lines: dict[str, int] = {}  # token digest -> the line that gave it
        for number, raw in enumerate(text.splitlines(), 1):
            words = raw.split()
            comment = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
            words = words[:comment]
            if not words:
                continue
            where = f"{source}:{number}"
            if len(words) < 2:
                raise ConfigError(f"{where}: expected ROLE TOKEN [NAME]")
            try:
                role = Role.parse(words[0])
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            token = words[1]
            if "#" in token:
                raise ConfigError(f"{where}: a token may not contain '#'")
            if token.startswith("sha256:"):
                digest = token.removeprefix("sha256:").lower()
                if not is_sha256_hex(digest):
                    raise ConfigError(f"{where}: sha256: needs 64 hex digits")
            else:
                if len(token) < MIN_TOKEN_LENGTH:
                    raise ConfigError(
                        f"{where}: tokens need at least {MIN_TOKEN_LENGTH} characters"
                    )
                digest = token_digest(token)
            if digest in lines:
                raise ConfigError(f"{where}: duplicate of the token on line {lines[digest]}")
            lines[digest] = number
            name = " ".join(words[2:]) or f"{role.name.lower()}-token-{number}"
            table[digest] = Principal(name, role)
        if not table:
            raise ConfigError(f"{source} holds no tokens (leave --tokens out to serve open)")
        return cls(table)

    def authenticate(self, metadata) -> Principal:
        """The principal named by the `authorization: Bearer ...` metadata entry."""
        table = self._by_digest  # one table for the whole call (a reload swaps it)
        if not table:
            return OPEN
        header = None
        for key, value in metadata or ():
            if key == "authorization":
                header = value
                break
        if not header:
            raise UnauthenticatedError("missing bearer token (authorization metadata)")
        scheme, _, token = str(header).partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise UnauthenticatedError("authorization metadata must be 'Bearer <token>'")
        principal = table.get(token_digest(token.strip()))
        if principal is None:
            raise UnauthenticatedError("unknown token")
        return principal

    def http_principal(self, authorization: str | None) -> Principal | None:
        """Who an HTTP `Authorization` header names (`Bearer TOKEN`, or basic auth with
        the token as the password; any user name), or None. Open server: anyone."""
        table = self._by_digest
        if not table:
            return OPEN
        scheme, _, value = (authorization or "").strip().partition(" ")
        token = value.strip()
        if scheme.lower() == "basic":
            try:
                token = base64.b64decode(token, validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return None
        elif scheme.lower() != "bearer":
            return None
        return table.get(token_digest(token)) if token else None

    def authorize(self, metadata, needed: Role) -> Principal:
        return self.permit(self.authenticate(metadata), needed)

    @staticmethod
    def permit(principal: Principal, needed: Role) -> Principal:
        """`principal` if its role allows a call that needs `needed`; else PermissionDenied."""
        if principal.role < needed:
            raise PermissionDeniedError(
                f"token {principal.name!r} has role {principal.role.name.lower()}, "
                f"this call needs {needed.name.lower()}"
            )
        return principal


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenFileWatcher:
    """Reloads `table` from the token file at `path` when its content changes (looked at
    every `interval` seconds; 0: only when asked) and whenever `reload_now()` is called
    (SIGHUP). A file that does not load keeps the table as it is, logged once per problem."""

    def __init__(self, path: str | Path, table: TokenTable, interval: float) -> None:
        self.path = Path(path)
        self.table = table
        self.interval = interval
        data = self._read()  # the table is what this content gives, so no change is missed
        table.replace_with(TokenTable.parse(data.decode(), source=str(self.path)))
        self._digest = hashlib.sha256(data).digest()
        self._problem: str | None = None
        self._forced = False
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xlacache-tokens", daemon=True)

    def _read(self) -> bytes:
        return self.path.read_bytes()  # by path: follows a swapped symlink

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def reload_now(self) -> None:
        """Read the file again at once, changed or not (safe to call from a signal handler)."""
        self._forced = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.interval if self.interval > 0 else None)
            self._wake.clear()
            if self._stopped.is_set():
                return
            forced, self._forced = self._forced, False
            self.check(forced)

    def check(self, forced: bool = False) -> bool:
        """Reload if the content changed (or `forced`); whether the table was replaced."""
        try:
            data = self._read()
            digest = hashlib.sha256(data).digest()
            if digest == self._digest and not forced:
                return False
            new = TokenTable.parse(data.decode(), source=str(self.path))
        except (OSError, UnicodeDecodeError, ConfigError) as exc:
            problem = f"{exc.strerror}: {self.path}" if isinstance(exc, OSError) else str(exc)
            if problem != self._problem or forced:
                log.error(
                    "token file not reloaded (%s); still serving the %d tokens loaded before",
                    problem, len(self.table),
                )  # fmt: skip
            self._problem = problem
            return False
        before = len(self.table)
        self.table.replace_with(new)
        self._digest, self._problem = digest, None
        log.info("token file %s reloaded: %d tokens (%d before)", self.path, len(new), before)
        return True
