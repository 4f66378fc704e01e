"""Gloo's connection lines, kept out of a job's standard output.

Gloo (JAX's CPU collectives across processes) prints ``[Gloo] Rank N is connected to M peer
ranks. Expected number of connected peer ranks is : M`` with ``std::cout`` for every group of
devices it connects, from XLA's threads: two dozen lines per SPMD run, often interleaved
into one another, with no setting to turn them off. A process of a multi-process job
(``env.start``) therefore sends its file descriptor 1 through a pipe: a thread forwards
everything to the real standard output except those lines (a line that says a rank is NOT
connected is kept). ``XLACACHE_GLOO_LOG=1`` leaves standard output alone. ``restore()``
(at exit, and before ``launch``'s workers exit early) forwards what is left and puts file
descriptor 1 back.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

from xlacache.lazy_settings import lazy_setting

from ..state import STATE

_TAG = b"[Gloo]"
# What a connection line is made of: its words, numbers and spacing (lines interleave).
_CONNECTION_PARTS = re.compile(
    rb"\[Gloo\] Rank|is connected to|peer ranks\.|Expected number of connected peer ranks is :|"
    rb"[\d\s]"
)
_JOIN_S = 5.0  # longest wait at exit for the forwarder to drain the pipe


def is_connection_noise(line: bytes) -> bool:
    """Whether `line` holds nothing but Gloo's "is connected" lines (whole or interleaved)."""
    return _TAG in line and b"NOT connected" not in line and not _CONNECTION_PARTS.sub(b"", line)


def keep(data: bytes) -> tuple[bytes, bytes]:
    """(what to write now, what to hold until more comes) from buffered output: whole lines
    that are not connection noise, and a trailing partial line unless it may be one."""
    *lines, tail = data.split(b"\n")
    out = b"".join(line + b"\n" for line in lines if not is_connection_noise(line + b"\n"))
    if tail and _TAG not in tail and not _TAG.startswith(tail[-len(_TAG) :]):
        return out + tail, b""
    return out, tail


class _Forwarder:
    def __init__(self) -> None:
        sys.stdout.flush()
        self.real = os.dup(1)
        read, write = os.pipe()
        os.dup2(write, 1)
        os.close(write)
        self.read = read
        self.thread = threading.Thread(target=self._run, name="xlacache-stdout", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        held = b""
        while chunk := os.read(self.read, 65536):
            out, held = keep(held + chunk)
            if out:
                os.write(self.real, out)
        if held and not is_connection_noise(held):
            os.write(self.real, held)
        os.close(self.read)

    def restore(self) -> None:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                stream.flush()
        os.dup2(self.real, 1)  # the pipe's last writer (here) goes: the forwarder drains it
        self.thread.join(_JOIN_S)
        os.close(self.real)


def install() -> None:
    """Filter Gloo's connection lines from this process's standard output (once), unless
    XLACACHE_GLOO_LOG asks for them."""
    if STATE.stdout_filter is not None or lazy_setting("gloo_log"):
        return
    STATE.stdout_filter = _Forwarder()
    atexit.register(restore)


def restore() -> None:
    """Forward what is left and give file descriptor 1 back (idempotent)."""
    forwarder, STATE.stdout_filter = STATE.stdout_filter, None
    if forwarder is not None:
        forwarder.restore()
