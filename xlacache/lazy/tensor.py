"""The lazy tensor: a wrapper subclass on the ``xla`` device that records aten ops into IR nodes.

Every op reaching ``__torch_dispatch__`` (autograd runs above it) is either

* recorded as one IR node if ``lowering.LOWERINGS`` has it (shape and dtype come from torch's
  meta kernels, so they are known at once),
* rewritten: in-place and ``out=`` ops become their functional op plus an assignment; view ops are
  recorded as functional ops and remember their base, so writes through a view reach the base and
  a view of a mutated base is re-derived;
* decomposed with PyTorch's own decompositions, or
* run on CPU as a fallback (counted as ``aten::<op>``, as torch_xla does).

All lazy tensors report contiguous strides (like torch_xla): the IR works on logical values.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from torch._decomp import core_aten_decompositions, decomposition_table

from . import _device, metrics, rng
from .graph import (
    Node,
    Placeholder,
    avals_code,
    data_node,
    op_code,
    placeholder,
    scalar_node,
)
from .identity import UnencodableAttribute, encode, node_prefix
from .lowering import LOWERINGS, STATIC_SCALAR_OPS, jax_dtype

aten = torch.ops.aten
DEVICE = _device.DEVICE
_LOCK = threading.RLock()
_CORE_DECOMP = core_aten_decompositions()
_FALLBACK = os.environ.get("XLACACHE_LAZY_FALLBACK", "1") != "0"
_warned_fallback: set[str] = set()


class Cell:
    """The state of one lazy tensor; tensors hold it strongly, the live registry weakly.

    Keeping the state (and the weak reference) off the tensor object lets
    ``torch.utils.swap_tensors`` work on lazy tensors, which ``Module.to`` uses for wrapper
    subclasses and which keeps tied weights tied.
    """

    __slots__ = ("_v", "_meta", "_root", "_chain", "_rgen", "_gen", "seq", "__weakref__")

    def __init__(self, meta: torch.Tensor, v: tuple[Node, int]) -> None:
        self.seq = next(_SEQ)
        self._v = v
        self._meta = meta
        self._root: LazyTensor | None = None
        self._chain: tuple = ()
        self._rgen = 0
        self._gen = 0


def _fwd(name: str) -> property:
    def get(self: LazyTensor) -> Any:
        return getattr(self._c, name)

    def put(self: LazyTensor, val: Any) -> None:
        setattr(self._c, name, val)

    return property(get, put)


class LazyTensor(torch.Tensor):
    """A tensor on the ``xla`` device whose value is an IR node output (``_v``)."""

    _c: Cell
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
        _LIVE.add(c)
        return r

    def tolist(self) -> Any:
        return self.detach().cpu().tolist()

    def numpy(self, *, force: bool = False) -> Any:
        return self.detach().cpu().numpy()

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return [], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Any:
        raise NotImplementedError("xlacache.lazy tensors cannot be rebuilt from inner tensors")

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        text = repr(self.detach().cpu())
        return text[:-1] + ", device='xla:0')"

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return format(self.item(), spec)
        return repr(self)

    def __reduce_ex__(self, proto: int) -> Any:
        return (_from_cpu, (self.detach().cpu(),))

    def __deepcopy__(self, memo: dict) -> Any:
        out = _from_cpu(self.detach().cpu())
        if self.requires_grad:
            out.requires_grad_(True)
        return out

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        with _LOCK:
            if _TRACE[2]:  # nested (a decomposition): timed by the outer call
                return dispatch(func, args, kwargs or {})
            _TRACE[2] = 1
            t0 = time.perf_counter_ns()
            try:
                return dispatch(func, args, kwargs or {})
            finally:
                _TRACE[0] += time.perf_counter_ns() - t0
                _TRACE[1] += 1
                _TRACE[2] = 0


_TRACE = [0, 0, 0]  # ns spent in dispatch, top-level ops dispatched, depth flag


def flush_trace_metrics() -> None:
    """Record the tracing time of the step that ends now (metric ``TraceTime``)."""
    if _TRACE[1]:
        metrics.metric_add("TraceTime", _TRACE[0])
        metrics.counter_inc("TracedOps", _TRACE[1])
    _TRACE[0] = _TRACE[1] = 0


_LIVE: weakref.WeakSet[Cell] = weakref.WeakSet()


_SEQ = itertools.count()


def live_tensors() -> list[Cell]:
    """The state cells of all live lazy tensors, oldest first (a deterministic graph order)."""
    return sorted(_LIVE, key=_seq_of)


def _seq_of(c: Cell) -> int:
    return c.seq


def _from_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEVICE)


# --------------------------------------------------------------------------- values and views


def value(t: LazyTensor | Cell) -> tuple[Node, int]:
    """The tensor's current IR value (re-derived from its base if the base was mutated)."""
    root = t._root
    if root is not None and t._rgen != root._gen:
        v: LazyTensor = root
        for f, rest, kw in t._chain:
            v = _record(f, (v, *rest), kw)
        t._v = v._v
        t._rgen = root._gen
    return t._v


def assign(t: LazyTensor, new: LazyTensor) -> None:
    """Make ``new``'s value the value of ``t`` (an in-place update), propagating through views."""
    if new.dtype != t.dtype:
        new = _record(aten._to_copy.default, (new,), {"dtype": t.dtype})
    if tuple(new.shape) != tuple(t.shape):
        new = _record(aten.expand.default, (new, list(t.shape)), {})
    root = t._root
    if root is None:
        t._v = new._v
        t._gen += 1
        return
    bases: list[LazyTensor] = [root]
    for f, rest, kw in t._chain[:-1]:
        bases.append(_record(f, (bases[-1], *rest), kw))
    cur = new
    for (f, rest, kw), base in zip(reversed(t._chain), reversed(bases), strict=False):
        cur = _scatter_into(f, rest, kw, base, cur)
    root._v = cur._v
    root._gen += 1
    t._v = new._v
    t._rgen = root._gen


def _scatter_into(f: Any, rest: tuple, kw: dict, base: LazyTensor, new: LazyTensor) -> LazyTensor:
    """Inverse of the view ``f``: ``base`` with the viewed part replaced by ``new``."""
    name = f.overloadpacket.__name__
    if name in ("alias", "detach", "lift_fresh"):
        return new
    if name in ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "flatten", "view_as"):
        return _record(aten.view.default, (new, list(base.shape)), {})
    if name in ("t", "transpose", "permute", "numpy_T"):
        perm = list(range(base.dim()))
        if name == "permute":
            perm = [d % base.dim() for d in rest[0]]
            inv = [0] * len(perm)
            for i, p in enumerate(perm):
                inv[p] = i
            return _record(aten.permute.default, (new, inv), {})
        if name == "transpose":
            d0, d1 = rest[0] % max(base.dim(), 1), rest[1] % max(base.dim(), 1)
        else:
            d0, d1 = 0, base.dim() - 1
        return _record(aten.transpose.int, (new, d0, d1), {})
    if name == "select":
        return _record(aten.select_scatter.default, (base, new, *rest), kw)
    if name == "slice":
        return _record(aten.slice_scatter.default, (base, new, *rest), kw)
    if name == "diagonal":
        return _record(aten.diagonal_scatter.default, (base, new, *rest), kw)
    if name == "as_strided":
        return _record(aten.as_strided_scatter.default, (base, new, *rest), kw)
    raise NotImplementedError(f"xlacache.lazy: in-place write through a view made by {f}")


# --------------------------------------------------------------------------- recording

_SCALAR_ARGS: dict[Any, tuple[frozenset[int], frozenset[str]]] = {}
# shape inference results by (op, static arguments, input shapes and dtypes): torch's meta
# kernels are Python and cost ~100-400 us an op; a training loop repeats the same ops every step
_META_CACHE: dict[Any, Any] = {}


def _scalar_args(func: Any) -> tuple[frozenset[int], frozenset[str]]:
    """Positions and names of the ``Scalar`` arguments whose float values become graph inputs."""
    r = _SCALAR_ARGS.get(func)
    if r is None:
        if func in STATIC_SCALAR_OPS or not any(
            str(a.type).startswith("Tensor") for a in func._schema.arguments
        ):
            r = (frozenset(), frozenset())
        else:
            idx = [
                (i, a.name)
                for i, a in enumerate(func._schema.arguments)
                if "number" in str(a.type) or str(a.type) == "Tensor"
            ]
            r = (frozenset(i for i, _ in idx), frozenset(n for _, n in idx))
        _SCALAR_ARGS[func] = r
    return r


class _Ctx:
    __slots__ = ("inputs", "keys")

    def __init__(self) -> None:
        self.inputs: list[tuple[Node, int]] = []
        self.keys: dict[int, int] = {}

    def add(self, v: tuple[Node, int]) -> Placeholder:
        k = id(v[0]) * 8 + v[1]
        i = self.keys.get(k)
        if i is None:
            i = self.keys[k] = len(self.inputs)
            self.inputs.append(v)
        return placeholder(i)


def _convert(x: Any, ctx: _Ctx, dyn: bool) -> tuple[Any, Any]:
    """(template, meta) for one argument."""
    if isinstance(x, LazyTensor):
        return ctx.add(value(x)), x._meta
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and x.device.type == "cpu" and x.dtype.is_floating_point:
            return ctx.add((scalar_node(x.item()), 0)), torch.empty(
                (), dtype=x.dtype, device="meta"
            )
        lt = to_device(x)
        return ctx.add(value(lt)), lt._meta
    if isinstance(x, (list, tuple)):
        if not x:
            return (), x
        pairs = [_convert(e, ctx, False) for e in x]
        return tuple(p[0] for p in pairs), type(x)(p[1] for p in pairs)
    if dyn and type(x) is float:
        return ctx.add((scalar_node(x), 0)), x
    if isinstance(x, torch.device):
        return None, torch.device("meta")
    return x, x


def _record(func: Any, args: tuple, kwargs: dict) -> Any:
    """Record ``func`` as one IR node and return lazy tensors for its outputs."""
    ctx = _Ctx()
    spos, snames = _scalar_args(func)
    targs, margs = [], []
    for i, a in enumerate(args):
        t, m = _convert(a, ctx, i in spos)
        targs.append(t)
        margs.append(m)
    tkw, mkw = {}, {}
    for k, a in kwargs.items():
        t, m = _convert(a, ctx, k in snames)
        tkw[k] = t
        mkw[k] = m
    attrs = (tuple(targs), tuple(sorted(tkw.items())) if tkw else ())
    akey = encode(attrs)  # exact and typed: 2 and 2.0, -1 and -2, 0.0 and -0.0 differ
    ck = (func, akey, tuple([n.avals[i] for n, i in ctx.inputs]))
    hit = _META_CACHE.get(ck)
    if hit is None:
        try:
            mout = func(*margs, **mkw)
        except Exception as e:  # noqa: BLE001 - re-raised with the op's name
            raise RuntimeError(f"xlacache.lazy: shape inference failed for {func}: {e}") from e
        outs = [mout] if isinstance(mout, torch.Tensor) else list(mout)
        avals = tuple(None if o is None else (tuple(o.shape), o.dtype) for o in outs)
        hit = (mout, avals, node_prefix(op_code(func), akey, avals_code(avals)))
        if len(_META_CACHE) > 200_000:
            _META_CACHE.clear()
        _META_CACHE[ck] = hit
    mout, avals, prefix = hit
    single = isinstance(mout, torch.Tensor)
    outs = [mout] if single else list(mout)
    node = Node(func, tuple(ctx.inputs), attrs, avals, func=func, prefix=prefix)
    wrapped = [None if o is None else _wrap(o, (node, i)) for i, o in enumerate(outs)]
    if func.is_view and isinstance(args[0], LazyTensor) and single:
        base = args[0]
        out = wrapped[0]
        root = base._root if base._root is not None else base
        out._root = root
        out._chain = (*base._chain, (func, tuple(args[1:]), kwargs))
        out._rgen = root._gen
    if single:
        return wrapped[0]
    return wrapped if isinstance(mout, list) else tuple(wrapped)


def _wrap(meta: torch.Tensor, v: tuple[Node, int]) -> LazyTensor:
    if not meta.is_contiguous() or meta.storage_offset():
        meta = torch.empty(meta.shape, dtype=meta.dtype, device="meta")
    return LazyTensor(meta, v)


def record_node(node: Node, metas: list[torch.Tensor]) -> list[LazyTensor]:
    return [_wrap(m, (node, i)) for i, m in enumerate(metas)]


# --------------------------------------------------------------------------- transfers


def to_device(t: torch.Tensor) -> LazyTensor:
    """Copy a CPU tensor to the device (``TransferToDevice``)."""
    import jax

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    arr = t.resolve_conj().resolve_neg().contiguous().numpy(force=True)
    arr = arr.astype(jax_dtype(t.dtype), copy=False)
    metrics.counter_inc("TransferToDevice")
    node = data_node(jax.device_put(arr), t.dtype)
    return _wrap(torch.empty(t.shape, dtype=t.dtype, device="meta"), (node, 0))


def to_cpu(t: LazyTensor) -> torch.Tensor:
    """Materialize and copy to CPU (``TransferFromDevice``)."""
    from .executor import materialize

    materialize([t])
    arr = value(t)[0].data
    metrics.counter_inc("TransferFromDevice")
    out = torch.from_numpy(np.array(arr))
    return out.to(t.dtype) if out.dtype != t.dtype else out


# --------------------------------------------------------------------------- dispatch


def _functional_of(func: Any) -> Any:
    name = func._schema.name.split("::")[1]
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    ov = func._overloadname
    return getattr(packet, ov, None) if ov in packet.overloads() else None


def _is_inplace(func: Any) -> bool:
    args = func._schema.arguments
    return (
        bool(args and args[0].alias_info is not None and args[0].alias_info.is_write)
        and not func._schema.arguments[0].kwarg_only
    )


_RANDOM_INPLACE = {"normal_", "uniform_", "bernoulli_", "exponential_", "random_", "log_normal_"}


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    h = _SPECIAL.get(func)
    if h is not None:
        return h(args, kwargs)
    if func in LOWERINGS:
        if func in _MAYBE_DYNAMIC and _dynamic_shape(func, args):
            return _cpu_fallback(func, args, kwargs, warn=False)
        try:
            return _record(func, args, kwargs)
        except UnencodableAttribute:  # never approximate an attribute: run the op on CPU
            return _cpu_fallback(func, args, kwargs)
    if func in _DYNAMIC:
        return _cpu_fallback(func, args, kwargs, warn=False)
    name = func._schema.name.split("::")[1]
    if name in _RANDOM_INPLACE:
        return _random_inplace(name, args, kwargs)
    if name.startswith("_foreach_"):
        return _foreach(name, func, args, kwargs)
    if "out" in kwargs and isinstance(kwargs.get("out"), LazyTensor):
        return _out_variant(func, args, kwargs)
    if _is_inplace(func):
        f = _functional_of(func)
        if f is not None:
            res = dispatch(f, args, kwargs)
            assign(args[0], res if isinstance(res, LazyTensor) else res[0])
            return args[0]
    d = _CORE_DECOMP.get(func) or decomposition_table.get(func)
    if d is not None:
        r = d(*args, **kwargs)
        if r is not NotImplemented:
            return r
    r = func.decompose(*args, **kwargs)
    if r is not NotImplemented:
        return r
    return _cpu_fallback(func, args, kwargs)


def _out_variant(func: Any, args: tuple, kwargs: dict) -> Any:
    out = kwargs.pop("out")
    names = [a.name for a in func._schema.arguments if not a.kwarg_only or a.name != "out"]
    for ov in func.overloadpacket.overloads():
        cand = getattr(func.overloadpacket, ov)
        cargs = cand._schema.arguments
        if any(a.alias_info is not None and a.alias_info.is_write for a in cargs):
            continue
        if [a.name for a in cargs] == [n for n in names if n != "out"]:
            res = dispatch(cand, args, kwargs)
            if tuple(res.shape) != tuple(out.shape):
                raise RuntimeError(f"xlacache.lazy: cannot resize out= tensor for {func}")
            assign(out, res)
            return out
    return _cpu_fallback(func, args, {**kwargs, "out": out})


_DYNAMIC = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor,
}
_MAYBE_DYNAMIC = {aten.index.Tensor}


def _dynamic_shape(func: Any, args: tuple) -> bool:
    """Boolean-mask indexing: the output shape depends on the data."""
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])


def _cpu_fallback(func: Any, args: tuple, kwargs: dict, warn: bool = True) -> Any:
    """Run ``func`` on CPU copies (a graph break), counted as ``aten::<op>`` like torch_xla."""
    name = func._schema.name
    if warn and not _FALLBACK:
        raise NotImplementedError(f"xlacache.lazy: no lowering for {func}")
    metrics.counter_inc(name)
    if warn and name not in _warned_fallback:
        _warned_fallback.add(name)
        warnings.warn(f"xlacache.lazy: {func} has no lowering; running it on CPU", stacklevel=4)
    lazies: list[LazyTensor] = []

    def down(x: Any) -> Any:
        if isinstance(x, LazyTensor):
            lazies.append(x)
            return to_cpu(x)
        if isinstance(x, (list, tuple)):
            return type(x)(down(e) for e in x)
        if isinstance(x, torch.device) and x.type == "xla":
            return torch.device("cpu")
        return x

    cargs = down(args)
    ckw = {k: down(v) for k, v in kwargs.items()}
    res = func(*cargs, **ckw)
    for i, a in enumerate(func._schema.arguments):  # write mutated inputs back
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        orig, new = (args[i], cargs[i]) if i < len(args) else (kwargs.get(a.name), ckw.get(a.name))
        if isinstance(orig, LazyTensor) and isinstance(new, torch.Tensor):
            assign(orig, to_device(new))

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return to_device(x)
        if isinstance(x, (list, tuple)):
            return type(x)(up(e) for e in x)
        return x

    if _is_inplace(func) and isinstance(args[0], LazyTensor):
        return args[0]
    return up(res)


# --------------------------------------------------------------------------- special ops


def _alias(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    out = LazyTensor(t._meta, value(t))
    root = t._root if t._root is not None else t
    out._root = root
    out._chain = t._chain
    out._rgen = root._gen
    return out


def _to_copy(args: tuple, kwargs: dict) -> Any:
    t = args[0]
    dev = kwargs.get("device")
    dtype = kwargs.get("dtype") or t.dtype
    if dev is not None and torch.device(dev).type != "xla":
        out = to_cpu(t)
        return out.to(device=dev, dtype=dtype)
    if dtype == t.dtype:
        return _record(aten.clone.default, (t,), {})
    return _record(aten._to_copy.default, (t,), {"dtype": dtype})


def _copy_(args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(dst, LazyTensor):
        dst.copy_(to_cpu(src))
        return dst
    if not isinstance(src, LazyTensor):
        src = to_device(src)
    assign(dst, src)
    return dst


def _copy(args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(src, LazyTensor):
        src = to_device(src)
    out = src
    if out.dtype != dst.dtype:
        out = _record(aten._to_copy.default, (out,), {"dtype": dst.dtype})
    if tuple(out.shape) != tuple(dst.shape):
        out = _record(aten.expand.default, (out, list(dst.shape)), {})
    return _record(aten.clone.default, (out,), {})


def _item(args: tuple, kwargs: dict) -> Any:
    return to_cpu(args[0]).item()


def _equal(args: tuple, kwargs: dict) -> bool:
    a, b = args
    return bool(torch.equal(to_cpu(a), to_cpu(b) if isinstance(b, LazyTensor) else b))


def _random_inplace(name: str, args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    assign(t, random_tensor(name, tuple(t.shape), t.dtype, args[1:], kwargs))
    return t


def random_tensor(kind: str, shape: tuple, dtype: torch.dtype, params: tuple, kw: dict) -> Any:
    """A lazy tensor of random numbers drawn from the device RNG."""
    leaf, idx = rng.next_key()
    inputs: list[tuple[Node, int]] = [(leaf, 0)]
    static = []
    for p in list(params) + [kw[k] for k in sorted(kw) if k != "generator"]:
        if isinstance(p, LazyTensor):
            inputs.append(value(p))
            static.append(placeholder(len(inputs) - 1))
        else:
            static.append(p)
    node = Node(
        "random", tuple(inputs), (kind, idx, shape, dtype, tuple(static)), ((shape, dtype),)
    )
    return _wrap(torch.empty(shape, dtype=dtype, device="meta"), (node, 0))


def _bernoulli_p(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return random_tensor("bernoulli_", tuple(t.shape), t.dtype, (p,), {})


def _bernoulli(args: tuple, kwargs: dict) -> LazyTensor:
    t = args[0]
    return random_tensor("bernoulli_tensor", tuple(t.shape), t.dtype, (t,), {})


def _native_dropout(args: tuple, kwargs: dict) -> Any:
    x, p, train = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("train")
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    keep = random_tensor("bernoulli_", tuple(x.shape), torch.bool, (1.0 - p,), {})
    out = x * keep * (1.0 / (1.0 - p))
    return out, keep


def _rand_like(kind: str) -> Any:
    def h(args: tuple, kwargs: dict) -> LazyTensor:
        t = args[0]
        dtype = kwargs.get("dtype") or t.dtype
        return random_tensor(kind, tuple(t.shape), dtype, (), {})

    return h


def _split(args: tuple, kwargs: dict) -> list:
    t, size = args[0], args[1]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    n = t.shape[dim]
    sizes = [size] * (n // size) + ([n % size] if n % size else []) if n else [0]
    return _split_sizes(t, sizes, dim)


def _split_with_sizes(args: tuple, kwargs: dict) -> list:
    t, sizes = args[0], args[1]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    return _split_sizes(t, list(sizes), dim)


def _split_sizes(t: LazyTensor, sizes: list[int], dim: int) -> list:
    out, start = [], 0
    for s in sizes:
        out.append(dispatch(aten.slice.Tensor, (t, dim, start, start + s), {}))
        start += s
    return out


def _unbind(args: tuple, kwargs: dict) -> tuple:
    t = args[0]
    dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % max(t.dim(), 1)
    return tuple(dispatch(aten.select.int, (t, dim, i), {}) for i in range(t.shape[dim]))


def _set_(args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if tuple(dst.shape) != tuple(src.shape):
        raise NotImplementedError("xlacache.lazy: set_ with a different shape")
    assign(dst, src)
    return dst


def _foreach(name: str, func: Any, args: tuple, kwargs: dict) -> Any:
    base = name[len("_foreach_") :]
    inplace = base.endswith("_")
    packet = getattr(aten, base)
    lists = [i for i, a in enumerate(args) if isinstance(a, (list, tuple))]
    n = len(args[lists[0]])
    results = []
    for j in range(n):
        a = [x[j] if i in lists else x for i, x in enumerate(args)]
        if base.rstrip("_") == "norm":
            r = dispatch(aten.linalg_vector_norm.default, (a[0], *a[1:2]), {})
        else:
            r = packet(*a, **kwargs)
        results.append(r)
    return None if inplace else results


def _bn_with_update(args: tuple, kwargs: dict) -> Any:
    x, w, b, rm, rv, momentum, eps = args[:7]
    out = _record(
        aten._batch_norm_with_update_functional.default, (x, w, b, rm, rv, momentum, eps), {}
    )
    assign(rm, out[4])
    assign(rv, out[5])
    return out[:4]


def _native_bn(args: tuple, kwargs: dict) -> Any:
    x, w, b, rm, rv, training, momentum, eps = args[:8]
    if training and rm is not None:
        return _bn_with_update((x, w, b, rm, rv, momentum, eps), {})[:3]
    return _record(aten.native_batch_norm.default, args, kwargs)


def _noop_first(args: tuple, kwargs: dict) -> Any:
    return args[0]


def _is_same_size(args: tuple, kwargs: dict) -> bool:
    return tuple(args[0].shape) == tuple(args[1].shape)


_SPECIAL: dict[Any, Any] = {
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: _noop_first,
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
    aten.copy.default: _copy,
    aten._local_scalar_dense.default: _item,
    aten.equal.default: _equal,
    aten.is_same_size.default: _is_same_size,
    aten.bernoulli.p: _bernoulli_p,
    aten.bernoulli.default: _bernoulli,
    aten.native_dropout.default: _native_dropout,
    aten.rand_like.default: _rand_like("uniform_"),
    aten.randn_like.default: _rand_like("normal_"),
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split_with_sizes,
    aten.unbind.int: _unbind,
    aten.set_.source_Tensor: _set_,
    aten._batch_norm_with_update.default: _bn_with_update,
    aten.native_batch_norm.default: _native_bn,
}


# --------------------------------------------------------------------------- factories


def factory(func: Any, args: tuple, kwargs: dict) -> LazyTensor:
    """XLA-key kernel for factory ops (``torch.zeros(..., device=dev)``)."""
    with _LOCK:
        name = func.overloadpacket.__name__
        kw = {k: v for k, v in kwargs.items() if k not in ("pin_memory", "layout")}
        kw.pop("memory_format", None)
        kw["device"] = DEVICE
        if name in ("empty", "empty_strided"):
            dtype = kw.get("dtype") or torch.get_default_dtype()
            return _record(aten.zeros.default, (list(args[0]),), {"dtype": dtype, "device": DEVICE})
        if name in ("randn", "rand"):
            dtype = kw.get("dtype") or torch.get_default_dtype()
            kind = "normal_" if name == "randn" else "uniform_"
            return random_tensor(kind, tuple(args[0]), dtype, (), {})
        if name in ("randint", "randperm"):
            cpu = func(*args, **{**kwargs, "device": "cpu"})
            return to_device(cpu)
        return _record(func, args, kw)
