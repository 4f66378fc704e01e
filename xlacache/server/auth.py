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
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
from dataclasses import dataclass
from pathlib import Path

from xlacache.entry import is_sha256_hex
from xlacache.errors import ConfigError, PermissionDeniedError, UnauthenticatedError

MIN_TOKEN_LENGTH = 16


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
        if self.open:
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
        principal = self._by_digest.get(token_digest(token.strip()))
        if principal is None:
            raise UnauthenticatedError("unknown token")
        return principal

    def http_principal(self, authorization: str | None) -> Principal | None:
        """Who an HTTP `Authorization` header names (`Bearer TOKEN`, or basic auth with
        the token as the password; any user name), or None. Open server: anyone."""
        if self.open:
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
        return self._by_digest.get(token_digest(token)) if token else None

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
