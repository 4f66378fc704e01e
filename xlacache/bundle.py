"""Export bundles: a cache's entries in one tar file, to carry to another cache.

A bundle holds `entries/ab/KEY.xlac` (the encoded entries, byte for byte) and a
`manifest.json` naming the format, the xlacache version and each entry's key, size
and SHA-256. Export lists the entries from the store itself (`Store.scan`: for a
local store, its entry files, so nothing an index missed is left out). Import never
extracts by member path: it looks up each listed entry's member by name, refuses
members larger than a cap before reading them, and streams each through
verification into the store (`Store.put_stream`), so memory holds one chunk however
large a member claims to be.

Used by `xlacache export|import` (cli/commands.py); no command-line code here.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlacache import entry
from xlacache._version import __version__
from xlacache.errors import CorruptEntryError, NotABundleError
from xlacache.key import is_valid_key
from xlacache.stores.base import EntryInfo, Store

BUNDLE_FORMAT = "xlacache-bundle"
BUNDLE_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 256 << 20
READ_CHUNK = 1024 * 1024

Advance = Callable[[], None]


def _nothing() -> None:
    return None


def member_name(key: str) -> str:
    return f"entries/{key[:2]}/{key}.xlac"


@dataclass
class ExportResult:
    rows: list[dict] = field(default_factory=list)  # the manifest's entry list
    corrupt: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(row["size"] for row in self.rows)


@dataclass
class ImportResult:
    imported: int = 0
    skipped: int = 0  # already in the store
    corrupt: list[str] = field(default_factory=list)  # missing, oversized or failing members


# -- export ----------------------------------------------------------------------------


def entries_to_export(store: Store) -> list[EntryInfo]:
    """What an export of `store` holds: every entry it has, read from the entries."""
    return sorted(store.scan(), key=lambda i: i.key)


def export_bundle(
    store: Store,
    bundle: Path,
    infos: list[EntryInfo] | None = None,
    advance: Advance = _nothing,
) -> ExportResult:
    """Write `infos` (default: every entry) of `store` into a tar at `bundle`.

    The tar is written next to `bundle` and renamed into place when complete.
    Entries that fail verification are left out and listed in the result.
    """
    infos = entries_to_export(store) if infos is None else infos
    result = ExportResult()
    with _bundle_writer(bundle) as tar:
        for info in infos:
            try:
                blob = store.peek(info.key)  # a copy, not a use
            except CorruptEntryError:
                result.corrupt.append(info.key)
                blob = None
            if blob is not None:
                tar.addfile(_tar_info(member_name(info.key), len(blob), info.created),
                            io.BytesIO(blob))  # fmt: skip
                digest = hashlib.sha256(blob).hexdigest()
                result.rows.append({"key": info.key, "size": len(blob), "sha256": digest})
            advance()
        manifest = {
            "format": BUNDLE_FORMAT,
            "format_version": BUNDLE_VERSION,
            "xlacache_version": __version__,
            "entry_format_version": entry.FORMAT_VERSION,
            "created": time.time(),
            "source": store.url,
            "entries": result.rows,
        }
        data = json.dumps(manifest, indent=1).encode()
        tar.addfile(_tar_info(MANIFEST_NAME, len(data), time.time()), io.BytesIO(data))
    return result


def _tar_info(name: str, size: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = int(mtime)
    info.mode = 0o644
    return info


@contextlib.contextmanager
def _bundle_writer(bundle: Path) -> Iterator[tarfile.TarFile]:
    """A tar opened next to `bundle`, renamed into place only when complete."""
    if bundle.is_dir():
        raise NotABundleError(f"{bundle} is a directory")
    if not bundle.parent.is_dir():
        raise NotABundleError(f"no such directory: {bundle.parent}")
    tmp = bundle.with_name(f".{bundle.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            yield tar
        os.replace(tmp, bundle)
    finally:
        tmp.unlink(missing_ok=True)


# -- import ----------------------------------------------------------------------------


class Bundle:
    """An opened bundle: its checked manifest rows and its members by name."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise NotABundleError(f"no such bundle: {path}")
        try:
            self._tar = tarfile.open(self.path, "r:*")  # noqa: SIM115 - closed by close()
        except tarfile.TarError:
            raise NotABundleError(f"{path} is not an xlacache bundle: not a tar file") from None
        try:
            # The last of duplicate names wins, as in tarfile.getmember.
            self.members = {m.name: m for m in self._tar.getmembers()}
            self.rows = self._read_manifest()
        except BaseException:
            self._tar.close()
            raise

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read_manifest(self) -> list[dict]:
        def bad(reason: str) -> NotABundleError:
            return NotABundleError(f"{self.path} is not an xlacache bundle: {reason}")

        member = self.members.get(MANIFEST_NAME)
        if member is None:
            raise bad(f"no {MANIFEST_NAME}")
        if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
            raise bad(f"unusable {MANIFEST_NAME}")
        try:
            manifest = json.loads(self._tar.extractfile(member).read())  # type: ignore[union-attr]
        except (ValueError, tarfile.TarError) as exc:
            raise bad(f"unreadable {MANIFEST_NAME} ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
            raise bad(f"{MANIFEST_NAME} does not name format {BUNDLE_FORMAT!r}")
        version = manifest.get("format_version")
        if not isinstance(version, int) or not 1 <= version <= BUNDLE_VERSION:
            raise bad(
                f"bundle format version {version!r} is not supported by xlacache {__version__}"
            )
        entries = manifest.get("entries")
        if not isinstance(entries, list) or not all(_valid_row(e) for e in entries):
            raise bad(f"malformed entry list in {MANIFEST_NAME}")
        return entries

    def chunks(self, row: dict, max_entry_size: int) -> Iterator[bytes]:
        """The bytes of one listed entry's member, a chunk at a time, checked against
        its manifest row (size, SHA-256); CorruptEntryError when they differ, when the
        member is missing, not a file, or over `max_entry_size` (refused unread)."""
        key = row["key"]
        member = self.members.get(member_name(key))
        if member is None or not member.isfile():
            raise CorruptEntryError(f"entry {key}: no such member in the bundle")
        if member.size != row["size"] or member.size > max_entry_size:
            raise CorruptEntryError(
                f"entry {key}: member of {member.size} bytes (manifest: {row['size']}, "
                f"limit: {max_entry_size})"
            )
        try:
            f = self._tar.extractfile(member)
            digest = hashlib.sha256()
            while chunk := f.read(READ_CHUNK):  # type: ignore[union-attr]
                digest.update(chunk)
                yield chunk
        except tarfile.TarError as exc:
            raise CorruptEntryError(f"entry {key}: unreadable member ({exc})") from None
        if digest.hexdigest() != row["sha256"]:
            raise CorruptEntryError(f"entry {key}: member does not match the manifest")


def _valid_row(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and is_valid_key(row.get("key"))
        and type(row.get("size")) is int
        and row["size"] >= 0
        and entry.is_sha256_hex(row.get("sha256"))
    )


def import_bundle(
    bundle: Bundle,
    store: Store,
    max_entry_size: int = entry.MAX_ENTRY_SIZE,
    advance: Advance = _nothing,
) -> ImportResult:
    """Store each entry the bundle lists and `store` lacks, verified as it streams."""
    result = ImportResult()
    for row in bundle.rows:
        key = row["key"]
        if store.contains(key):
            result.skipped += 1
        else:
            try:
                store.put_stream(key, bundle.chunks(row, max_entry_size))
                result.imported += 1
            except CorruptEntryError:
                result.corrupt.append(key)
        advance()
    return result
