"""The dispatcher: where each aten op on lazy tensors goes.

``dispatch(func, args, kwargs)`` (installed into ``LazyTensor.__torch_dispatch__`` by
``xlacache.lazy``) sends an op, in this order, to

0. eager's kernel on another device, for a ``*_like`` or ``new_*`` op whose ``device=`` names
   one (``other_device.py``: ``torch.zeros_like(x, device="cpu")``);
1. its special handler (``SPECIAL``, filled by ``special.py`` and ``random_ops.py`` with
   ``@special(op)``): aliases, copies and transfers, ``.item()``, splits, in-place view ops...;
2. ``record.record`` if ``lowering.LOWERINGS`` has it (one IR node), unless its output shape
   depends on the data (boolean-mask indexing, ``nonzero``...: CPU) or its lowering is for
   other arguments (``lowering.LOWERED_IF``: ``histc`` of floating values...: CPU);
3. a rewrite: in-place and ``out=`` ops become their functional op plus an assignment,
   ``_foreach_*`` ops one node over their lists (``foreach_nodes``) or a loop;
4. the op's ``CompositeImplicitAutograd`` kernel (as in eager), else PyTorch's decompositions
   (``torch._decomp``);
5. the CPU fallback (counted as ``aten::<op>``, as torch_xla does; an error with
   ``XLACACHE_LAZY_FALLBACK=0``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions, decomposition_table

from xlacache.lazy_settings import lazy_setting

from . import metrics
from .autocast import CPU_AUTOCAST_OPS, warn_cpu_autocast
from .executor import to_cpu
from .foreach import foreach_element
from .foreach_nodes import record_foreach
from .identity import UnencodableAttribute
from .lowering import ARGUMENT_CHECKS, LOWERED_IF, LOWERINGS, library_ops
from .lowering.elementwise import register_fma
from .lowering.registry import registrar
from .other_device import elsewhere, is_like_op, run_elsewhere
from .record import assign, check_output_cast, record, track_view
from .state import STATE
from .tensor import LazyTensor
from .torch_internals import view_bits_resolved
from .transfer import to_device

aten = torch.ops.aten
Handler = Callable[[tuple, dict], Any]
SPECIAL: dict[Any, Handler] = {}
_CORE_DECOMP = core_aten_decompositions()
_FALLBACK = lazy_setting("fallback")
_warned_fallback: set[str] = STATE.warned_fallback


# ``@special(op, ...)`` registers ``handler(args, kwargs)``: it runs instead of recording the op
special = registrar(SPECIAL, "a special handler")


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    r = _ROUTES.get(id(func))
    if r is None or r[0] is not func or STATE.routes_version != len(SPECIAL) + len(LOWERINGS):
        r = _route(func)
    kind = r[1]
    if kind is _RECORD:
        if r[2]:
            warn_cpu_autocast()
        try:
            return record(func, args, kwargs)
        except UnencodableAttribute:  # never approximate an attribute: run the op on CPU
            return cpu_fallback(func, args, kwargs)
    if kind is _SPECIAL:
        return r[2](args, kwargs)
    if kind is _INPLACE:  # the functional op is lowered: record it into the tensor
        f = r[2]
        try:
            return record(f, args, kwargs, into=args[0])
        except UnencodableAttribute:
            res = cpu_fallback(f, args, kwargs)
        _write_result(args[0], res if isinstance(res, LazyTensor) else res[0])
        return args[0]
    return _dispatch_slow(func, args, kwargs)


# How each op is dispatched, worked out on its first use: ``(op, kind, target)`` by ``id(op)``
# (an OpOverload's ``__hash__`` is a Python call; the entry keeps its op alive and is checked
# with ``is``). Rebuilt whenever a special handler or a lowering is added or removed.
_RECORD, _SPECIAL, _INPLACE, _OTHER = "record", "special", "inplace", "other"
_ROUTES: dict[int, tuple[Any, str, Any]] = STATE.routes


def _route(func: Any) -> tuple[Any, str, Any]:
    version = len(SPECIAL) + len(LOWERINGS)
    if STATE.routes_version != version:
        _ROUTES.clear()
        STATE.routes_version = version
    h = SPECIAL.get(func)
    if is_like_op(func):  # ``zeros_like(x, device="cpu")``: the slow path checks the device
        r = (func, _OTHER, None)
    elif h is not None:
        r = (func, _SPECIAL, h)
    elif func in LOWERINGS and func not in _MAYBE_DYNAMIC and func not in LOWERED_IF:
        r = (func, _RECORD, func in CPU_AUTOCAST_OPS)  # target: whether to check CPU autocast
    else:
        f = functional_of(func) if is_inplace(func) else None
        plain = f is not None and f not in SPECIAL and f not in _MAYBE_DYNAMIC and f in LOWERINGS
        plain = plain and f not in CPU_AUTOCAST_OPS  # the slow path warns about CPU autocast
        if plain and not func._schema.name.split("::")[1].startswith("_foreach_"):
            r = (func, _INPLACE, f)
        else:
            r = (func, _OTHER, None)
    _ROUTES[id(func)] = r
    return r


def _dispatch_slow(func: Any, args: tuple, kwargs: dict) -> Any:
    if "device" in kwargs and is_like_op(func):
        device = elsewhere(kwargs)
        if device is not None:
            return run_elsewhere(func, args, kwargs, device)
    h = SPECIAL.get(func)
    if h is not None:
        return h(args, kwargs)
    if func in LOWERINGS or (func.namespace != "aten" and library_ops.adopt(func)):
        lowered_if = LOWERED_IF.get(func)
        if lowered_if is not None and not lowered_if(*args, **kwargs):
            return cpu_fallback(func, args, kwargs)
        if func in CPU_AUTOCAST_OPS:
            warn_cpu_autocast()
        if func in _MAYBE_DYNAMIC:
            args = _byte_masks_as_bool(func, args)
            if _dynamic_shape(func, args):
                positions = _masks_as_positions(args)
                if positions is None:
                    return cpu_fallback(func, args, kwargs, warn=False)
                args = positions
        try:
            return record(func, args, kwargs)
        except UnencodableAttribute:  # never approximate an attribute: run the op on CPU
            return cpu_fallback(func, args, kwargs)
    if func in _DYNAMIC:
        return cpu_fallback(func, args, kwargs, warn=False)
    name = func._schema.name.split("::")[1]
    if name.startswith("_foreach_"):
        return _foreach(name, func, args, kwargs)
    outs = _out_names(func) if kwargs else ()
    if outs and all(isinstance(kwargs.get(n), LazyTensor) for n in outs):
        return _out_variant(func, args, kwargs, outs)
    if is_inplace(func) and _writes_self_only(func):
        f = functional_of(func)
        if f is not None:
            res = dispatch(f, args, kwargs)
            _write_result(args[0], res if isinstance(res, LazyTensor) else res[0])
            return args[0]
    argument_check = ARGUMENT_CHECKS.get(func)  # eager's, which a decomposition may lack
    if argument_check is not None:
        argument_check(*args, **kwargs)
    # an op with a CompositeImplicitAutograd kernel reaches here only below autograd
    # (``torch.inference_mode``): that kernel, which eager runs everywhere, comes first (the
    # tables' references may differ: ``nll_loss``'s indexes with the ignored class)
    r = func.decompose(*args, **kwargs)
    if r is not NotImplemented:
        return r
    d = _CORE_DECOMP.get(func) or decomposition_table.get(func)
    if d is not None:
        r = d(*args, **kwargs)
        if r is not NotImplemented:
            return r
    if func._schema.name == "prims::fma" and register_fma():  # a graph Dynamo wrote, run lazily
        return dispatch(func, args, kwargs)
    return cpu_fallback(func, args, kwargs)


_FUNCTIONAL: dict[Any, Any] = {}


def functional_of(func: Any) -> Any:
    """``aten.add.Tensor`` for ``aten.add_.Tensor`` (None if there is none): the overload of the
    same name taking the same argument types (``pow_.Scalar`` is ``pow.Tensor_Scalar``)."""
    if func in _FUNCTIONAL:
        return _FUNCTIONAL[func]
    name = func._schema.name.split("::")[1]
    packet = getattr(aten, name[:-1], None)
    found = None
    if packet is not None:
        want = [str(a.type) for a in func._schema.arguments]
        first = [func._overloadname] if func._overloadname in packet.overloads() else []
        for ov in first + [o for o in packet.overloads() if o not in first]:
            cand = getattr(packet, ov)
            if [str(a.type) for a in cand._schema.arguments] == want and not any(
                a.alias_info is not None and a.alias_info.is_write for a in cand._schema.arguments
            ):
                found = cand
                break
    _FUNCTIONAL[func] = found
    return found


def is_inplace(func: Any) -> bool:
    args = func._schema.arguments
    return (
        bool(args and args[0].alias_info is not None and args[0].alias_info.is_write)
        and not func._schema.arguments[0].kwarg_only
    )


def _written(func: Any) -> list[tuple[int, Any]]:
    """``(position, schema argument)`` of each argument ``func`` writes."""
    args = func._schema.arguments
    return [(i, a) for i, a in enumerate(args) if a.alias_info and a.alias_info.is_write]


def _writes_self_only(func: Any) -> bool:
    """Whether the one argument ``func`` writes is its first, a single tensor (``add_``, not
    ``_fused_adam_`` or ``rrelu_with_noise_``): the in-place ops its functional form serves."""
    written = _written(func)
    return len(written) == 1 and str(written[0][1].type) == "Tensor"


_OPTIONS = ("dtype", "layout", "device", "pin_memory")  # a factory's, given by its out= tensor
# reductions whose out= tensor's dtype is the dtype they compute in, as their ``dtype=``
# (``torch.sum(x, 0, out=int64_t)`` sums the values converted to int64)
_DTYPE_FROM_OUT = {
    aten.sum, aten.nansum, aten.mean, aten.prod, aten.cumsum, aten.cumprod
}  # fmt: skip


def _write_result(t: LazyTensor, result: LazyTensor) -> None:
    """An in-place op's result written into ``t``, as eager casts it (or refuses to)."""
    check_output_cast(result.dtype, t.dtype)
    assign(t, result)


def _signature(args: list) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in args]


def _out_variant(func: Any, args: tuple, kwargs: dict, outs: tuple[str, ...]) -> Any:
    """``op(..., out=t)`` as its functional overload (a factory's ``arange(..., out=t)`` as
    ``arange(..., dtype=t.dtype, device=t.device)``), each result cast into its ``out=``
    tensor as eager casts it, which takes the result's shape as in eager (``resize_output``)."""
    given = [kwargs[n] for n in outs]
    kw = {k: v for k, v in kwargs.items() if k not in outs}
    want = _signature([a for a in func._schema.arguments if a.name not in outs])
    for ov in func.overloadpacket.overloads():
        cand = getattr(func.overloadpacket, ov)
        cargs = cand._schema.arguments
        if any(a.alias_info is not None and a.alias_info.is_write for a in cargs):
            continue
        options = {"dtype": given[0].dtype, "device": given[0].device}
        signature = _signature(cargs)
        if signature == want:
            by_out = func.overloadpacket in _DTYPE_FROM_OUT and kw.get("dtype") is None
            options = {"dtype": given[0].dtype} if by_out else {}
        elif (
            "dtype" not in dict(signature) or [a for a in signature if a[0] not in _OPTIONS] != want
        ):  # nor a factory overload, which takes the out= tensor's dtype and device
            continue
        res = dispatch(cand, args, {**kw, **options})
        results = [res] if len(given) == 1 else list(res)
        for out, r in zip(given, results, strict=True):
            _resize_output(out, r.shape)
            _write_result(out, r)
        return given[0] if len(given) == 1 else tuple(given)
    return cpu_fallback(func, args, kwargs)


_OUT_NAMES: dict[Any, tuple[str, ...]] = {}


def _out_names(func: Any) -> tuple[str, ...]:
    """The keyword-only arguments ``func`` writes (``out``; ``max.dim_max``'s ``max`` and
    ``max_values``), or nothing when it writes any other."""
    hit = _OUT_NAMES.get(func)
    if hit is None:
        written = [a for _, a in _written(func)]
        only = all(a.kwarg_only and str(a.type) == "Tensor" for a in written)
        hit = _OUT_NAMES[func] = tuple(a.name for a in written) if only else ()
    return hit


def _resize_output(out: LazyTensor, shape: Any) -> None:
    """Eager's ``resize_output``: an ``out=`` tensor of another shape takes ``shape`` (with
    eager's deprecation warning when it held elements)."""
    if tuple(out.shape) == tuple(shape):
        return
    if out.numel():
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(shape)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t "
            "by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=5,
        )
    out.resize_(shape)


def _foreach(name: str, func: Any, args: tuple, kwargs: dict) -> Any:
    element, bind, _ = foreach_element(func)
    r = _ROUTES.get(id(element))  # an element op recorded as it comes: the op is one node
    if r is None or r[0] is not element or STATE.routes_version != len(SPECIAL) + len(LOWERINGS):
        r = _route(element)
    if (r[1] is _RECORD and not r[2]) or r[1] is _INPLACE:
        try:
            res = record_foreach(func, element if r[1] is _RECORD else r[2], args, kwargs)
        except UnencodableAttribute:
            res = NotImplemented
        if res is not NotImplemented:
            return res
    inplace = name.endswith("_")
    into = inplace and not is_inplace(element)  # no in-place element op: assign its result
    n = len(next(a for a in args if isinstance(a, (list, tuple))))
    results = []
    for j in range(n):
        pos, kw = bind(args, kwargs, j)
        r = dispatch(element, pos, kw)
        if into:
            _write_result(args[0][j], r)
        results.append(r)
    return None if inplace else results


_DYNAMIC = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,
}
_MASKED_PUT = {aten.index_put.default, aten._unsafe_index_put.default}
_MAYBE_DYNAMIC = {aten.index.Tensor, *_MASKED_PUT}


def _dynamic_shape(func: Any, args: tuple) -> bool:
    """Boolean-mask indexing: the shape of what the masks select depends on the data (but for
    a put of values that do not have that shape: the lowering's ``where``)."""
    if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]):
        return False
    return func not in _MASKED_PUT or not _put_by_where(*args[:3])


def _byte_masks_as_bool(func: Any, args: tuple) -> tuple:
    """``index``/``index_put`` arguments with each uint8 index tensor as the boolean mask eager
    still takes it for (with eager's deprecation warning). A put of one value through one such
    mask is eager's ``masked_fill_``, which refuses it: so does this."""
    indices = args[1]
    if not any(isinstance(i, torch.Tensor) and i.dtype == torch.uint8 for i in indices):
        return args
    if func in _MASKED_PUT and len(indices) == 1 and args[2].numel() == 1:
        raise RuntimeError(
            "masked_fill_ only supports boolean masks, but got mask with dtype unsigned char"
        )
    warnings.warn(
        "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
        UserWarning,
        stacklevel=4,
    )
    masks = [i != 0 if isinstance(i, torch.Tensor) and i.dtype == torch.uint8 else i
             for i in indices]  # fmt: skip
    return (args[0], masks, *args[2:])


def _put_by_where(x: Any, indices: list, values: Any) -> bool:
    """Whether ``index_put`` with one leading mask puts ``values`` that broadcast to each
    selected element (their shape has no dimension for the selection), as ``where`` does."""
    if len(indices) != 1 or indices[0].ndim == 0 or not isinstance(values, torch.Tensor):
        return False
    each = x.shape[indices[0].ndim :]
    shape = tuple(values.shape)
    if len(shape) > len(each):  # a leading 1 (one selected element) at most
        if len(shape) > len(each) + 1 or shape[0] != 1:
            return False
        shape = shape[1:]
    return all(v in (1, e) for v, e in zip(reversed(shape), reversed(each), strict=False))


def _masks_as_positions(args: tuple) -> tuple | None:
    """``index``/``index_put`` arguments with each boolean mask replaced by the positions of
    its true elements (``nonzero``, on the CPU: how many is the data's), one long index per
    mask dimension, as eager expands masks; None for a 0-d mask (the CPU runs the op)."""
    x, indices = args[0], list(args[1])
    out: list[Any] = []
    for i in indices:
        if not (isinstance(i, torch.Tensor) and i.dtype == torch.bool):
            out.append(i)
            continue
        if i.ndim == 0:
            return None
        at = len(out)
        if tuple(i.shape) != tuple(x.shape[at : at + i.ndim]):
            raise IndexError(
                f"The shape of the mask {list(i.shape)} at index {at} does not match the shape "
                f"of the indexed tensor {list(x.shape)}"
            )
        if isinstance(i, LazyTensor):
            found = cpu_fallback(aten.nonzero.default, (i,), {}, warn=False)
            out += [dispatch(aten.select.int, (found, 1, k), {}) for k in range(i.ndim)]
        else:
            out += list(torch.nonzero(i).unbind(1))
    return (x, out, *args[2:])


def cpu_fallback(func: Any, args: tuple, kwargs: dict, warn: bool = True) -> Any:
    """Run ``func`` on CPU copies (a graph break), counted as ``aten::<op>`` like torch_xla."""
    name = func._schema.name
    if not _FALLBACK:  # data-dependent shapes (warn=False) too: every CPU run is an error
        why = "no lowering" if warn else "an output shape that depends on the data"
        raise NotImplementedError(f"xlacache.lazy: {func} would run on the CPU ({why}) and "
                                  "XLACACHE_LAZY_FALLBACK=0 makes that an error")  # fmt: skip
    metrics.counter_inc(name)
    if warn and name not in _warned_fallback:
        _warned_fallback.add(name)
        warnings.warn(f"xlacache.lazy: {func} has no lowering; running it on CPU", stacklevel=4)

    def down(x: Any) -> Any:
        if isinstance(x, LazyTensor):
            return to_cpu(x)
        if isinstance(x, (list, tuple)):
            return type(x)(down(e) for e in x)
        if isinstance(x, torch.device) and x.type == "xla":
            return torch.device("cpu")
        return x

    cargs = list(down(args))
    ckw = {k: down(v) for k, v in kwargs.items()}
    written = [(i, a.name) for i, a in _written(func)]
    for i, name in written:  # host copies from numpy cannot resize: an out= kernel may
        if i < len(cargs):
            cargs[i] = _resizable(cargs[i])
        elif name in ckw:
            ckw[name] = _resizable(ckw[name])
    with view_bits_resolved():
        res = func(*cargs, **ckw)
    for i, name in written:  # write mutated inputs back
        orig, new = (args[i], cargs[i]) if i < len(args) else (kwargs.get(name), ckw.get(name))
        if isinstance(orig, (list, tuple)):  # Tensor(a!)[]: each element written back
            for o, n in zip(orig, new, strict=True):
                _write_back(o, n)
        else:
            _write_back(orig, new)

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return to_device(x)
        if isinstance(x, (list, tuple)):
            return type(x)(up(e) for e in x)
        return x

    if is_inplace(func) and isinstance(args[0], LazyTensor):
        return args[0]
    passed = _written_results(func, args, kwargs)
    if passed is not None:  # out= tensors: the caller's, as eager returns them
        return passed
    out = up(res)
    if func.is_view and isinstance(out, LazyTensor) and isinstance(args[0], LazyTensor):
        # a copy standing for a view: writes through it raise instead of being lost
        b = args[0]._c
        root = b._root if b._root is not None else b
        track_view(out, root, (*b._chain, (func, tuple(args[1:]), kwargs)))
    return out


def _written_results(func: Any, args: tuple, kwargs: dict) -> Any:
    """The arguments ``func`` returns (``out=``, ``max.dim_max``'s ``max, max_values``) as the
    caller passed them, when every result is one; else None."""
    results = func._schema.returns
    sets = [
        r.alias_info and r.alias_info.is_write and set(r.alias_info.before_set) for r in results
    ]
    if not results or not all(sets):
        return None
    passed = []
    for want in sets:
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and set(a.alias_info.before_set) == want:
                passed.append(args[i] if i < len(args) else kwargs.get(a.name))
                break
    if len(passed) != len(results) or not all(isinstance(p, LazyTensor) for p in passed):
        return None
    return passed[0] if len(passed) == 1 else tuple(passed)


def _write_back(orig: Any, new: Any) -> None:
    """The CPU run's value of a written argument into the lazy tensor the caller passed."""
    if not isinstance(orig, LazyTensor) or not isinstance(new, torch.Tensor):
        return
    if tuple(new.shape) != tuple(orig.shape):  # the kernel resized it (and warned), as eager
        orig.resize_(new.shape)
    assign(orig, to_device(new))


def _resizable(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_resizable(e) for e in x)
    return x
