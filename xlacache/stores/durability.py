"""When a stored entry reaches the disk: the fsync policy of a local store.

Every read verifies an entry (header and body SHA-256) before anything uses it, so an
entry that a power loss or kernel crash lost, or left torn, costs a miss and a
recompile, never a wrong answer. That makes durability a trade of latency against how
much recent work a crash may cost, not one of correctness:

- ``always``: the entry file is fsynced before its rename and its directory after it,
  before the write returns (a PUT is acknowledged only once it survives a power loss).
- ``background``: the write returns once the entry is renamed into place (readers see
  it at once; a killed process loses nothing, the kernel has the bytes); a background
  thread fsyncs new entries and their directories in batches every `BATCH_SECONDS`,
  so a power loss costs at most about that much recent work. The server's default.
- ``off``: never fsync; the kernel writes back in its own time (about 30 s on Linux).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from xlacache.errors import ConfigError

log = logging.getLogger("xlacache")

ALWAYS, BACKGROUND, OFF = "always", "background", "off"
MODES = (ALWAYS, BACKGROUND, OFF)
BATCH_SECONDS = 1.0  # how long a background-synced entry may wait for its fsync
EARLY_BATCH = 4096  # pending entries that start a batch before its time

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no"}


def fsync_mode(value: bool | str) -> str:
    """The mode `value` names: a mode, or a boolean (true: always, false: off)."""
    if isinstance(value, bool):
        return ALWAYS if value else OFF
    text = str(value).strip().lower()
    if text in MODES:
        return text
    if text in _TRUE:
        return ALWAYS
    if text in _FALSE:
        return OFF
    raise ConfigError(f"fsync must be always, background or off, not {value!r}")


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


class BackgroundSync:
    """fsyncs renamed entry files and their directories in batches, on a thread of its
    own (started on first use, again after a fork); `close()` syncs what is pending."""

    def __init__(self, interval: float = BATCH_SECONDS) -> None:
        self.interval = interval
        self._pending: dict[Path, None] = {}  # an ordered set
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._closed = False

    def add(self, path: Path) -> None:
        with self._cond:
            self._pending[path] = None
            thread = self._thread
            if thread is None or not thread.is_alive() or self._pid != os.getpid():
                self._start()
            if len(self._pending) >= EARLY_BATCH:
                self._cond.notify()

    def flush(self) -> int:
        """fsync everything pending now; how many entries were synced."""
        with self._cond:
            batch, self._pending = list(self._pending), {}
        directories = dict.fromkeys(p.parent for p in batch)
        for path in [*batch, *directories]:
            try:
                fsync_path(path)
            except OSError as exc:  # a full or failing disk: reads will tell, entry by entry
                log.warning("background fsync of %s failed: %s", path, exc)
        return len(batch)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join()
        self.flush()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="xlacache-fsync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closed and len(self._pending) < EARLY_BATCH:
                    self._cond.wait(self.interval)
                if self._closed:
                    return
            self.flush()
