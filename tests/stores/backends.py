"""Backend-specific hooks shared by the contract test modules: damage, snapshots."""

from __future__ import annotations

import hashlib
from pathlib import Path

from xlacache import entry
from xlacache.stores.gcs import GCSStore, entry_name
from xlacache.stores.local import LocalStore


def tree_snapshot(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, tuple[int, int, str]]:
    """Every file under root: (size, mtime_ns, sha256)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file() and not rel.startswith(exclude):
            st = path.stat()
            found[rel] = (st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def damaged(blob: bytes) -> bytes:
    """The entry with one byte of its body flipped (its header stays intact)."""
    data = bytearray(blob)
    start = entry.header_length(bytes(data[: entry.PRELUDE_SIZE]))
    data[start + (len(data) - start) // 2] ^= 0xFF
    return bytes(data)


def flip_body_byte(path: Path) -> None:
    """Damage an entry file in the middle of its body."""
    path.write_bytes(damaged(path.read_bytes()))


def server_entry_path(server, key: str) -> Path:
    """Where an `xlacache serve` subprocess keeps an entry."""
    return LocalStore(server.store, readonly=True).entry_path(key)


def corrupt_object(store: GCSStore, key: str) -> None:
    """Replace an entry object with damaged bytes (same metadata), behind the store's back."""
    name = entry_name(key)
    obj = store.objects.stat(name)
    blob, _ = store.objects.read(name)
    assert store.objects.replace(name, damaged(blob), obj.generation, obj.metadata)


def bucket_snapshot(store: GCSStore, proxy):
    """Every object under the store's prefix (generation, metageneration, size), and every
    write request the proxy has seen."""
    objects = sorted(
        (o.name, o.generation, o.metageneration, o.size) for o in store.objects.list("")
    )
    return objects, proxy.writes()
