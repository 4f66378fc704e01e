"""When a stored entry reaches the disk: the fsync policy of a local store.

Every read verifies an entry (header and body SHA-256) before anything uses it, so an
entry that a power loss or kernel crash lost, or left torn, costs a miss and a
recompile, never a wrong answer; a killed process loses nothing (the kernel has the
bytes). Durability is then a trade of write speed against how much recent work a
machine crash may cost, not one of correctness:

- ``always``: the entry file is fsynced before its rename and its directory after it,
  before the write returns. A write costs a disk flush.
- ``background``: the write returns once the entry is renamed into place; a thread
  fsyncs new entries and their directories in batches every `BATCH_SECONDS`, so a
  machine crash costs at most about that much recent work.
- ``off``: no fsync on the write path; the kernel writes dirty pages back on its own
  (within about 30 s on Linux, `vm.dirty_expire_centisecs`). `sync()` (the server
  calls it on a graceful shutdown) fsyncs what was written in the last
  `RECENT_SECONDS`, so a planned restart loses nothing. The server's default: writes
  run at page-cache speed instead of the disk's (on a disk slower than the network,
  forcing each PUT out costs most of its time), and a crash costs at most ~30 s of
  entries, each a miss.

Torn or missing entries after a crash are found by reads (and removed), and the index
rows they leave are dropped by the reconcile on open.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from xlacache import counters
from xlacache.config import parse_bool
from xlacache.errors import ConfigError

log = logging.getLogger("xlacache")

ALWAYS, BACKGROUND, OFF = "always", "background", "off"
MODES = (ALWAYS, BACKGROUND, OFF)
BATCH_SECONDS = 1.0  # how long a background-synced entry may wait for its fsync
EARLY_BATCH = 4096  # pending entries that start a batch before its time
RECENT_SECONDS = 60.0  # with fsync off: entries younger than this are synced by sync()
RECENT_MAX = 10_000  # ... and at most this many (the oldest are the kernel's by then)


def fsync_mode(value: bool | str) -> str:
    """The mode `value` names: a mode, or a boolean (true: always, false: off)."""
    if isinstance(value, bool):
        return ALWAYS if value else OFF
    text = str(value).strip().lower()
    if text in MODES:
        return text
    try:
        return ALWAYS if parse_bool(text) else OFF  # the words of every boolean setting
    except ConfigError:
        raise ConfigError(f"expected always, background or off, not {value!r}") from None


def fsync_path(path: Path) -> None:
    """fsync a file or directory by name; one that vanished meanwhile is skipped."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Syncer:
    """Syncs renamed entry files and their directories after the write returned.

    `background`: in batches, on a thread of its own (started on first use, again
    after a fork). `off`: never by itself; it remembers the recent writes for `flush()`.
    """

    def __init__(self, mode: str, interval: float = BATCH_SECONDS) -> None:
        self.mode = mode
        self.interval = interval
        self._pending: dict[Path, float] = {}  # path -> when written (insertion order)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._closed = False

    def add(self, path: Path) -> None:
        now = time.monotonic()
        with self._cond:
            self._pending.pop(path, None)
            self._pending[path] = now
            if self.mode == OFF:
                self._forget_old(now)
                return
            thread = self._thread
            if thread is None or not thread.is_alive() or self._pid != os.getpid():
                self._start()
            if len(self._pending) >= EARLY_BATCH:
                self._cond.notify()

    def flush(self) -> int:
        """fsync everything pending (or recent) now; how many entries were synced."""
        with self._cond:
            if self.mode == OFF:
                self._forget_old(time.monotonic())
            batch, self._pending = list(self._pending), {}
        directories = dict.fromkeys(p.parent for p in batch)
        for path in [*batch, *directories]:
            try:
                fsync_path(path)
            except OSError as exc:  # a full or failing disk: reads will tell, entry by entry
                log.warning("fsync of %s failed: %s", path, exc)
                counters.hidden("fsync", exc)
        return len(batch)

    def close(self) -> None:
        """Stop the thread; background mode syncs what is pending (off syncs nothing)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join()
        if self.mode == BACKGROUND:
            self.flush()

    def _forget_old(self, now: float) -> None:
        """Off mode: drop what the kernel has had time to write back (lock held)."""
        while self._pending:
            path, written = next(iter(self._pending.items()))
            if now - written < RECENT_SECONDS and len(self._pending) <= RECENT_MAX:
                return
            del self._pending[path]

    def _start(self) -> None:
        self._pid = os.getpid()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="xlacache-fsync", daemon=True)
        self._thread.start()

    @counters.background("fsync")
    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closed and len(self._pending) < EARLY_BATCH:
                    self._cond.wait(self.interval)
                if self._closed:
                    return
            self.flush()
