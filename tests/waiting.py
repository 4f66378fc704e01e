"""`wait_for`: the one way a test waits for what another thread or process does."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    procs: Iterable[subprocess.Popen] = (),
    interval: float = 0.05,
) -> T:
    """Call `predicate` until it returns something truthy, and return that.

    Raises AssertionError naming `what` once `timeout` seconds have passed, or as soon as one
    of `procs` (children that must stay alive meanwhile) has exited, with its stderr's tail.
    An exception `predicate` raises propagates. The timeout bounds the wait; it asserts
    nothing about speed."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(
                    f"waiting for {what}: pid {proc.pid} exited with {proc.returncode}"
                    f"{_stderr_tail(proc)}"
                )
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _stderr_tail(proc: subprocess.Popen) -> str:
    if proc.stderr is None or proc.stderr.closed:
        return ""
    err = proc.stderr.read()
    if isinstance(err, bytes):
        err = err.decode(errors="replace")
    return f":\n{err[-3000:]}" if err else ""
