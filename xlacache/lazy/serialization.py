"""torch_xla's ``torch_xla.utils.serialization`` (``xser``): save a checkpoint one tensor at a
time, so the host holds one tensor's copy, not the whole checkpoint's.

``save(data, path)`` writes ``data`` to ``path`` with each device tensor replaced by a
reference, and each tensor, copied to the CPU, to its own file in ``path + ".tensors"``;
``load(path)`` puts them back, as CPU tensors (move them with ``.to(device)`` or
``load_state_dict``). A tensor that appears several times in ``data`` is written once and
comes back as one tensor. ``map_tensors`` is the walk over nested containers that this and
``xl.save`` share.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

from .distributed.rendezvous import rendezvous
from .executor import sync
from .runtime import is_master_ordinal
from .tensor import LazyTensor


def map_tensors(obj: Any, fn: Callable[[Any], Any], kind: type = torch.Tensor) -> Any:
    """``obj`` with each ``kind`` instance ``t`` (a tensor) inside its dicts, lists, tuples and
    named tuples replaced by ``fn(t)``; anything else is kept as it is."""
    if isinstance(obj, kind):
        return fn(obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn, kind)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        vals = [map_tensors(v, fn, kind) for v in obj]
        return type(obj)(*vals) if hasattr(obj, "_fields") else type(obj)(vals)
    return obj


class TensorReference:
    """Where a saved device tensor went: ``tensor_<tid>.pt`` in the tensors folder."""

    def __init__(self, tid: int) -> None:
        self.tid = tid


def _folder(path: str | os.PathLike) -> str:
    return os.fspath(path) + ".tensors"


def _file(folder: str, tid: int) -> str:
    return os.path.join(folder, f"tensor_{tid}.pt")


def save(data: Any, path: str | os.PathLike, master_only: bool = True,
         global_master: bool = False) -> None:  # fmt: skip
    """``xser.save``: ``data`` with its device tensors copied to the CPU and written one at a
    time. Every process of a job calls it; with ``master_only`` only the master (of the host,
    or of the job with ``global_master``) writes, and the processes meet after the write."""
    sync()
    write = not master_only or is_master_ordinal(local=not global_master)
    folder = _folder(path)
    if write:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    ids: dict[int, TensorReference] = {}

    def reference(t: torch.Tensor) -> Any:
        if not isinstance(t, LazyTensor):
            return t
        ref = ids.get(id(t))
        if ref is None:
            ref = ids[id(t)] = TensorReference(len(ids))
            cpu = t.detach().cpu()  # every process: reading a sharded value is collective
            if write:
                torch.save(cpu, _file(folder, ref.tid))
        return ref

    refs = map_tensors(data, reference)
    if write:
        torch.save(refs, path)
    rendezvous("xlacache.lazy.serialization.save")


def load(path: str | os.PathLike) -> Any:
    """``xser.load``: what ``save`` wrote, its tensors on the CPU."""
    with torch.serialization.safe_globals([TensorReference]):
        refs = torch.load(path, weights_only=True)
    folder = _folder(path)
    loaded: dict[int, torch.Tensor] = {}

    def tensor(ref: TensorReference) -> torch.Tensor:
        t = loaded.get(ref.tid)
        if t is None:
            t = loaded[ref.tid] = torch.load(_file(folder, ref.tid), weights_only=True)
        return t

    return map_tensors(refs, tensor, TensorReference)
