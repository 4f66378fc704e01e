"""``rendezvous`` and ``mesh_reduce`` through the job's coordination service (its key-value
store): small host values, bounded waits (``XLACACHE_RENDEZVOUS_TIMEOUT``, 300 s)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch

from ..state import STATE
from . import env

_ROUNDS: dict[str, int] = STATE.rounds


def rendezvous(tag: str, payload: bytes = b"", replicas: Any = None) -> list[bytes]:
    """``xm.rendezvous``: wait until every process reached ``tag``; every process's
    ``payload``, in rank order. Raises after the timeout naming the ranks that never came."""
    job = env.current()
    if job.world == 1:
        return [bytes(payload)]
    if replicas and sorted(replicas) != list(range(job.world)):
        raise NotImplementedError("xlacache.lazy: rendezvous of a subset of the processes")
    n = _ROUNDS[tag] = _ROUNDS.get(tag, 0) + 1  # a tag may be used again: each use a round
    base = f"xlacache/rendezvous/{tag}/{n}"
    client = env.client()
    client.key_value_set_bytes(f"{base}/{job.rank}", bytes(payload))
    timeout = env.lazy_setting("rendezvous_timeout")
    out: list[bytes] = []
    for r in range(job.world):
        try:
            out.append(client.blocking_key_value_get_bytes(f"{base}/{r}", int(timeout * 1000)))
        except Exception as e:  # noqa: BLE001 - a timeout or the job going down
            raise RuntimeError(
                f"xlacache.lazy: rendezvous {tag!r} (round {n}): rank {r} did not arrive within "
                f"{timeout:g} s ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
            ) from None
    return out


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, _to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list], Any]) -> Any:
    """``xm.mesh_reduce``: ``reduce_fn`` of every process's ``data`` (in rank order; tensors
    arrive on CPU), the same result on every process."""
    if env.current().world == 1:
        return reduce_fn([data])
    buf = io.BytesIO()
    torch.save(_to_cpu(data), buf)
    parts = rendezvous(tag, buf.getvalue())
    # the job's own processes wrote these: plain pickles (weights_only would refuse numbers)
    return reduce_fn([torch.load(io.BytesIO(p), weights_only=False) for p in parts])
