"""A writer's used keys, recorded in its job's manifest in the shared store.

A writer with a job (`XLACACHE_JOB`) notes each key it uses; `JobRecorder` writes them to
the job's manifest (`stores/jobs.py`) on a daemon thread every RECORD_EVERY seconds and at
exit, so a new worker of the job prefetches them (`xlacache.prefetch`).
"""

from __future__ import annotations

import atexit
import threading

from xlacache import counters
from xlacache.errors import kind_of
from xlacache.stores.jobs import JobLog, new_run

RECORD_EVERY = 2.0  # seconds between a writer's job manifest updates
CLOSE_WAIT = 30.0  # at most, for a write in flight at close (each store call has a deadline)


class JobRecorder:
    """A writer's used keys, written to its job's manifest every RECORD_EVERY seconds (on
    a daemon thread) and at exit; failures are counted, never raised."""

    def __init__(self, jobs: JobLog, job: str) -> None:
        self.jobs = jobs
        self.job = job
        self.run = new_run()
        self._seen: set[str] = set()
        self._pending: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="xlacache-job", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def note(self, key: str) -> None:
        with self._cond:
            if key in self._seen or self._closed:
                return
            self._seen.add(key)
            self._pending.append(key)
            self._cond.notify()

    @counters.background("job.record")
    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if self._closed:
                    return
                # gather what a step compiles into one write (close cuts it short)
                self._cond.wait_for(lambda: self._closed, RECORD_EVERY)
            self.flush()

    def flush(self) -> None:
        with self._cond:
            keys, self._pending = self._pending, []
        if not keys:
            return
        try:
            self.jobs.record(self.job, self.run, keys)
        except Exception as exc:  # noqa: BLE001
            counters.record_error(kind_of(exc), exc)

    def close(self) -> None:
        """Write what is left; a write the thread has in flight finishes first (within
        CLOSE_WAIT), so that the store is not closed under it."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT)
        self.flush()
