"""Every process of a job runs the same cross-process programs, in the same order: checked.

A program that spans processes (a graph with collectives over the process mesh, an SPMD graph
over a mesh with other processes' devices, the gather of a read) runs only if every process
runs it at the same point: otherwise its collectives pair with another program's (a hang, or
a wrong number). So before each such execution, each process posts the graph's key under the
execution's sequence number (its count of cross-process executions, which cannot drift: every
correct process makes the same executions; compiles, evictions and hits of its caches do not
count) in the job's coordination service, and reads every other process's key for that
number. A different key (`MismatchError`), a process that exited (`PeerExitedError`), one that
does not arrive within ``XLACACHE_COLLECTIVE_TIMEOUT`` (300 s: `AgreementTimeout`), or a
coordination service that fails (`CoordinationError`) is an error naming the ranks, raised on
every process before anything runs; each is an `AgreementError` (a RuntimeError). The
processes stay paired (each consumed the number), so a caught error leaves the job usable.

Values are compared the same way: a program over a mesh posts with its key a digest of the
inputs each process passes from its own memory (host numbers, one-device data: they must be
the same everywhere, or the global program would mix them), and a value placed across
processes (``mark_sharding``, a whole batch for every process) posts its digest alone.

Cost: one key-value write and one read per other process per execution (loopback: about a
millisecond for two processes). Keys of finished blocks are deleted, so the store stays small.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import re

from ..state import STATE
from . import env

_BLOCK = 256  # sequence numbers per key-value directory; a finished block is deleted
_EXITED = "exited"
_SEQUENCES: dict[str, itertools.count] = STATE.sequences
_LAST: dict[str, int] = STATE.last_sequence
_STATUS = re.compile(r"([A-Z][A-Z_]+): ")  # an XLA status error's code, leading its text


class AgreementError(RuntimeError):
    """The processes of a job cannot be shown to run the same cross-process program."""


class AgreementTimeout(AgreementError):
    """A rank did not post within XLACACHE_COLLECTIVE_TIMEOUT (behind, hung, or dead)."""


class PeerExitedError(AgreementError):
    """A rank exited before the program (it runs nothing more)."""


class MismatchError(AgreementError):
    """Ranks run different programs, or pass different values where they must agree."""


class CoordinationError(AgreementError):
    """The job's coordination service failed the read (its status code says how)."""


def _key(domain: str, n: int, rank: int) -> str:
    return f"xlacache/{domain}/{n // _BLOCK}/{n}/{rank}"


def agree(key: bytes, what: str, domain: str = "runs", inputs: bytes = b"") -> None:
    """Check that every process runs graph ``key`` (``what`` it is, for errors) as its next
    cross-process program, with the same ``inputs`` (a digest of the values every process
    must pass alike); raises AgreementError naming the ranks that do not. With no graph (an
    empty ``key``), ``inputs`` is a value every process must hold alike. A ``domain`` is a
    sequence of its own (the main thread's programs: ``runs``; a loader thread's batches:
    another)."""
    job = env.current()
    if job.world == 1:
        return
    if not _LAST:  # the first cross-process agreement: say at exit that this one is done
        atexit.register(_post_exit)
    if domain not in _SEQUENCES:
        _SEQUENCES[domain] = itertools.count(1)
    n = _LAST[domain] = next(_SEQUENCES[domain])
    kv = env.client()
    mine = f"{key.hex()}/{inputs.hex()} {what}"
    kv.key_value_set(_key(domain, n, job.rank), mine)
    timeout = env.lazy_setting("collective_timeout")
    theirs: dict[int, str] = {}
    for r in range(job.world):
        if r == job.rank:
            continue
        try:
            theirs[r] = kv.blocking_key_value_get(_key(domain, n, r), int(timeout * 1000))
        except Exception as e:  # noqa: BLE001 - classified by its status code, else a bug
            failure = _failed_read(e, r, n, what, timeout)
            if failure is e:
                raise
            raise failure from e
    exited = sorted(r for r, v in theirs.items() if v == _EXITED)
    differ = sorted(r for r, v in theirs.items() if v != mine and v != _EXITED)
    if exited:
        raise PeerExitedError(
            f"xlacache.lazy: rank(s) {exited} exited before cross-process program #{n} "
            f"({what} on rank {job.rank}): every process must run the same graphs that span "
            "processes (reads of sharded values and syncs included)"
        )
    same_graph = [r for r in differ if theirs[r].split("/")[0] == mine.split("/")[0]]
    if same_graph and not key:
        raise MismatchError(
            f"xlacache.lazy: rank(s) {same_graph} hold another value than rank {job.rank} for "
            f"{what} (cross-process step #{n}): every process must pass the same value (seed "
            "every process alike; per-rank data goes through MpDeviceLoader(input_sharding="
            "ShardingSpec(..., minibatch=True)))"
        )
    if same_graph:
        raise MismatchError(
            f"xlacache.lazy: rank(s) {same_graph} run cross-process program #{n} ({what}) "
            f"with other inputs than rank {job.rank}: a value every process must pass alike "
            "differs (a Python number, a random seed, an unsharded tensor made per rank); "
            "seed every process alike and shard per-rank data with mark_sharding or "
            "MpDeviceLoader(input_sharding=ShardingSpec(..., minibatch=True))"
        )
    if differ:
        detail = "; ".join(f"rank {r}: {_describe(theirs[r])}" for r in differ)
        raise MismatchError(
            f"xlacache.lazy: ranks run different programs at cross-process program #{n}: "
            f"rank {job.rank}: {_describe(mine)}; {detail}. Every process must trace the same "
            "steps, read the same values (.cpu(), .item(), print of sharded values are "
            "collective) in the same order, and shard the same values with mark_sharding; "
            "run rank-specific work after sync()"
        )
    if n % _BLOCK == 0 and job.rank == 0:
        # every process posted n, so each has read every key of the block before
        with contextlib.suppress(Exception):
            kv.key_value_delete(f"xlacache/{domain}/{n // _BLOCK - 1}/")


def _failed_read(e: Exception, rank: int, n: int, what: str, timeout: float) -> Exception:
    """What a failed read of `rank`'s post is: a timeout, the coordination service failing
    (by the status code leading an XLA runtime error), or, for anything else, itself (a
    bug, raised as it is)."""
    status = _STATUS.match(str(e)) if isinstance(e, RuntimeError) else None
    if status is None:
        return e
    if status.group(1) == "DEADLINE_EXCEEDED":
        return AgreementTimeout(
            f"xlacache.lazy: rank {rank} did not reach cross-process program #{n} ({what}) "
            f"within {timeout:g} s (XLACACHE_COLLECTIVE_TIMEOUT): it is behind, hung or dead; "
            "every process must run the same graphs that span processes, in the same order"
        )
    return CoordinationError(
        f"xlacache.lazy: the job's coordination service failed reading rank {rank}'s post "
        f"for cross-process program #{n} ({what}): {str(e).splitlines()[0][:300]}"
    )


def _describe(posted: str) -> str:
    key, _, what = posted.partition(" ")
    return f"{what} (graph {key[:12]})"


def _post_exit() -> None:
    """At exit, tell the others this process runs nothing more (they raise at once)."""
    job = env.current()
    if job.world > 1:
        with contextlib.suppress(Exception):
            kv = env.client()
            for domain in {"runs", *_SEQUENCES}:
                kv.key_value_set(_key(domain, _LAST.get(domain, 0) + 1, job.rank), _EXITED)
