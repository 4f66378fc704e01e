"""Entries of format 2, written before the program identity of format 3 (issue 23).

Format 2 keyed the module's stripped bytecode; format 3 keys its canonical text, so the same
compilation has another key now. On a miss, `LegacyEntries._legacy` looks the compilation's
format-2 key up; what it finds (this jaxlib's, every other component the same) is loaded
and stored again under the new key, so a cache written before the upgrade of xlacache
stays warm. `prune --stale` removes the format-2 entries once they are not needed.
"""

from __future__ import annotations

from typing import TypeVar

from xlacache import counters
from xlacache.flight import Found, Lookup
from xlacache.key import LEGACY_FORMAT, Identity

T = TypeVar("T")
LEGACY_TRIES = 8  # format-2 lookups in a row that find nothing before a process stops


class LegacyEntries:
    """The legacy lookup of a `CompilationCache` (which provides readonly, _lookup,
    _deserialize and save)."""

    _legacy_misses = 0  # format-2 lookups in a row that found nothing

    def _legacy(
        self, key: str, identity: Identity, load, label: str, platform: str, context: dict | None
    ) -> Lookup:
        """The executable of this compilation's format-2 entry, if one is stored (a cache
        written before format 3: its key digested the module's bytecode), loaded and stored
        again under the current key (unless read-only). A process stops looking after
        LEGACY_TRIES lookups in a row found nothing (the store holds no such entries)."""
        if self._legacy_misses >= LEGACY_TRIES:
            return Lookup(Found.ABSENT)
        try:
            legacy, components = identity.legacy()
        except Exception as exc:  # noqa: BLE001 - then no legacy lookup
            counters.record_error("key", exc)
            return Lookup(Found.ABSENT)
        found = self._lookup(legacy)
        if found.found is not Found.LOADED:
            self._legacy_misses += found.found is Found.ABSENT
            return Lookup(Found.ABSENT)
        self._legacy_misses = 0
        old = found.value
        if old.header.format_version != LEGACY_FORMAT or old.header.components != components:
            return Lookup(Found.ABSENT)  # not this compilation's format-2 entry
        loaded = self._deserialize(legacy, old, load, None)
        if loaded.found is Found.LOADED and not self.readonly:
            payload = old.payload()
            seconds = old.header.compile_seconds
            self.save(key, lambda: payload, seconds, label, platform, context, identity)
        return loaded if loaded.found is Found.LOADED else Lookup(Found.ABSENT)
