"""Step closures (torch_xla's ``xm.add_step_closure``): run after the next barrier.

A closure queued during a step runs right after the step's ``sync()``, when every live tensor,
those it captured included, is device data: reading them (``loss.item()``) is a transfer, not
another graph. Closures run in the order they were queued; ``run_async=True`` ones run on one
background thread (same order), and an exception there is raised by the next ``sync()``.
"""

from __future__ import annotations

import atexit
import queue
import threading
from collections.abc import Callable
from typing import Any

from .state import STATE

_pending: list[tuple[Callable[..., Any], tuple, bool]] = STATE.closures
_lock = threading.Lock()
_EXIT_WAIT_S = 30.0


def add(closure: Callable[..., Any], args: tuple = (), run_async: bool = False) -> None:
    """Queue ``closure(*args)`` to run after the next ``sync()``."""
    with _lock:
        _pending.append((closure, tuple(args), run_async))


def run() -> None:
    """Run the queued closures (called by ``sync`` after the step ran)."""
    err = STATE.closure_error
    if err is not None:
        STATE.closure_error = None
        raise RuntimeError("xlacache.lazy: an asynchronous step closure failed") from err
    with _lock:
        todo = _pending[:]
        _pending.clear()
    for fn, args, run_async in todo:
        if run_async:
            _worker().put((fn, args))
        else:
            fn(*args)


def _worker() -> queue.Queue:
    q = STATE.closure_queue
    if q is None:
        q = STATE.closure_queue = queue.Queue()
        threading.Thread(target=_serve, args=(q,), daemon=True, name="StepClosures").start()
        atexit.register(_drain, q)
    return q


def _serve(q: queue.Queue) -> None:
    while True:
        fn, args = q.get()
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - raised by the next sync
            if STATE.closure_error is None:
                STATE.closure_error = e
        finally:
            q.task_done()


def _drain(q: queue.Queue) -> None:
    """At exit: give queued asynchronous closures a bounded time to finish."""
    done = threading.Event()
    threading.Thread(target=lambda: (q.join(), done.set()), daemon=True).start()
    done.wait(_EXIT_WAIT_S)
