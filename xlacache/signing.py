"""Signed entries: writers sign, readers load only what a trusted key signed.

Two kinds of keys (see docs/trust.md):

- HMAC-SHA256 with a shared secret: every writer and reader holds the same secret.
- Ed25519 (through `cryptography`): the writer holds the private key, readers only
  the public key, so a reader can never forge an entry.

The signature covers `entry.signed_form(header)`: the header as canonical JSON, which
names the key, the signer's key id and the body's SHA-256 and size. Signature and key
id live in the header (`signer`, `signature`).

Key text forms, one per line in a file (blank lines and `#` comments ignored)::

    hmac:BASE64                    a shared secret (at least 16 bytes)
    ed25519-private:BASE64         an Ed25519 private key (its 32-byte seed)
    ed25519-public:BASE64          an Ed25519 public key (32 bytes)
    ssh-ed25519 AAAA... [comment]  an OpenSSH public key line

and PEM files (``-----BEGIN PRIVATE KEY-----``, ``-----BEGIN PUBLIC KEY-----``,
``-----BEGIN OPENSSH PRIVATE KEY-----``). A key spec is one of those texts, or the
path of a file that holds them. Key ids (`hmac-` or `ed25519-` and 16 hex digits of a
SHA-256) name a key without revealing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from xlacache import entry
from xlacache.config import split_list
from xlacache.errors import ConfigError, CorruptEntryError, UntrustedEntryError

MIN_HMAC_SECRET = 16
_LITERAL_PREFIXES = ("hmac:", "ed25519-private:", "ed25519-public:", "ssh-ed25519 ", "-----BEGIN")
_RAW = serialization.Encoding.Raw


def _key_id(kind: str, material: bytes) -> str:
    digest = hashlib.sha256(b"xlacache-key-id\0" + material).hexdigest()
    return f"{kind}-{digest[:16]}"


class VerifyKey:
    """A key that checks signatures."""

    key_id: str

    def verify(self, data: bytes, signature: bytes) -> bool:
        raise NotImplementedError


class SigningKey:
    """A key that makes signatures (entry.Signer)."""

    key_id: str

    def sign(self, data: bytes) -> bytes:
        raise NotImplementedError

    def verify_key(self) -> VerifyKey:
        raise NotImplementedError


class HmacKey(SigningKey, VerifyKey):
    """HMAC-SHA256 with a shared secret: signs and verifies."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_HMAC_SECRET:
            raise ConfigError(f"an HMAC secret needs at least {MIN_HMAC_SECRET} bytes")
        self._secret = secret
        self.key_id = _key_id("hmac", secret)

    def sign(self, data: bytes) -> bytes:
        return hmac.digest(self._secret, data, "sha256")

    def verify(self, data: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.sign(data), signature)

    def verify_key(self) -> VerifyKey:
        return self

    def text(self) -> str:
        return "hmac:" + base64.b64encode(self._secret).decode()


class Ed25519Verifier(VerifyKey):
    def __init__(self, public: Ed25519PublicKey) -> None:
        self._public = public
        self.raw = public.public_bytes(_RAW, serialization.PublicFormat.Raw)
        self.key_id = _key_id("ed25519", self.raw)

    def verify(self, data: bytes, signature: bytes) -> bool:
        try:
            self._public.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    def text(self) -> str:
        return "ed25519-public:" + base64.b64encode(self.raw).decode()


class Ed25519Signer(SigningKey):
    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self._verifier = Ed25519Verifier(private.public_key())
        self.key_id = self._verifier.key_id

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)

    def verify_key(self) -> VerifyKey:
        return self._verifier

    def text(self) -> str:
        seed = self._private.private_bytes(
            _RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return "ed25519-private:" + base64.b64encode(seed).decode()


# -- parsing key specs -----------------------------------------------------------------


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"malformed {what}: not base64") from None


def _parse_line(line: str) -> SigningKey | VerifyKey:
    kind, _, value = line.partition(":")
    try:
        if kind == "hmac":
            return HmacKey(_b64(value, "HMAC secret"))
        if kind == "ed25519-private":
            return Ed25519Signer(Ed25519PrivateKey.from_private_bytes(_b64(value, "key")))
        if kind == "ed25519-public":
            return Ed25519Verifier(Ed25519PublicKey.from_public_bytes(_b64(value, "key")))
        if line.startswith("ssh-ed25519 "):
            public = serialization.load_ssh_public_key(line.encode())
            if isinstance(public, Ed25519PublicKey):
                return Ed25519Verifier(public)
    except (ValueError, UnsupportedAlgorithm) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"malformed {kind} key: {exc}") from None
    shown = line if len(line) < 24 else line[:20] + "..."
    raise ConfigError(
        f"unknown key format {shown!r} (expected hmac:, ed25519-private:, ed25519-public:, "
        "ssh-ed25519 or PEM)"
    )


def _parse_pem(block: str) -> SigningKey | VerifyKey:
    data = block.encode()
    try:
        if "PUBLIC KEY" in block.split("\n", 1)[0]:
            key = serialization.load_pem_public_key(data)
            if isinstance(key, Ed25519PublicKey):
                return Ed25519Verifier(key)
        elif "OPENSSH PRIVATE KEY" in block:
            key = serialization.load_ssh_private_key(data, password=None)
            if isinstance(key, Ed25519PrivateKey):
                return Ed25519Signer(key)
        else:
            key = serialization.load_pem_private_key(data, password=None)
            if isinstance(key, Ed25519PrivateKey):
                return Ed25519Signer(key)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"unreadable PEM key: {exc}") from None
    raise ConfigError("PEM key is not an Ed25519 key")


def parse_keys(text: str) -> list[SigningKey | VerifyKey]:
    """Every key in a key text (see the module docstring)."""
    keys: list[SigningKey | VerifyKey] = []
    pem: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if pem:
            pem.append(line)
            if line.startswith("-----END"):
                keys.append(_parse_pem("\n".join(pem) + "\n"))
                pem = []
        elif line.startswith("-----BEGIN"):
            pem = [line]
        elif line and not line.startswith("#"):
            keys.append(_parse_line(line))
    if pem:
        raise ConfigError("PEM key without its END line")
    return keys


def _spec_keys(spec: str | os.PathLike) -> list[SigningKey | VerifyKey]:
    text = os.fspath(spec)
    if not text.strip():
        raise ConfigError("empty key spec")
    if not text.lstrip().startswith(_LITERAL_PREFIXES):
        try:
            text = Path(text).expanduser().read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read key file {spec}: {exc}") from None
    keys = parse_keys(text)
    if not keys:
        raise ConfigError(f"no key in {spec}")
    return keys


def load_signing_key(spec: str | os.PathLike) -> SigningKey:
    """The one signing key a spec (key text or file) names: HMAC or Ed25519 private."""
    keys = _spec_keys(spec)
    if len(keys) != 1 or not isinstance(keys[0], SigningKey):
        raise ConfigError(
            "a signing key must be exactly one hmac: secret or Ed25519 private key "
            "(a public key can only verify)"
        )
    return keys[0]


def load_trusted_keys(specs: str | os.PathLike | Iterable[str | os.PathLike]) -> TrustedKeys:
    """The keys readers trust; a private key given here stands for its public half."""
    keys: list[VerifyKey] = []
    for spec in split_list(specs):
        for key in _spec_keys(spec):
            keys.append(key.verify_key() if isinstance(key, SigningKey) else key)
    if not keys:
        raise ConfigError("no trusted keys given")
    return TrustedKeys(keys)


def generate(kind: str) -> tuple[str, str]:
    """A new key as (signing key text, trusted key text) for `kind` ed25519 or hmac."""
    if kind == "ed25519":
        signer = Ed25519Signer(Ed25519PrivateKey.generate())
        return signer.text(), signer.verify_key().text()  # type: ignore[attr-defined]
    if kind == "hmac":
        text = HmacKey(os.urandom(32)).text()
        return text, text
    raise ConfigError(f"unknown key type {kind!r} (ed25519 or hmac)")


# -- checking entries ------------------------------------------------------------------


class TrustedKeys:
    """The keys a reader trusts; `check` passes only entries one of them signed."""

    def __init__(self, keys: Iterable[VerifyKey]) -> None:
        self._keys = {k.key_id: k for k in keys}

    @property
    def key_ids(self) -> list[str]:
        return sorted(self._keys)

    def status(self, header: entry.Header) -> str:
        """'trusted', 'unsigned', 'foreign' (another key) or 'bad_signature'."""
        if not header.signer and not header.signature:
            return "unsigned"
        key = self._keys.get(header.signer)
        if key is None:
            return "foreign"
        try:
            signature = base64.b64decode(header.signature, validate=True)
        except (binascii.Error, ValueError):
            return "bad_signature"
        return "trusted" if key.verify(entry.signed_form(header), signature) else "bad_signature"

    def check(self, header: entry.Header) -> str:
        """The signer's key id; raises UntrustedEntryError for anything else."""
        status = self.status(header)
        if status == "trusted":
            return header.signer
        why = {
            "unsigned": "is not signed",
            "foreign": f"is signed by {header.signer}, which is not trusted",
            "bad_signature": f"has a signature by {header.signer} that does not match it",
        }[status]
        raise UntrustedEntryError(f"entry {header.key} {why}", status)


def check_entry(
    blob: bytes | memoryview, trusted: TrustedKeys, key: str | None = None
) -> entry.Header:
    """Verify an encoded entry completely and require a trusted signature.

    For fronts that accept entries (a server's ``--require-signed-by``). Raises
    CorruptEntryError or UntrustedEntryError (its `reason` says which way).
    """
    header = entry.verify(blob, key)
    trusted.check(header)
    return header


@dataclass
class TrustAudit:
    """Entries of a store by trust status (see TrustedKeys.status)."""

    checked: int = 0
    trusted: int = 0
    unsigned: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    bad_signature: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def untrusted(self) -> int:
        return len(self.unsigned) + len(self.foreign) + len(self.bad_signature)


def audit(store, trusted: TrustedKeys) -> TrustAudit:
    """Check every entry's signature in `store` (anything with list() and read_header())."""
    report = TrustAudit()
    for info in sorted(store.list(), key=lambda i: i.key):
        report.checked += 1
        try:
            header = store.read_header(info.key)
        except (CorruptEntryError, OSError):
            header = None
        if header is None:
            report.unreadable.append(info.key)
            continue
        status = trusted.status(header)
        if status == "trusted":
            report.trusted += 1
        else:
            getattr(report, status).append(info.key)
    return report


@dataclass
class SignReport:
    signed: list[str] = field(default_factory=list)
    already: int = 0  # signed by this key already
    foreign: list[str] = field(default_factory=list)  # signed by another key, left alone
    corrupt: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # another writer's entry won a race


def sign_store(store, signer: SigningKey, resign: bool = False) -> SignReport:
    """Sign every entry of `store` that `signer` has not signed (for migrating a cache).

    Entries signed by another key are left alone unless `resign`. Each entry is
    verified, re-encoded with a signed header and the same body, and put back. A store
    whose entries are created once (a server, a bucket) keeps the old one on a put: it
    is deleted first (which needs an admin token or objectAdmin there), and an entry
    another writer stored in between is reported `unchanged`.
    """
    report = SignReport()
    own = TrustedKeys([signer.verify_key()])
    for info in sorted(store.list(), key=lambda i: i.key):
        try:
            header = store.read_header(info.key)
            if header is None:
                continue
            status = own.status(header)
            if status == "trusted":
                report.already += 1
                continue
            if status == "foreign" and not resign:
                report.foreign.append(info.key)
                continue
            blob = store.peek(info.key)  # re-signing is no use
            if blob is None:
                continue
            signed = entry.sign(blob, signer)
            store.put(info.key, signed)
            if not _trusted(store, info.key, own):  # created once: still the old entry
                store.delete(info.key)
                store.put(info.key, signed)
                if not _trusted(store, info.key, own):
                    report.unchanged.append(info.key)
                    continue
        except CorruptEntryError:
            report.corrupt.append(info.key)
            continue
        report.signed.append(info.key)
    return report


def _trusted(store, key: str, keys: TrustedKeys) -> bool:
    header = store.read_header(key)
    return header is not None and keys.status(header) == "trusted"
