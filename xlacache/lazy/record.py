"""Recording: aten op -> IR node, with shapes from torch's meta kernels; values and views.

``record(func, args, kwargs)`` turns lazy tensors into node inputs (placeholders in the stored
argument template), Python numbers given to ``Scalar`` arguments into graph inputs, infers the
outputs' shapes and dtypes with the meta kernel (``meta_inference``: memoized by op, exact
attribute encoding and input shapes), and returns lazy tensors for the new node's outputs.

Views are recorded as functional ops that remember their root (the storage they view) and the
chain of view ops from it: ``value`` re-derives a view whose root was updated in place, and
``assign`` (an in-place update) scatters a view's new value back into its root.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from .graph import (
    Node,
    Placeholder,
    dynamic_int,
    int_scalar_node,
    placeholder,
    scalar_node,
)
from .identity import PLACEHOLDERS as _PLACEHOLDERS
from .identity import encode
from .lowering import (
    LOWERINGS,
    SCALAR_CONVERSIONS,
    STATIC_SCALAR_OPS,
    check_scalar_conversions,
    precision,
)
from .meta_inference import META_CACHE as _META_CACHE
from .meta_inference import infer
from .state import STATE
from .tensor import Cell, LazyTensor, new_lazy, tracing_nested
from .transfer import to_device

aten = torch.ops.aten
_default_dtype = torch.get_default_dtype

# --------------------------------------------------------------------------- values and views


def value(t: LazyTensor | Cell) -> tuple[Node, int]:
    """The tensor's current IR value (re-derived from its root if the root was updated)."""
    c = t if type(t) is Cell else t._c
    root = c._root
    if root is not None and c._rgen != root._gen:
        v: Any = root
        for f, rest, kw in c._chain:
            if f not in LOWERINGS:  # a view the CPU fallback made: a copy, not a view
                raise NotImplementedError(
                    f"xlacache.lazy: {f} ran on the CPU fallback; its result cannot follow "
                    "in-place updates of the tensor it views"
                )
            v = record(f, (v, *rest), kw, as_view=False)
        c._v = v._v  # a lazy tensor, or the root's cell itself (an alias)
        c._rgen = root._gen
    return c._v


def shape_of(t: LazyTensor | Cell) -> tuple[int, ...]:
    return tuple(t._meta.shape)


# c10's ScalarType names, as eager's cast errors spell them
_SCALAR_TYPE_NAMES = {
    torch.float64: "Double", torch.float32: "Float", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int", torch.int16: "Short",
    torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip


def check_output_cast(result: torch.dtype, out: torch.dtype) -> None:
    """Eager's check before an in-place or ``out=`` op writes its result into a tensor of
    another dtype: only a cast ``torch.can_cast`` allows (``int.div_(2)`` raises, never
    truncates)."""
    if result is not out and not torch.can_cast(result, out):
        names = [_SCALAR_TYPE_NAMES.get(d, d) for d in (result, out)]
        raise RuntimeError(
            f"result type {names[0]} can't be cast to the desired output type {names[1]}"
        )


def _own_if_sole_view(c: Cell) -> None:
    """Before a write of all of ``c``: if it views a storage nothing else holds (no tensor, no
    other view: a gradient eager would have copied to its parameter's layout, ``x.t()`` where
    ``x`` is gone), make it a storage of its own; the write then scatters into nothing."""
    if c._chain and sys.getrefcount(c._root) == 2:  # ``c._root`` and the argument
        c._root, c._chain = None, ()


def assign(t: LazyTensor, new: LazyTensor) -> None:
    """Make ``new``'s value the value of ``t`` (an in-place update), propagating through views."""
    if new.dtype != t.dtype:
        new = record(aten._to_copy.default, (new,), {"dtype": t.dtype})
    if new.shape != t.shape:
        new = record(aten.expand.default, (new, list(t.shape)), {})
    c = t._c
    _own_if_sole_view(c)
    root = c._root
    v = value(new)  # ``new`` may be an alias whose root was updated since it was read
    if root is None:
        c._v = v
        c._gen += 1
        return
    bases: list[Any] = [root]
    for f, rest, kw in c._chain[:-1]:
        bases.append(record(f, (bases[-1], *rest), kw, as_view=False))
    cur = new
    # an alias of the root has an empty chain (and one base): the new value is the root's
    for (f, rest, kw), base in zip(reversed(c._chain), reversed(bases), strict=False):
        cur = _scatter_into(f, rest, kw, base, cur)
    root._v = value(cur)
    root._gen += 1
    c._v = v
    c._rgen = root._gen


_RESHAPES = ("view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "flatten", "view_as")


def _scatter_into(f: Any, rest: tuple, kw: dict, base: Any, new: LazyTensor) -> LazyTensor:
    """Inverse of the view ``f``: ``base`` with the viewed part replaced by ``new``."""
    name = f.overloadpacket.__name__
    ndim = len(shape_of(base))
    if name in ("alias", "detach", "lift_fresh"):
        return new
    if f == aten.view.dtype:  # a reinterpretation of the bits: reinterpret them back
        return record(aten.view.dtype, (new, base._meta.dtype), {})
    if name in _RESHAPES:
        return record(aten.view.default, (new, list(shape_of(base))), {})
    if name == "permute":
        perm = [d % ndim for d in rest[0]]
        inv = [0] * len(perm)
        for i, p in enumerate(perm):
            inv[p] = i
        return record(aten.permute.default, (new, inv), {})
    if name in ("t", "transpose", "numpy_T"):
        if name == "transpose":
            d0, d1 = rest[0] % max(ndim, 1), rest[1] % max(ndim, 1)
        else:
            d0, d1 = 0, max(ndim - 1, 0)
        return record(aten.transpose.int, (new, d0, d1), {})
    inverse = _INVERSES.get(name)
    if inverse is not None:
        return record(inverse, (new,), {})
    if name in ("real", "imag"):
        other = record(aten.imag.default if name == "real" else aten.real.default, (base,), {})
        parts = (new, other) if name == "real" else (other, new)
        return record(aten.complex.default, parts, {})
    scatter = _SCATTERS.get(name)
    if scatter is not None:
        return record(scatter, (base, new, *rest), kw)
    raise NotImplementedError(f"xlacache.lazy: in-place write through a view made by {f}")


_INVERSES = {  # view ops whose inverse is one op on the new value
    "view_as_real": aten.view_as_complex.default,
    "view_as_complex": aten.view_as_real.default,
    "_conj": aten._conj.default,
    "_neg_view": aten._neg_view.default,
}
_SCATTERS = {
    "select": aten.select_scatter.default,
    "slice": aten.slice_scatter.default,
    "diagonal": aten.diagonal_scatter.default,
    "as_strided": aten.as_strided_scatter.default,
}

# --------------------------------------------------------------------------- recording


# factories whose Scalar is a value, not a shape (``arange``'s bounds stay constants)
_FILLING_FACTORIES = frozenset((aten.full.default, aten.scalar_tensor.default))


class _Op:
    """What recording needs to know about an op, worked out once per op."""

    __slots__ = ("func", "spos", "snames", "view", "fp32", "converts")

    def __init__(self, func: Any) -> None:
        self.func = func
        self.view = bool(func.is_view)
        self.fp32 = func in precision.OPS  # float32 precision follows PyTorch's setting
        self.converts = func in SCALAR_CONVERSIONS  # eager checks a number's range
        schema = func._schema.arguments
        tensors = any(str(a.type).startswith(("Tensor", "List[Tensor]")) for a in schema)
        if func in STATIC_SCALAR_OPS or not (tensors or func in _FILLING_FACTORIES):
            idx: list[tuple[int, str]] = []
        else:
            idx = [
                (i, a.name)
                for i, a in enumerate(schema)
                if "number" in str(a.type) or str(a.type) == "Tensor"
            ]
        # positions and names of the ``Scalar`` arguments whose values become graph inputs
        # (floats; ints but 0 and 1, as torch_xla: ``dynamic_int``)
        self.spos = frozenset(i for i, _ in idx)
        self.snames = frozenset(n for _, n in idx)


# keyed by id(op) (an OpOverload's __hash__ is a Python call); entries keep their op alive and
# are checked with ``is``, so a reused id never selects another op's entry
_OPS: dict[int, _Op] = STATE.ops
_COPY_FIRST = (None,)  # the _META_CACHE entry of a view eager's layout does not allow


def op_info(func: Any) -> _Op:
    op = _OPS.get(id(func))
    if op is None or op.func is not func:
        op = _OPS[id(func)] = _Op(func)
    return op


class _Ctx:
    """The inputs of the node being recorded, each value once."""

    __slots__ = ("func", "inputs", "seen", "dyn")

    def __init__(
        self,
        func: Any,
        inputs: list[tuple[Node, int]] | None = None,
        seen: dict[tuple[Node, int], int] | None = None,
    ) -> None:
        self.func = func
        self.inputs: list[tuple[Node, int]] = [] if inputs is None else inputs
        # keyed by the (node, k) pair itself: nodes hash and compare by identity
        self.seen: dict[tuple[Node, int], int] = {} if seen is None else seen
        self.dyn = False  # a Python float became a (float32) graph input

    def add(self, v: tuple[Node, int]) -> Placeholder:
        i = self.seen.get(v)
        if i is None:
            i = self.seen[v] = len(self.inputs)
            self.inputs.append(v)
        return placeholder(i)


def _convert(x: Any, ctx: _Ctx, dyn: bool) -> tuple[Any, Any]:
    """(template, meta) for one argument."""
    if isinstance(x, LazyTensor):
        return ctx.add(value(x)), x._c._meta
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 and x.device.type == "cpu" and x.dtype in _F32_EXACT:
            return ctx.add((scalar_node(x.item()), 0)), torch.empty(
                (), dtype=x.dtype, device="meta"
            )
        if x.dim() and not tracing_nested() and ctx.func not in _CPU_TENSORS_OK:
            raise _mixed_devices(ctx.func, x)
        lt = to_device(x)
        return ctx.add(value(lt)), lt._c._meta
    if isinstance(x, (list, tuple)):
        if not x:
            return (), x
        pairs = [_convert(e, ctx, dyn) for e in x]  # a ``Scalar[]``'s numbers: graph inputs
        return tuple(p[0] for p in pairs), type(x)(p[1] for p in pairs)
    if dyn and type(x) is float:
        ctx.dyn = True
        return ctx.add((scalar_node(x), 0)), x
    if dyn and type(x) is int and dynamic_int(x):
        return ctx.add((int_scalar_node(x), 0)), x
    if type(x) is Cell:
        return ctx.add(value(x)), x._meta
    if isinstance(x, torch.device):
        return None, torch.device("meta")
    return x, x


# 0-dim CPU tensors of these dtypes become float32 graph inputs (exactly); float64 ones are data
_F32_EXACT = frozenset((torch.float32, torch.float16, torch.bfloat16))
_NONE: frozenset = frozenset()

# ops that take CPU tensors along with xla ones in eager PyTorch too (index tensors and values)
_CPU_TENSORS_OK = {
    aten.index.Tensor,
    aten._unsafe_index.Tensor,
    aten.index_put.default,
    aten._unsafe_index_put.default,
}


def _all_ints(x: list | tuple) -> bool:
    for e in x:
        if type(e) is not int:
            return False
    return bool(x)


def _mixed_devices(func: Any, x: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        f"Input tensor is not an XLA tensor: {x.type()} of shape {list(x.shape)} given to {func} "
        "with xla tensors. Move it with .to(xl.device()); a module must be moved as a whole "
        "(module.to(device)) before it is applied to device tensors. Only 0-dim CPU tensors mix "
        "with device tensors, as scalars."
    )


def record(
    func: Any,
    args: tuple,
    kwargs: dict,
    as_view: bool = True,
    into: LazyTensor | list[LazyTensor] | None = None,
    static: bool = False,
) -> Any:
    """Record ``func`` as one IR node and return lazy tensors for its outputs.

    The output of a view op on a lazy tensor is tracked as a view of that tensor's storage
    (``as_view=False``: a plain value). With ``into`` (an in-place op recorded as its
    functional op), the (first) output becomes ``into``'s value instead (``assign``), and
    ``into`` is returned; a list ``into`` takes output ``k`` into its element ``k``. Raises
    ``identity.UnencodableAttribute`` for an attribute that cannot be keyed exactly.
    ``static``: Python floats stay compile-time constants (an op on float64/complex128
    values, whose floats a float32 graph input would round).

    This runs for every op a training step records: the common argument kinds (lazy tensors,
    ints) are handled inline, and the attribute encoding, built alongside, equals
    ``identity.encode(attrs)``.
    """
    op = _OPS.get(id(func))
    if op is None or op.func is not func:
        op = op_info(func)
    inputs: list[tuple[Node, int]] = []
    seen: dict[tuple[Node, int], int] = {}
    ctx = None  # for the other argument kinds: _convert
    spos = _NONE if static else op.spos
    dyn = False  # a Python float became a (float32) graph input
    targs: list[Any] = []
    margs: list[Any] = []
    codes: list[str] = []
    lays: list[tuple] = []  # the arguments not laid out contiguously in eager: their layout
    for i, a in enumerate(args):
        ta = type(a)
        if ta is LazyTensor:
            c = a._c
            r = c._root
            v = c._v if r is None or c._rgen == r._gen else value(c)
            j = seen.get(v)
            if j is None:
                j = seen[v] = len(inputs)
                inputs.append(v)
            ph = _PLACEHOLDERS[j] if j < 256 else placeholder(j)
            targs.append(ph)
            lay = c._lay
            if lay is None:
                margs.append(c._meta)
            else:  # eager's strides: the meta kernel gives the output's (eager's) layout
                margs.append(lay)
                lays.append((i, lay.stride(), lay.storage_offset()))
            codes.append(ph.code)
        elif ta is int and (i not in spos or not dynamic_int(a)):
            targs.append(a)
            margs.append(a)
            codes.append(f"i{a}")
        elif (ta is float or ta is int) and i in spos:  # a step-varying scalar: a graph input
            if ta is int:  # exact in the graph, and a float64 op's too
                v = (int_scalar_node(a), 0)
            else:
                v = (scalar_node(a), 0)
                dyn = True
            ph = placeholder(len(inputs))
            seen[v] = len(inputs)
            inputs.append(v)
            targs.append(ph)
            margs.append(a)
            codes.append(ph.code)
        elif (ta is list or ta is tuple) and _all_ints(a):  # sizes, dims
            targs.append(tuple(a))
            margs.append(a)
            codes.append("(" + ",".join([f"i{e}" for e in a]) + ")")
        elif ta is list and a and all([type(t) is LazyTensor for t in a]):  # ``_foreach_*``'s
            if ctx is None:
                ctx = _Ctx(func, inputs, seen)
            phs = tuple([ctx.add(value(t)) for t in a])
            targs.append(phs)
            margs.append([t._c._meta for t in a])
            codes.append("(" + ",".join([ph.code for ph in phs]) + ")")
        else:
            if ctx is None:
                ctx = _Ctx(func, inputs, seen)
            t, m = _convert(a, ctx, i in spos)
            targs.append(t)
            margs.append(m)
            codes.append(encode(t))
    if kwargs:
        if ctx is None:
            ctx = _Ctx(func, inputs, seen)
        snames = _NONE if static else op.snames
        tkw, mkw = {}, {}
        kcodes = []
        for k in sorted(kwargs) if len(kwargs) > 1 else kwargs:
            a = kwargs[k]
            t, m = _convert(a, ctx, k in snames)
            tkw[k] = t
            mkw[k] = m
            kcodes.append(f"(s{len(k)}:{k},{t.code if type(t) is Placeholder else encode(t)})")
        kw = tuple(tkw.items())
        kcode = "(" + ",".join(kcodes) + ")"
    else:
        kw, mkw, kcode = (), kwargs, "()"
    if op.fp32 and (fp32 := precision.record_attribute(func, (*margs, *mkw.values()))):
        kw = (*kw, fp32)  # an attribute for the lowering, not for the meta kernel
        kcode = encode(kw)
    attrs = (tuple(targs), kw)
    # exact and typed: 2 and 2.0, -1 and -2, 0.0 and -0.0 differ
    akey = "((" + ",".join(codes) + ")," + kcode + ")"
    # torch's default dtype decides the dtype of factories and of integer math (``i / 2``)
    ck = (id(func), akey, tuple([n.avals[k] for n, k in inputs]), tuple(lays), _default_dtype())
    hit = _META_CACHE.get(ck)
    if hit is None or hit[0] is not func:
        if hit is not _COPY_FIRST:
            try:
                hit = _META_CACHE[ck] = infer(func, margs, mkw, akey, ck[2])
            except RuntimeError:
                if not lays or not op.view or lays[0][0] != 0:
                    raise
                hit = _META_CACHE[ck] = _COPY_FIRST  # remembered: no meta kernel raises again
        if hit is _COPY_FIRST:
            # a view eager's layout does not allow: torch's ``reshape`` chose it by the
            # contiguous strides lazy tensors report, where eager's copies; so does this
            dense = {"memory_format": torch.contiguous_format}
            first = record(aten.clone.default, (args[0],), dense, as_view=False)
            return record(func, (first, *args[1:]), kwargs, as_view, into, static)
    _, metas, avals, prefix, multi, layouts, wide = hit
    if op.converts:
        check_scalar_conversions(func, args, kwargs, avals[0][1])
    if wide and (dyn or (ctx is not None and ctx.dyn)):
        # float64 math: its Python floats stay exact constants
        return record(func, args, kwargs, as_view, into, static=True)
    node = Node(func, tuple(inputs), attrs, avals, func, None, prefix)
    if into is not None:
        for k, t in enumerate(into if type(into) is list else [into]):
            _write_output(t, node, k, metas if multi is None else metas[k], avals[k])
        return into
    if multi is None:
        out = new_lazy(metas, avals[0], (node, 0), layouts)
        if as_view and op.view and isinstance(args[0], LazyTensor):
            b = args[0]._c
            chain = (*b._chain, (func, tuple(args[1:]), kwargs))
            track_view(out, b._root if b._root is not None else b, chain)
        return out
    wrapped = [
        None if m is None else new_lazy(m, avals[k], (node, k), layouts[k])
        for k, m in enumerate(metas)
    ]
    return wrapped if multi is list else tuple(wrapped)


def _write_output(into: LazyTensor, node: Node, k: int, meta: torch.Tensor, aval: tuple) -> None:
    """Output ``k`` of ``node`` becomes ``into``'s value (an in-place op), as ``assign``."""
    c = into._c
    if aval[1] is into.dtype and into.shape == aval[0]:
        # the common cases of ``assign``, without a tensor for the result
        _own_if_sole_view(c)
        r = c._root
        if r is None:
            c._v = (node, k)
            c._gen += 1
            return
        if not c._chain and c._rgen == r._gen:  # an alias of its root (a parameter)
            r._v = c._v = (node, k)
            r._gen += 1
            c._rgen = r._gen
            return
    check_output_cast(aval[1], into.dtype)
    assign(into, LazyTensor(meta, (node, k)))


def track_view(out: LazyTensor, root: Cell, chain: tuple) -> None:
    """Make ``out`` the view of ``root``'s storage that the view ops ``chain`` give."""
    o = out._c
    o._root = root
    o._chain = chain
    o._rgen = root._gen
