"""The lazy tensor: a wrapper subclass on the ``xla`` device whose value is an IR node output.

This module owns the tensor class, its state cells and the live registry. It records nothing
itself: ``__torch_dispatch__`` hands every aten op to the dispatcher that ``xlacache.lazy``
installs (``install_dispatcher``; ``dispatch.dispatch``), so imports run one way, from the
dispatcher down to here. All lazy tensors report contiguous strides (like torch_xla): the IR
works on logical values.
"""

from __future__ import annotations

import collections
import copy
import gc
import itertools
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from xlacache.lazy_settings import lazy_setting

from . import _device, metrics, torch_internals
from .graph import Node
from .state import STATE

DEVICE = _device.DEVICE
LOCK = STATE.lock  # one tracer at a time (the training loop and MpDeviceLoader's thread)
_SEQ = itertools.count()


class Cell:
    """The state of one lazy tensor; tensors hold it strongly, the live registry weakly.

    ``_v`` is the current value ``(node, output)``; ``_meta`` its (contiguous) meta tensor, and
    ``_lay`` a meta tensor with eager's strides when eager would not lay it out contiguously
    (``x.t()``, ``x[:, 1:]``, ``x.t() * 2``; else None). A view also has ``_root`` (the cell of the
    storage it views), ``_chain`` (the view ops from the root to it) and ``_rgen`` (the root's
    ``_gen`` when ``_v`` was derived); a root counts its in-place updates in ``_gen``.
    Keeping the state (and the weak reference) off the tensor object lets
    ``torch.utils.swap_tensors`` work on lazy tensors, which ``Module.to`` uses for wrapper
    subclasses and which keeps tied weights tied.
    """

    __slots__ = ("_v", "_meta", "_lay", "_root", "_chain", "_rgen", "_gen", "seq", "__weakref__")

    def __init__(self, meta: torch.Tensor, v: tuple[Node, int]) -> None:
        self.seq = next(_SEQ)
        self._v = v
        self._meta = meta
        self._lay: torch.Tensor | None = None
        self._root: Cell | None = None
        self._chain: tuple = ()
        self._rgen = 0
        self._gen = 0


def _fwd(name: str) -> property:
    def get(self: LazyTensor) -> Any:
        return getattr(self._c, name)

    def put(self: LazyTensor, val: Any) -> None:
        setattr(self._c, name, val)

    return property(get, put)


_now = time.perf_counter_ns
_DATA = torch._C.TensorBase.data  # torch's ``Tensor.data`` descriptor
_INNER = torch_internals.lazy_inner_tensors()
_set_eval_frame = torch._C._dynamo.eval_frame.set_eval_frame
_inference_mode = torch.is_inference_mode_enabled


def install_dispatcher(fn: Callable[[Any, tuple, dict], Any]) -> None:
    """Route every aten op on lazy tensors to ``fn(func, args, kwargs)``."""
    STATE.dispatcher = fn


def untraced() -> None:
    """Called by a handler that records nothing (an alias, a read, a cached constant): the op
    it handles at the top level is not counted in ``TracedOps`` (its time is in ``TraceTime``)."""
    if STATE.depth == 1:
        STATE.untraced = True


def tracing_nested() -> bool:
    """True inside an op that another op dispatched (a decomposition, a special handler)."""
    return STATE.depth > 1


class LazyTensor(torch.Tensor):
    """A tensor on the ``xla`` device whose value is an IR node output (``_v``)."""

    _c: Cell
    # torch functions go straight to ``__torch_dispatch__`` (no Python ``__torch_function__``
    # layer per op: results are lazy tensors already)
    __torch_function__ = torch._C._disabled_torch_function_impl
    _v = _fwd("_v")
    _meta = _fwd("_meta")
    _root = _fwd("_root")
    _chain = _fwd("_chain")
    _rgen = _fwd("_rgen")
    _gen = _fwd("_gen")

    @staticmethod
    def __new__(cls, meta: torch.Tensor, value: tuple[Node, int]) -> LazyTensor:
        r = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, dtype=meta.dtype, device=DEVICE, requires_grad=False
        )
        c = r._c = Cell(meta, value)
        _REFS.append(_ref(c))
        if len(_REFS) > STATE.refs_limit:
            live_tensors()
        return r

    def tolist(self) -> Any:
        return self.detach().cpu().tolist()

    @property
    def data(self) -> Any:
        return _DATA.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        # ``p.data = t`` (``vector_to_parameters``, init code): ``p`` keeps its identity and
        # ``requires_grad`` and takes ``t``'s shape, dtype and value, sharing its storage, as
        # in eager; torch's setter (its checks, the sizes) alone would keep the old value
        _DATA.__set__(self, new)
        self._c = new.detach()._c  # an alias of ``t``: writes to either reach the other

    def numpy(self, *, force: bool = False) -> Any:
        if self.requires_grad and not force:  # eager's check (a copy would drop the graph)
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. "
                "Use tensor.detach().numpy() instead."
            )
        return self.detach().cpu().numpy()

    # Lazy tensors report contiguous strides: where eager's layout (``Cell._lay``) is not,
    # ``contiguous()`` copies as eager does (a write to ``x.t().contiguous()`` must not reach
    # ``x``); ``reshape``/``flatten`` copy in ``record`` (a view eager's layout does not allow)
    def contiguous(self, memory_format: torch.memory_format = torch.contiguous_format) -> Any:
        lay = self._c._lay
        if lay is None:
            return super().contiguous(memory_format=memory_format)
        if lay.is_contiguous(memory_format=memory_format):
            return self
        return self.clone(memory_format=memory_format)

    # Dynamo (``torch.compile``) sees a lazy tensor as a traceable wrapper subclass with no
    # inner tensors; its fake is a plain ``FakeTensor`` on the ``xla`` device (as torch_xla's
    # tensors are), so the graphs Dynamo and AOTAutograd trace hold plain tensors
    # (``docs/compile.md``).
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return _INNER, self.dtype  # no inner tensor (before torch 2.12: its meta tensor)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Any:
        mode = torch._guards.detect_fake_mode()  # the tracing context's (not an inner one's)
        if mode is None:
            raise NotImplementedError("xlacache.lazy tensors cannot be rebuilt from inner tensors")
        with mode:
            return torch.empty_strided(size, stride, dtype=ctx, device=DEVICE)

    def _is_view(self) -> bool:
        # Dynamo fakes a view from its base by replaying the view with the base's strides;
        # lazy tensors report contiguous strides, so while Dynamo traces a lazy view is given
        # as a tensor of its own (an in-place update of it still reaches its base: AOTAutograd
        # applies it to this tensor, whose lazy view tracking writes it through)
        if torch._guards.TracingContext.try_get() is not None:
            return False
        return super()._is_view()

    def __coerce_same_metadata_as_tangent__(self, meta: Any, expected: Any = None) -> Any:
        """AOTAutograd traced the backward with plain tensors: a lazy tangent passes as one
        (the same state, in a wrapper that does not claim the subclass protocol)."""
        if meta is not None or expected not in (None, torch.Tensor):
            return None
        r = torch.Tensor._make_wrapper_subclass(
            PlainLazyTensor, self.shape, dtype=self.dtype, device=DEVICE
        )
        r._c = self._c
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        text = repr(self.detach().cpu())
        return text[:-1] + ", device='xla:0')"

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return format(self.item(), spec)
        return repr(self)

    def __reduce_ex__(self, proto: int) -> Any:
        # what torch does for torch_xla's tensors: the value goes to CPU and is rebuilt on the
        # device by a function ``torch.load(weights_only=True)`` allows (``map_location`` works)
        if getattr(self, "_is_param", False):  # a Parameter comes back one, as in eager
            return (
                torch._utils._rebuild_parameter,
                (self.detach(), self.requires_grad, collections.OrderedDict()),
            )
        return (
            torch._utils._rebuild_device_tensor_from_cpu_tensor,
            (self.detach().cpu(), self.dtype, str(DEVICE), self.requires_grad),
        )

    def untyped_storage(self) -> torch.UntypedStorage:
        """A data-less storage that identifies the device storage this tensor views.

        Lazy tensors hold no host memory; this storage has a unique fake address in a range no
        process maps (never dereferenced: the tensor's ops never touch it) and the viewed
        tensor's size, so aliasing checks (``safetensors``, ``save_pretrained``'s tied weights)
        see tensors that share storage (a tensor, its ``detach()``, tied weights) as shared.
        """
        return storage_of(self._c)

    def data_ptr(self) -> int:
        return self.untyped_storage().data_ptr()  # storage_offset() is always 0

    def __deepcopy__(self, memo: dict) -> Any:
        """What eager's does for a device tensor: a clone, with ``requires_grad``, a deep copy
        of the gradient and of the instance's attributes (a Parameter's mark among them)."""
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment."
            )
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            out = self.clone()
        if self.requires_grad:
            out.requires_grad_(True)
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        attributes = {k: v for k, v in self.__dict__.items() if k != "_c"}  # _c: the value
        out.__dict__.update(copy.deepcopy(attributes, memo))
        memo[id(self)] = out
        return out

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        if _inference_mode() and func.is_view and not args[0].is_inference():
            # a view of a tensor made outside inference mode is a normal tensor, as in eager
            # (torch then shares the base's version counter with it, which an inference
            # tensor refuses)
            with torch.inference_mode(False):
                return cls.__torch_dispatch__(func, types, args, kwargs)
        with LOCK:
            s = STATE
            if s.depth:  # nested (a decomposition): timed by the outer call
                s.depth += 1
                try:
                    return s.dispatcher(func, args, kwargs or {})
                finally:
                    s.depth -= 1
            if s.traced_ops >= s.trim_at:  # the pending graph past a cap? (trim.py)
                _look_at_pending(s)
            s.depth = 1
            s.untraced = False
            if s.gc_deferred is None and _GC_DEFER:
                _defer_gc()
            t0 = _now()
            # the runtime's Python (and JAX's) runs as it is, never as frames for Dynamo to
            # compile: after a graph break, eager code reaches here with Dynamo's hook set
            dynamo = _set_eval_frame(None)
            try:
                return s.dispatcher(func, args, kwargs or {})
            finally:
                _set_eval_frame(dynamo)
                s.trace_ns += _now() - t0
                if not s.untraced:
                    s.traced_ops += 1
                s.depth = 0


def _look_at_pending(s: Any) -> None:
    """Between two top-level ops: run what is pending if it passed the cap (``trim.py``)."""
    dynamo = _set_eval_frame(None)  # the runtime's Python is never Dynamo's frames
    try:
        s.trim_check()
    finally:
        _set_eval_frame(dynamo)


_wrapper = torch.Tensor._make_wrapper_subclass


def new_lazy(
    meta: torch.Tensor, aval: tuple, v: tuple[Node, int], lay: torch.Tensor | None = None
) -> LazyTensor:
    """``LazyTensor(meta, v)`` where ``aval`` is ``meta``'s ``(shape tuple, dtype)`` (the
    recording hot path has it: no ``torch.Size`` made); ``lay``: ``Cell._lay``."""
    r = _wrapper(LazyTensor, aval[0], dtype=aval[1], device=DEVICE)
    c = r._c = Cell(meta, v)
    c._lay = lay
    _REFS.append(_ref(c))
    if len(_REFS) > STATE.refs_limit:
        live_tensors()
    return r


class _NoAttribute:
    def __get__(self, obj: Any, owner: Any) -> Any:
        raise AttributeError("not a traceable wrapper subclass")


class PlainLazyTensor(LazyTensor):
    """A lazy tensor that AOTAutograd's runtime treats as a plain tensor (a backward's
    tangent); it shares the state of the tensor it was made from."""

    __tensor_flatten__ = _NoAttribute()  # type: ignore[assignment]
    __tensor_unflatten__ = _NoAttribute()  # type: ignore[assignment]


# Tracing a step allocates tens of thousands of objects that live until the barrier (nodes,
# tensors, attribute tuples) and makes no cyclic garbage, yet the cyclic collector would scan
# them again and again (measured: a third of the tracing time of a GPT step). From the first op
# after a barrier to the next barrier, the young-generation threshold is raised so that it
# rarely runs (never switched off: a program that stops at no barrier still collects); the
# barrier puts the thresholds back. ``XLACACHE_LAZY_GC_DEFER=0`` turns this off.
_GC_DEFER = lazy_setting("gc_defer")
_GC_DEFERRED_THRESHOLD = 500_000


def _defer_gc() -> None:
    before = gc.get_threshold()
    if before[0] <= 0 or before[0] >= _GC_DEFERRED_THRESHOLD:
        return  # collection is off, or already this lax: leave it alone
    during = (_GC_DEFERRED_THRESHOLD, before[1], before[2])
    gc.set_threshold(*during)
    STATE.gc_deferred = (before, during)


def restore_gc() -> None:
    """At a barrier: the collector's thresholds as they were before tracing (unless the program
    changed them meanwhile)."""
    saved = STATE.gc_deferred
    if saved is not None:
        STATE.gc_deferred = None
        if gc.get_threshold() == saved[1]:
            gc.set_threshold(*saved[0])


def flush_trace_metrics() -> None:
    """Record the tracing time of the step that ends now (metric ``TraceTime``)."""
    if STATE.trace_ns:
        metrics.metric_add("TraceTime", STATE.trace_ns)
    if STATE.traced_ops:
        metrics.counter_inc("TracedOps", STATE.traced_ops)
    STATE.trace_ns = STATE.traced_ops = 0
    STATE.trim_at = STATE.trim_every


# The live registry: a weak reference to every state cell, in creation order. Plain weak
# references (no callbacks, unlike a WeakSet) cost little for the thousands of short-lived
# tensors a step records; dead ones are dropped by ``live_tensors``, which runs at every
# barrier, and whenever the list has doubled since it last ran.
_REFS: list[weakref.ReferenceType[Cell]] = STATE.refs
_ref = weakref.ref


def live_tensors() -> list[Cell]:
    """The state cells of all live lazy tensors, oldest first (a deterministic graph order)."""
    refs = _REFS
    n = len(refs)
    cells: list[Cell] = []
    alive = []
    for r in refs[:n]:
        c = r()
        if c is not None:
            cells.append(c)
            alive.append(r)
    # one slice assignment: a reference another thread appends meanwhile (past n) survives
    refs[:n] = alive
    STATE.refs_limit = max(1 << 16, 2 * len(refs))
    return cells


def contiguous_meta(meta: torch.Tensor) -> torch.Tensor:
    """``meta`` itself if it is contiguous, else a contiguous meta tensor of its shape/dtype."""
    if not meta.is_contiguous() or meta.storage_offset():
        meta = torch.empty(meta.shape, dtype=meta.dtype, device="meta")
    return meta


def wrap(meta: torch.Tensor, v: tuple[Node, int]) -> LazyTensor:
    """A new lazy tensor with value ``v`` (``meta`` gives shape and dtype; strides contiguous)."""
    return LazyTensor(contiguous_meta(meta), v)


class _Shell(torch.Tensor):
    """Donates a storage of the right size to ``set_shape`` (never holds a value)."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        raise RuntimeError("xlacache.lazy: internal storage shell used as a tensor")


_META_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


def set_shape(t: LazyTensor, shape: Any) -> None:
    """Change the sizes torch reports for ``t`` in place (contiguous strides): in-place view
    ops. The meta kernel of ``set_`` does it on the C++ tensor; its storage holds no data."""
    shape = [int(s) for s in shape]
    if list(t.shape) == shape:
        return
    shell = torch.Tensor._make_wrapper_subclass(_Shell, shape, dtype=t.dtype, device=DEVICE)
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _META_KEYS, t, shell.untyped_storage(), 0, shape, list(shell.stride())
    )


_STORAGES: weakref.WeakKeyDictionary[Cell, torch.UntypedStorage] = STATE.storages


def storage_of(c: Cell) -> torch.UntypedStorage:
    """The identifying storage of the storage that ``c`` views (its root's), made once."""
    root = c._root if c._root is not None else c
    st = _STORAGES.get(root)
    if st is None:
        st = _STORAGES[root] = fake_storage(root._meta.numel() * root._meta.element_size())
    return st


def fake_storage(nbytes: int, device: torch.device = DEVICE) -> torch.UntypedStorage:
    """A data-less storage of ``nbytes`` on ``device`` at a unique fake address."""
    addr = STATE.fake_address  # non-canonical on x86-64 and arm64: any access faults
    STATE.fake_address += (nbytes + 127) // 64 * 64  # never two live storages overlap
    return torch._C._construct_storage_from_data_pointer(addr, device, nbytes)
