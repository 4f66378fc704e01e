"""``torch.load(f, map_location=<the xla device>)``: a checkpoint's tensors restored onto the
device.

``torch.load`` reads each storage into host memory and hands it, with the location asked for,
to the deserializers registered with ``torch.serialization.register_package``; the tensors are
then rebuilt as ``torch.empty(0, device=storage.device).set_(storage, offset, size, stride)``.
For an ``xla`` location ``restore`` returns a data-less stand-in storage on the device (unique
fake address, as every lazy tensor's storage) and remembers the host storage behind it for as
long as the stand-in lives, that is during the load; ``set_`` of a lazy tensor to a stand-in
copies the view it names to the device (``views.py``). So ``map_location`` works as a string
(``"xla"``, ``"xla:0"``), a ``torch.device`` (``xl.device()``) or a dict (``{"cpu":
"xla:0"}``), with ``weights_only`` and ``mmap`` as torch allows them.

Each tensor is its own device copy: tensors that shared a storage in the file do not share
one on the device (as torch_xla's checkpoints load). A tensor that appears several times in
the file is one object, as in eager.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from . import torch_internals
from .tensor import fake_storage

# stand-in address -> the host storage torch.load read (dropped when the stand-in dies)
_HOST: dict[int, torch.UntypedStorage] = {}


def _tag(obj: Any) -> None:
    return None  # saving: a lazy tensor pickles as its CPU copy (``LazyTensor.__reduce_ex__``)


def restore(host: torch.UntypedStorage, location: str) -> torch.UntypedStorage | None:
    """The deserializer: for an ``xla`` location, a stand-in storage on that device."""
    if not location.startswith("xla"):
        return None
    stand_in = fake_storage(host.nbytes(), torch.device(location))
    addr = stand_in.data_ptr()
    _HOST[addr] = host
    weakref.finalize(stand_in, _HOST.pop, addr, None)
    return stand_in


def install() -> Callable[[], None]:
    """Register ``restore`` with ``torch.serialization``, after torch's own deserializers
    (which decline ``xla`` locations); returns the undo."""
    # a priority nobody else holds: the registry sorts its entries, and two of one priority
    # would compare their functions
    taken = {entry[0] for entry in torch_internals.package_registry()}
    priority = next(p for p in itertools.count(40) if p not in taken)
    torch.serialization.register_package(priority, _tag, restore)
    return lambda: torch_internals.unregister_package(restore)


def host_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage | None:
    """The host storage behind a stand-in ``restore`` made (None for any other storage)."""
    return _HOST.get(storage.data_ptr()) if storage.device.type == "xla" else None
