"""``launch``: one process per device, each running ``fn(index, *args)`` in one job.

The parent reserves a free loopback port for the coordinator, starts the workers (``spawn``)
with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``XLACACHE_COORDINATOR`` in their environment from the start (so anything the script does at
import, such as ``xlacache.initialize_cache`` choosing its role, sees its rank), and watches
them. A worker that raises, exits non-zero or is killed stops the job: the parent terminates
the others and raises ``LaunchError`` naming the rank and what happened to it. Workers die
with the parent (``PR_SET_PDEATHSIG`` on Linux). Under torchrun (``RANK`` and ``WORLD_SIZE``
already set) ``launch`` runs ``fn`` in this process, as one worker of that job.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from . import env, quiet

MAX_CPU_PROCESSES = 8
_GRACE_S = 5.0


class LaunchError(RuntimeError):
    """A worker of ``launch`` failed; the others were stopped."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


def launch(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    start_method: str = "spawn",
    debug_single_process: bool = False,
) -> list[Any] | Any:
    """``torch_xla.launch``: run ``fn(index, *args)`` in ``nprocs`` processes, one job.

    ``nprocs`` defaults to one process per CPU core (at most 8). ``fn`` must be importable by
    the workers (a module-level function; a script needs ``if __name__ == "__main__":``).
    Returns every worker's return value, in rank order (those must pickle). Under torchrun,
    or with ``debug_single_process`` or one process, ``fn`` runs here and its value is
    returned.
    """
    if debug_single_process:
        return fn(0, *args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        job = env.job_from_env()
        env.start(job)
        return fn(job.local_rank, *args)
    n = nprocs if nprocs is not None else min(os.cpu_count() or 1, MAX_CPU_PROCESSES)
    if n < 1:
        raise ValueError(f"xlacache.lazy.launch: nprocs must be >= 1, got {n}")
    if n == 1:
        return fn(0, *args)
    return _Job(fn, args, n, start_method).run()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` while a worker starts (it copies the environment)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker(fn: Callable[..., Any], index: int, args: tuple, conn: Connection) -> None:
    _die_with_parent()
    try:
        env.start(env.job_from_env())
        result = fn(index, *args)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, then a non-zero exit
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        with contextlib.suppress(Exception):
            _send(conn, ("error", f"{type(e).__name__}: {e}", text))
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        quiet.restore()  # what the filter holds reaches the terminal before _exit
        os._exit(1)  # skip jax.distributed's shutdown barrier: the parent stops the others
    try:
        _send(conn, ("ok", result, ""))
    except Exception as e:  # noqa: BLE001 - an unpicklable result
        _send(conn, ("ok", None, f"its return value could not be sent: {e}"))
    conn.close()


def _send(conn: Connection, message: tuple) -> None:
    # plain pickle: multiprocessing's own pickler shares tensors through file descriptors
    # that vanish with the worker
    conn.send_bytes(pickle.dumps(message))


class _Job:
    def __init__(self, fn: Callable[..., Any], args: tuple, n: int, start_method: str) -> None:
        self.fn, self.args, self.n = fn, args, n
        self.ctx = multiprocessing.get_context(start_method)
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        self.results: dict[int, Any] = {}
        self.errors: dict[int, tuple[str, str]] = {}

    def run(self) -> list[Any]:
        reserved = env.reserve_port()  # held while the job runs: no other job gets it
        coordinator = f"127.0.0.1:{reserved.getsockname()[1]}"
        try:
            for i in range(self.n):
                recv, send = self.ctx.Pipe(duplex=False)
                values = {
                    "RANK": str(i),
                    "WORLD_SIZE": str(self.n),
                    "LOCAL_RANK": str(i),
                    "LOCAL_WORLD_SIZE": str(self.n),
                    "XLACACHE_COORDINATOR": coordinator,
                }
                with _environment(values):
                    p = self.ctx.Process(
                        target=_worker, args=(self.fn, i, self.args, send), name=f"xl-rank{i}"
                    )
                    p.start()
                send.close()
                self.procs.append(p)
                self.conns.append(recv)
            self._watch()
        finally:
            self._stop_all()
            reserved.close()
        return [self.results.get(i) for i in range(self.n)]

    def _receive(self, rank: int) -> None:
        conn = self.conns[rank]
        with contextlib.suppress(EOFError, OSError):
            while not conn.closed and conn.poll():
                kind, value, text = pickle.loads(conn.recv_bytes())
                if kind == "ok":
                    self.results[rank] = value
                    if text:
                        warnings.warn(f"xlacache.lazy.launch: rank {rank}: {text}", stacklevel=4)
                else:
                    self.errors[rank] = (value, text)

    def _watch(self) -> None:
        running = set(range(self.n))
        by_sentinel = {p.sentinel: i for i, p in enumerate(self.procs)}
        by_conn = {id(c): i for i, c in enumerate(self.conns)}
        open_conns = list(self.conns)
        while running:
            waiting = [self.procs[i].sentinel for i in running] + open_conns
            for ready in wait(waiting, timeout=1.0):
                if isinstance(ready, Connection):  # a result or an error: read it now
                    rank = by_conn[id(ready)]
                    self._receive(rank)
                    open_conns = [c for c in open_conns if c is not ready]
                    continue
                rank = by_sentinel[ready]
                self.procs[rank].join(_GRACE_S)
                self._receive(rank)
                running.discard(rank)
                code = self.procs[rank].exitcode
                if code != 0 or rank in self.errors:
                    raise self._failure(rank, code, len(running))

    def _failure(self, rank: int, code: int | None, others: int) -> LaunchError:
        stop = f"; stopped the other {others} worker(s)" if others else ""
        if rank in self.errors:
            message, text = self.errors[rank]
            return LaunchError(
                rank, f"xlacache.lazy.launch: rank {rank} raised {message}{stop}\n{text}"
            )
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        return LaunchError(rank, f"xlacache.lazy.launch: rank {rank} {how}{stop}")

    def _stop_all(self) -> None:
        """Kill the workers still running (after a failure, or when the parent is
        interrupted): SIGKILL, since JAX's runtime catches SIGTERM."""
        alive = [p for p in self.procs if p.exitcode is None]
        for p in alive:
            p.kill()
        for p in alive:
            p.join(_GRACE_S)
        for c in self.conns:
            c.close()
