"""Device RNG state, seeded by ``torch.manual_seed`` (through torch's seeding hook).

Random ops recorded during one trace epoch (the ops between two barriers) share one RNG leaf that
holds ``(seed, epoch)`` and differ by their index within the epoch, which is a static attribute.
So a steady loop sees the same graph every step (no recompilation) while every step draws new
numbers: the epoch is a graph input.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .graph import Node, rng_node
from .state import STATE


def _restart(torch_seed: int, seed: int) -> None:
    STATE.torch_seed = torch_seed
    STATE.rng_seed = seed & 0xFFFFFFFF
    STATE.rng_epoch = STATE.rng_index = STATE.rng_calls = 0
    STATE.rng_leaf = None


def _check_seed() -> None:
    s = torch.initial_seed()
    if s != STATE.torch_seed:  # torch.manual_seed was called: restart the device stream
        _restart(s, s)


def next_key() -> tuple[Node, int]:
    """The epoch's RNG leaf and the next op index within the epoch."""
    _check_seed()
    if STATE.rng_leaf is None:
        key = np.array([STATE.rng_seed, STATE.rng_epoch], dtype=np.uint32)
        STATE.rng_leaf = rng_node(key)
    i = STATE.rng_index
    STATE.rng_index = i + 1
    return STATE.rng_leaf, i


COMPILED_STREAM = 0x636F6D70  # folded into a compiled call's key: apart from the lazy draws


def compiled_stream(key: Any) -> Any:
    """The key a compiled call's draws derive from its key ``(seed, call)``: in its program
    (a traced value) or on the host (a numpy array), the same fold."""
    import jax

    return jax.random.fold_in(key, COMPILED_STREAM)


def compiled_key() -> np.ndarray:
    """The key of one call of a compiled graph that draws random numbers: ``(seed, call)``,
    a new one per call, restarted by ``torch.manual_seed`` as the lazy stream is (the graph
    folds a constant of its own into it, apart from the lazy graphs' ``(seed, epoch)``)."""
    _check_seed()
    STATE.rng_calls += 1
    return np.array([STATE.rng_seed, STATE.rng_calls], dtype=np.uint32)


def new_epoch() -> None:
    """Called at every barrier that runs pending ops."""
    if STATE.rng_leaf is not None:
        STATE.rng_epoch += 1
        STATE.rng_index = 0
        STATE.rng_leaf = None


def set_seed(seed: int) -> None:
    """Reseed the device stream (``xm.set_rng_state``)."""
    _restart(torch.initial_seed(), seed)


def get_seed() -> int:
    _check_seed()
    return int(STATE.rng_seed)


class _SeedHook:
    """Torch's seeding hook for a device of its own: ``torch.manual_seed`` and ``torch.seed``
    call ``torch.<privateuse1 backend name>.manual_seed_all(seed)`` when torch has that module
    (``torch.random._seed_custom_device``). Registered (``torch._register_device_module``) by
    ``install_seed_hook`` while the privateuse1 slot is free; it reports no device available,
    so nothing else in torch takes it for a backend."""

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return 0

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        set_seed(int(seed))


def get_state() -> torch.Tensor:
    """The device stream's state (``torch.xla.get_rng_state()``): its seed and how far it has
    drawn, as a byte tensor (torch's convention for RNG states)."""
    _check_seed()
    words = [STATE.torch_seed, STATE.rng_seed, STATE.rng_epoch, STATE.rng_index]
    return torch.from_numpy(np.array(words, dtype=np.uint64).view(np.uint8).copy())


def set_state(state: torch.Tensor) -> None:
    """Put the device stream back where ``get_state`` read it: the draws that follow repeat
    the ones that followed then (what activation checkpointing needs to recompute dropout)."""
    words = state.detach().cpu().numpy().view(np.uint64)  # torch seeds are unsigned 64-bit
    torch_seed, seed, epoch, index = (int(v) for v in words)
    if (epoch, seed) != (STATE.rng_epoch, STATE.rng_seed):
        STATE.rng_leaf = None  # a leaf keyed by the restored seed and epoch, at the next draw
    STATE.torch_seed, STATE.rng_seed, STATE.rng_epoch, STATE.rng_index = (
        torch_seed,
        seed,
        epoch,
        index,
    )


class _DeviceModule:
    """``torch.xla``: the device's runtime module as torch's device-generic code reads it
    (``torch.utils.checkpoint`` saves and restores the device RNG through it)."""

    _initialized = True

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device(index: Any = None) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return get_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        set_state(state)


def install_device_module() -> Callable[[], None] | None:
    """Register ``torch.xla`` (``_DeviceModule``) unless something (torch_xla) already has;
    the undo, or None."""
    if hasattr(torch, "xla"):
        return None
    torch._register_device_module("xla", _DeviceModule)

    def undo() -> None:
        if getattr(torch, "xla", None) is _DeviceModule:
            delattr(torch, "xla")
            sys.modules.pop("torch.xla", None)

    return undo


# The RNG states torch's RNG-state operators save for a checkpointed region's recomputation
# (CPU byte tensors, as torch's): where the region ran lazily, ``get_state``'s four 64-bit
# words followed by the CPU generator's state (a draw the lazy runtime makes on the host:
# ``randint``, a CPU fallback); where a compiled program drew, three words
# (``compiled_state``): its call's key and the draw's number. Either says which key and index
# the draw used (``state_words``).
_LAZY_STATE_BYTES, _COMPILED_STATE_BYTES = 32, 24


def compiled_state(key: np.ndarray, index: int) -> torch.Tensor:
    """The state of draw ``index`` of a compiled call keyed ``key`` (``compiled_key``)."""
    words = np.array([int(key[0]), int(key[1]), index], dtype=np.uint64)
    return torch.from_numpy(words.view(np.uint8).copy())


def state_words(state: torch.Tensor) -> np.ndarray:
    """``(key0, key1, index, compiled)`` (uint32) of a saved RNG state: the draw it saved
    uses the key ``(key0, key1)``, folded with ``COMPILED_STREAM`` where ``compiled`` is 1,
    and its number ``index`` (``lowering.random.lower_random``)."""
    data = state.detach().cpu()
    n = data.numel()
    if data.dtype != torch.uint8 or (n != _COMPILED_STATE_BYTES and n < _LAZY_STATE_BYTES):
        raise ValueError(
            f"not an xla RNG state: a {data.dtype} tensor of {n} elements "
            f"(want {_COMPILED_STATE_BYTES} bytes, or at least {_LAZY_STATE_BYTES})"
        )
    if n == _COMPILED_STATE_BYTES:
        return np.array([*data.numpy().view(np.uint64), 1], dtype=np.uint32)
    _, seed, epoch, index = data[:_LAZY_STATE_BYTES].numpy().view(np.uint64)
    return np.array([seed, epoch, index, 0], dtype=np.uint32)


def run_and_save_rng_state(op: Any, *args: Any, **kwargs: Any) -> tuple:
    """Torch's ``run_and_save_rng_state`` on the lazy device: the state (the device stream's
    position and the CPU generator's), and the draw ``op`` makes."""
    state = torch.cat([get_state(), torch.get_rng_state()])
    return state, op(*args, **kwargs)


def run_with_rng_state(state: torch.Tensor, op: Any, *args: Any, **kwargs: Any) -> Any:
    """Torch's ``run_with_rng_state`` on the lazy device: the draw ``op`` with the key and
    index ``state`` saved (either kind of state), then the device stream and the CPU generator
    put back exactly as they were."""
    k0, k1, index, compiled = (int(w) for w in state_words(state))
    key = np.array([k0, k1], dtype=np.uint32)
    if compiled:
        key = np.asarray(compiled_stream(key), dtype=np.uint32)
    _check_seed()
    saved = (STATE.rng_leaf, STATE.rng_index)
    host = torch.get_rng_state() if state.numel() > _LAZY_STATE_BYTES else None
    STATE.rng_leaf, STATE.rng_index = rng_node(key), index
    if host is not None:
        torch.set_rng_state(state.detach().cpu()[_LAZY_STATE_BYTES:].clone())
    try:
        return op(*args, **kwargs)
    finally:
        STATE.rng_leaf, STATE.rng_index = saved
        if host is not None:
            torch.set_rng_state(host)


def install_rng_hops() -> Callable[[], None]:
    """Torch's RNG-state operators on lazy tensors (``run_and_save_rng_state`` and
    ``run_with_rng_state``: what AOTAutograd writes for a checkpointed region that draws, so
    that its recomputation draws the same numbers) save and restore the device stream; the
    undo. Torch has them for CPU and CUDA only."""
    from torch._prims import rng_prims as hops

    from .tensor import LazyTensor, PlainLazyTensor

    added = []
    for hop, fn in ((hops.run_and_save_rng_state, run_and_save_rng_state),
                    (hops.run_with_rng_state, run_with_rng_state)):  # fmt: skip
        for cls in (LazyTensor, PlainLazyTensor):
            if cls not in hop.python_key_table:
                hop.py_impl(cls)(fn)
                added.append((hop, cls))

    def undo() -> None:
        for hop, cls in added:
            hop.python_key_table.pop(cls, None)
            hop._dispatch_cache.clear()

    return undo


def install_seed_hook() -> Callable[[], None] | None:
    """Let ``torch.manual_seed(s)`` restart the device stream (same seed, same numbers) through
    torch's seeding hook; the undo, or None where the slot is taken (then a new seed is still
    seen through ``torch.initial_seed()``, but reseeding with the same seed is not)."""
    from . import torch_internals

    return torch_internals.register_seed_module(_SeedHook)


_TorchGenerator = torch._C.Generator


class XlaGenerator(_TorchGenerator):
    """A ``torch.Generator`` for the ``xla`` device: its own stream of device random numbers.

    Every draw that names it uses the device RNG keyed by ``(seed, draws so far)`` (a graph
    input, so a loop does not recompile): the same seed gives the same numbers. The host
    generator underneath keeps the seed (``manual_seed``, ``seed``, ``initial_seed``) and serves
    the ops that draw on the host (``randint``, ``randperm``, ``multinomial``).
    """

    def __new__(cls, device: Any = "xla") -> XlaGenerator:
        return super().__new__(cls)  # a host (CPU) generator underneath

    def __init__(self, device: Any = "xla") -> None:
        self._draws = 0
        # torch hands a generator to ``__torch_dispatch__`` in a new wrapper of the same C++
        # generator: ``_cdata`` (that generator's address) finds this object again
        _XLA_GENERATORS[self._cdata] = self

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("xla:0")

    def manual_seed(self, seed: int) -> XlaGenerator:  # type: ignore[override]
        super().manual_seed(seed)
        self._draws = 0
        return self

    def seed(self) -> int:  # type: ignore[override]
        self._draws = 0
        return super().seed()

    def get_state(self) -> torch.Tensor:  # type: ignore[override]
        return torch.tensor([self.initial_seed(), self._draws], dtype=torch.int64).view(torch.uint8)

    def set_state(self, state: torch.Tensor) -> XlaGenerator:  # type: ignore[override]
        seed, draws = (int(v) for v in state.view(torch.int64))
        super().manual_seed(seed)
        self._draws = draws
        return self

    def next_key(self) -> tuple[Node, int]:
        """A fresh RNG leaf for one draw (index 0 in it)."""
        key = np.array([self.initial_seed() & 0xFFFFFFFF, self._draws & 0xFFFFFFFF], np.uint32)
        self._draws += 1
        return rng_node(key), 0


_XLA_GENERATORS: weakref.WeakValueDictionary[int, XlaGenerator] = weakref.WeakValueDictionary()


def key_for(generator: Any) -> tuple[Node, int]:
    """The RNG leaf and index of one draw: from ``generator`` if given, else the epoch's."""
    if generator is None:
        return next_key()
    xla = _XLA_GENERATORS.get(generator._cdata)
    if xla is not None:
        return xla.next_key()
    raise RuntimeError(
        f"Expected a 'xla' device type for generator but found '{generator.device.type}'"
    )


class _GeneratorMeta(type(_TorchGenerator)):  # type: ignore[misc]
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _TorchGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _TorchGenerator)


class Generator(_TorchGenerator, metaclass=_GeneratorMeta):
    """``torch.Generator`` that also makes generators for the ``xla`` device.

    Installed as ``torch.Generator`` when the device is first used (``xl.device()``), until
    ``xl.uninstall()``; every other device gets torch's own generator, and
    ``isinstance(g, torch.Generator)`` holds for every generator, as before.
    """

    def __new__(cls, device: Any = None) -> Any:  # type: ignore[misc]
        if device is not None and torch.device(device).type == "xla":
            return XlaGenerator(device)
        args = () if device is None else (device,)
        if cls is not Generator:  # a user's subclass of torch.Generator
            return _TorchGenerator.__new__(cls, *args)
        return _TorchGenerator(*args)


def install_generator() -> Callable[[], None]:
    """Make ``torch.Generator(device="xla")`` return an ``XlaGenerator`` (every other device
    gets torch's own generator); the undo puts torch's class back."""
    if torch.Generator is Generator:
        return lambda: None
    Generator.__doc__ = (_DOC or "") + "\n" + (_TorchGenerator.__doc__ or "")
    before = torch.Generator
    torch.Generator = Generator  # type: ignore[misc]

    def undo() -> None:
        if torch.Generator is Generator:
            torch.Generator = before  # type: ignore[misc]

    return undo


_DOC = Generator.__doc__
