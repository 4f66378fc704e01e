"""``MpDeviceLoader``: moves batches to the device in a background thread, syncs every step.

With ``input_sharding`` (SPMD), batches are placed sharded (``spmd/batches.py``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import torch


class MpDeviceLoader:
    """Wraps a loader: yields its batches on ``device`` and calls ``sync()`` after each step.

    A background thread iterates the loader and copies each batch to the device (a plain
    host-to-device transfer, no graph), keeping ``prefetch`` batches ahead of the training loop.
    ``batches_per_execution`` > 1 syncs every that many steps. ``input_sharding`` (an
    ``xl.ShardingSpec``, or a dict of them by batch key) places each batch tensor sharded over
    the spec's mesh; with ``minibatch=True`` each process of a job loads its own slice of the
    global batch.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: torch.device,
        prefetch: int = 4,
        batches_per_execution: int = 1,
        input_sharding: Any = None,
        **kwargs: Any,
    ) -> None:
        self._loader = loader
        self._device = device
        self._prefetch = max(1, prefetch)
        self._every = max(1, batches_per_execution)
        self._sharding = input_sharding

    def __len__(self) -> int:
        return len(self._loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        from .executor import sync
        from .spmd.batches import batch_to_device

        q: queue.Queue = queue.Queue(self._prefetch)
        done = object()
        stop = threading.Event()

        def worker() -> None:
            try:
                for b in self._loader:
                    if stop.is_set():
                        return
                    b = batch_to_device(b, self._device, self._sharding)
                    q.put(b)
            except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
                q.put(e)
            q.put(done)

        th = threading.Thread(target=worker, daemon=True, name="MpDeviceLoader")
        th.start()
        step = 0
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
                step += 1
                if step % self._every == 0:
                    sync()
            if step % self._every:
                sync()
        finally:
            stop.set()
            while th.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    th.join(0.05)


class ParallelLoader:
    """torch_xla's ``pl.ParallelLoader``: ``per_device_loader(device)`` gives an MpDeviceLoader."""

    def __init__(self, loader: Iterable[Any], devices: list[torch.device], **kwargs: Any) -> None:
        self._loader = loader
        self._kwargs = kwargs

    def per_device_loader(self, device: torch.device) -> MpDeviceLoader:
        return MpDeviceLoader(self._loader, device, **self._kwargs)
