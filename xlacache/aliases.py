"""Alias entries in a cache: store one, and resolve one to its target's executable.

An alias entry is an ordinary entry (verified, signed, tiered, pruned like the others) whose
context says ``{"kind": "alias"}`` and whose label starts with ``alias:``; its payload is a
JSON record naming the key of an executable stored beside it (`xlacache.executables` makes
the records and checks them). `AliasEntries` is the part of `cache.CompilationCache` that
handles them; it uses the cache's lookup, prefetch, counting and discarding.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TypeVar

from xlacache import counters, entry
from xlacache.errors import CacheError, CorruptEntryError, ForeignEntryError
from xlacache.key import is_valid_key

T = TypeVar("T")


class AliasEntries:
    """Alias entries of a `CompilationCache` (which provides what is declared here)."""

    # Provided by CompilationCache: readonly, _prefetcher, _tally, save, lookup, discard,
    # _checked, _count_hit, _count_fetched, _note_use.

    # -- alias entries -----------------------------------------------------------------------

    def save_alias(self, alias: str, record: dict, label: str = "", platform: str = "") -> bool:
        """Store an alias entry: `record` (JSON) names the key of an executable stored here.
        Read-only caches store nothing, nor does one that would refuse its own entries (a
        trusting cache that cannot sign). Returns whether it was stored."""
        if self.readonly or self._refuses_own_entries():
            return False
        payload = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        label = entry.ALIAS_LABEL_PREFIX + label
        stored = self.save(alias, lambda: payload, 0.0, label, platform, dict(entry.ALIAS_CONTEXT))
        if stored:
            self._tally.add("alias_writes")
        return stored

    def resolve_alias(
        self,
        alias: str,
        accept: Callable[[dict, entry.Header], None],
        load_entry: Callable[[entry.Entry], T],
        verify: Callable[[T], None],
    ) -> T | None:
        """The executable the alias entry `alias` names, or None (a miss: absent, or any check
        failed, counted and warned about once as errors["alias"]).

        `accept(record, header)` raises unless the alias record and the target entry's header
        fit this process; `load_entry` loads the target from its stored context (a prefetched
        executable with the same key and context is taken instead; a target of another
        environment is never loaded: errors["foreign"]); `verify(executable)` raises unless
        the loaded executable is the program the caller expects. A bad alias is dropped
        (unless read-only), so the caller's next compile stores a good one.
        """
        counters.raise_deferred()  # strict mode: what a background thread hid
        record = self._read_alias(alias)
        if record is None:
            self._tally.add("alias_misses")
            return None
        key = record.get("target")
        if not (isinstance(key, str) and is_valid_key(key)):
            self._tally.add("alias_misses")
            return None
        taken = self._prefetcher.take(key)
        found = self._checked(taken.fetched.found).value if taken else self.lookup(key)
        if found is None:  # the target was pruned (or failed)
            self._tally.add("alias_misses")
            return None
        try:
            accept(record, found.header)
        except Exception as exc:  # noqa: BLE001 - a wrong alias is a miss, never a wrong program
            return self._bad_alias(alias, exc)
        start = time.perf_counter()
        prefetched = taken is not None and taken.value is not None
        if prefetched:
            result = taken.value  # loaded from the same stored context
        else:
            try:
                result = load_entry(found)
            except ForeignEntryError as exc:  # another environment's: kept for its own
                counters.record_error(exc.kind, exc)
                self._tally.add("alias_misses")
                return None
            except Exception as exc:  # noqa: BLE001 - a stale or unloadable executable
                counters.record_error(
                    "corrupt" if isinstance(exc, CacheError) else "load_rejected", exc
                )
                self.discard(key)
                self._tally.add("alias_misses")
                return None
        try:
            verify(result)
        except Exception as exc:  # noqa: BLE001
            return self._bad_alias(alias, exc)
        self._count_hit(found.header, time.perf_counter() - start)
        if prefetched:
            self._tally.add("prefetch_hits")
        if taken is not None:
            self._count_fetched(taken.fetched)
        self._tally.add("alias_hits")
        self._note_use(key)
        return result

    def _read_alias(self, alias: str) -> dict | None:
        found = self.lookup(alias)
        if found is None:
            return None
        try:
            if not entry.is_alias(found.header):
                raise CorruptEntryError(f"entry {alias} is not an alias entry")
            record = json.loads(found.payload())
            if not isinstance(record, dict):
                raise CorruptEntryError(f"alias entry {alias} holds no record")
        except Exception as exc:  # noqa: BLE001
            self._bad_alias(alias, exc)
            return None
        return record

    def _bad_alias(self, alias: str, exc: BaseException) -> None:
        counters.record_error("alias", exc)
        self._tally.add("alias_misses")
        self.discard(alias)
