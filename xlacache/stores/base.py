"""The one small interface every store implements, and the records stores return.

A store moves *encoded entries* (see `xlacache.entry`) by key. Stores never look
inside executables; they verify entries on read and compose into tiers
(`xlacache.stores.tiered`). Modelled on fsspec's one-interface-many-backends and
bazel-remote's cache/ backends.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field

from xlacache import entry
from xlacache.stores.jobs import JobLog
from xlacache.stores.leases import LeaseTable


@dataclass(frozen=True)
class EntryInfo:
    """What a store knows about one entry without reading its payload."""

    key: str
    size: int  # bytes the encoded entry takes in the store
    payload_size: int  # uncompressed executable bytes
    created: float  # unix time the entry was written
    last_used: float  # unix time of the last hit (created if never hit)
    hits: int
    compile_seconds: float
    label: str
    # What decides whether a process can load it (0 / "": not known, never stale).
    format_version: int = 0
    jaxlib: str = ""  # the jaxlib version that compiled it
    platform: str = ""
    rewarmed_from: str = ""  # the jaxlib `xlacache rewarm` compiled it from ("": compiled live)

    def to_dict(self) -> dict:
        return asdict(self)

    def is_stale(self, jaxlib: str) -> bool:
        """Whether no process running `jaxlib` (and this entry format) can load it."""
        wrong_format = self.format_version not in (0, entry.FORMAT_VERSION)
        return wrong_format or (self.jaxlib not in ("", jaxlib))


# The one LRU order: least recently used first, ties by key. `lru_split` is the one LRU
# selection (prune, prefetch, `inspect --would-load`); the index's SQL (eviction inside a
# write, prune: `stores.index_schema.PRUNE`) orders by LRU_ORDER, and a test holds them
# to the same choice.
LRU_ORDER = "last_used, key"


def lru_split(
    infos: Iterable[EntryInfo],
    max_bytes: int | None = None,
    limit: int | None = None,
    size: Callable[[EntryInfo], int] = lambda i: i.size,
) -> tuple[list[EntryInfo], list[EntryInfo]]:
    """(older, recent), both least recently used first: `recent` are the most recently
    used entries that fit in `limit` entries and `max_bytes` (each counted by `size`;
    None: no limit), `older` the rest: what LRU eviction to that size removes."""
    ordered = sorted(infos, key=lambda i: (i.last_used, i.key))
    cut, total = len(ordered), 0
    while cut > 0 and (limit is None or len(ordered) - cut < limit):
        total += size(ordered[cut - 1])
        if max_bytes is not None and total > max_bytes:
            break
        cut -= 1
    return ordered[:cut], ordered[cut:]


@dataclass(frozen=True)
class PrunePolicy:
    """What `Store.prune` removes. None means no limit of that kind."""

    max_size: int | None = None  # bytes; least recently used go first
    older_than: float | None = None  # seconds since created
    unused_for: float | None = None  # seconds since last used
    # The jaxlib version of the processes that use the store: entries no such process
    # can load (another jaxlib, another entry format) go (`prune --stale`).
    stale_for: str | None = None

    def __post_init__(self) -> None:
        if self.stale_for == "":
            raise ValueError("PrunePolicy.stale_for: name the jaxlib version to keep")

    def select(self, infos: Iterable[EntryInfo], now: float) -> list[EntryInfo]:
        """The entries this policy removes: too old or unused first, then least recently
        used ones until the rest fit in max_size."""
        doomed: list[EntryInfo] = []
        survivors: list[EntryInfo] = []
        for info in infos:
            too_old = self.older_than is not None and now - info.created > self.older_than
            unused = self.unused_for is not None and now - info.last_used > self.unused_for
            stale = self.stale_for is not None and info.is_stale(self.stale_for)
            (doomed if too_old or unused or stale else survivors).append(info)
        if self.max_size is not None:
            doomed += lru_split(survivors, self.max_size)[0]
        return doomed


@dataclass
class StoreSummary:
    entries: int = 0
    bytes: int = 0
    payload_bytes: int = 0
    hits: int = 0
    compile_seconds: float = 0.0  # total compile time the stored entries represent

    @classmethod
    def of(cls, infos: Iterable[EntryInfo]) -> StoreSummary:
        """The summary of these entries."""
        total = cls()
        for info in infos:
            total.entries += 1
            total.bytes += info.size
            total.payload_bytes += info.payload_size
            total.hits += info.hits
            total.compile_seconds += info.compile_seconds
        return total

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class VersionSummary:
    """Entries and bytes of one jaxlib version (`Store.by_jaxlib`; "" when not known)."""

    jaxlib: str
    entries: int = 0
    bytes: int = 0
    rewarmed: int = 0  # of them, compiled by `xlacache rewarm` from another jaxlib's entry

    def to_dict(self) -> dict:
        return asdict(self)


def group_by_jaxlib(infos: Iterable[EntryInfo]) -> list[VersionSummary]:
    """Entries, bytes and rewarmed entries per jaxlib version, newest first."""
    return group_totals(
        VersionSummary(i.jaxlib, 1, i.size, int(bool(i.rewarmed_from))) for i in infos
    )


def group_totals(parts: Iterable[VersionSummary]) -> list[VersionSummary]:
    """Parts of the same version summed, newest version first ("" last)."""
    groups: dict[str, VersionSummary] = {}
    for part in parts:
        group = groups.setdefault(part.jaxlib, VersionSummary(part.jaxlib))
        group.entries += part.entries
        group.bytes += part.bytes
        group.rewarmed += part.rewarmed
    return [groups[v] for v in sorted(groups, key=_version_order, reverse=True)]


def _version_order(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def current_jaxlib() -> str:
    """The installed jaxlib's version (what `prune --stale` keeps); "" without jaxlib."""
    try:
        from jaxlib import version
    except ImportError:
        return ""
    return version.__version__


@dataclass
class VerifyReport:
    checked: int = 0
    corrupt: list[str] = field(default_factory=list)
    repaired: bool = False
    stale_temp_files: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class Store(abc.ABC):
    """A place that keeps encoded entries under their keys.

    `get` returns a verified entry or None and raises CorruptEntryError when what it
    found fails verification (having removed it, unless read-only). Other failures
    raise CacheError subclasses (each with its `kind`) or OSError; the caller
    (`xlacache.cache`) turns them into misses.

    Every backend implements the abstract methods. `list_page`, `scan` and
    `put_stream` have plain default implementations on top of them, which backends
    override where they can do better (an index that pages in SQL, a write that
    streams to disk).
    """

    url: str
    readonly: bool = False

    @abc.abstractmethod
    def get(self, key: str) -> bytes | None:
        """The verified encoded entry stored under `key`, or None."""

    @abc.abstractmethod
    def put(self, key: str, blob: bytes) -> None:
        """Store an encoded entry atomically; readers never see part of it."""

    @abc.abstractmethod
    def contains(self, key: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, key: str) -> bool:
        """Remove an entry; True if it was there."""

    @abc.abstractmethod
    def stat(self, key: str) -> EntryInfo | None: ...

    @abc.abstractmethod
    def list(self) -> Iterator[EntryInfo]:
        """Every entry, in no particular order."""

    def list_page(self, after: str = "", limit: int = 1000) -> list[EntryInfo]:
        """Up to `limit` entries whose keys sort after `after`, in key order.

        A listing a page at a time: pass the last key of one page to get the next.
        (The default sorts `list()`; backends with an ordered index page in it.)
        """
        later = sorted((i for i in self.list() if i.key > after), key=lambda i: i.key)
        return later[:limit]

    def scan(self) -> Iterator[EntryInfo]:
        """Every entry, read from the entries themselves rather than any index.

        Slower than `list` where a store keeps an index, and exact where the index
        may lag (export, read-only access beside a live writer). Defaults to `list`.
        """
        return self.list()

    def put_stream(self, key: str, chunks: Iterable[bytes | memoryview]) -> None:
        """Store an entry that arrives in pieces, verifying it whole before it counts.

        Raises CorruptEntryError (storing nothing) unless the pieces form a valid entry
        for `key`. The default joins the pieces and calls `put`; stores that can write
        a piece at a time (LocalStore) hold only one in memory.
        """
        blob = b"".join(chunks)
        entry.verify(blob, key)
        self.put(key, blob)

    @abc.abstractmethod
    def summary(self) -> StoreSummary: ...

    def by_jaxlib(self) -> list[VersionSummary]:
        """Entries and bytes per jaxlib version (`xlacache stats`). The default groups
        `list()`; an index groups in SQL."""
        return group_by_jaxlib(self.list())

    @abc.abstractmethod
    def prune(self, policy: PrunePolicy, dry_run: bool = False) -> list[EntryInfo]:
        """Remove what the policy says (or only report it); returns the removed entries."""

    def verify(self, repair: bool = False) -> VerifyReport:
        """Check every entry; with repair, remove the corrupt ones."""
        raise NotImplementedError(f"{type(self).__name__} cannot verify")

    def read_header(self, key: str) -> entry.Header | None:
        """The checked header of the entry under `key`, or None when absent.

        For tools that compare entries (explain, diff, trust audits), so not a use. This
        default reads the whole entry (`peek`); backends override it to read only the
        header where they can.
        """
        blob = self.peek(key)
        return None if blob is None else entry.read_header(blob)

    def peek(self, key: str) -> bytes | None:
        """The verified entry under `key`, or None, read without counting it as a use.

        For tools that look at entries (explain, diff). This default is `get`; backends
        that record uses on `get` override it.
        """
        return self.get(key)

    # -- recorded misses (xlacache.misslog records; `xlacache explain`) ------------------

    @property
    def can_report_misses(self) -> bool:
        """Whether `report_miss` may be called on this store by this process."""
        return False

    def report_miss(self, record: dict) -> None:
        """Keep one explained miss (a `xlacache.misslog` record) for `recent_misses`.

        Every backend keeps a bounded number; a read-only store raises ReadOnlyError
        (a server, whose ring is no part of the cache, takes reports from readers too).
        """
        raise NotImplementedError(f"{self.url}: this store keeps no recorded misses")

    def recent_misses(self, limit: int | None = None) -> list[dict]:
        """Recorded misses, newest first (at most `limit`)."""
        raise NotImplementedError(f"{self.url}: this store keeps no recorded misses")

    def exists(self) -> bool:
        """Whether a writer has made this store (a read-only view of a directory nobody
        made yet reads as empty, and has no writer to wait for)."""
        return True

    def publish(self, key: str, blob: bytes) -> None:
        """Store an entry so that every process sharing this store finds it on return.

        What a single-flight compiler calls before it releases its lease. The default is
        `put`; a tier uploads now instead of in the background.
        """
        self.put(key, blob)

    def leases(self) -> LeaseTable | None:
        """The leases that let the processes sharing this store compile a key once
        (`xlacache.stores.leases`), or None where the store has none."""
        return None

    def jobs(self) -> JobLog | None:
        """The manifests of what each job used (`xlacache.stores.jobs`), for shared stores
        that keep them; None otherwise."""
        return None

    def record_hit(self, key: str) -> None:  # noqa: B027 - a store that counts no uses
        """Count a use of an entry read with `peek` (a prefetched entry a request took)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and file handles."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
