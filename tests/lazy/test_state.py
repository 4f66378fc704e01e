"""The runtime's state object and ``reset_runtime``; the fast paths checked against the slow ones:
``record``'s inline attribute encoding against ``identity.encode``, and ``dispatch``'s cached
routes against ``_dispatch_slow``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xlacache.lazy as xl
from xlacache.lazy import dispatch as dispatch_mod
from xlacache.lazy import metrics
from xlacache.lazy import record as record_mod
from xlacache.lazy.graph import Node, avals_code, op_code
from xlacache.lazy.identity import encode, node_prefix
from xlacache.lazy.lowering import LOWERINGS
from xlacache.lazy.state import STATE

dev = xl.device()
aten = torch.ops.aten

# ------------------------------------------------------------------ reset_runtime


def _step(x: torch.Tensor) -> torch.Tensor:
    return (x * 3 + 1).sum(0)


def test_reset_runtime_is_a_fresh_process_but_keeps_live_values():
    torch.manual_seed(5)
    first_draw = torch.randn(4, device=dev).cpu()  # epoch 0 of seed 5
    x = torch.arange(6.0, device=dev).reshape(2, 3)
    expected = _step(x).cpu()
    xl.sync()
    torch.randn(4, device=dev)
    xl.sync()  # the stream moved on: the next draw differs from the first
    dispatch_mod._warned_fallback.add("aten::special_airy_ai")  # as if warned already
    ran: list[int] = []
    xl.add_step_closure(ran.append, (1,))
    pending = x * 2  # recorded, not run: survives the reset
    assert xl.compiled_cache_size() > 0 and metrics.counter_names()
    assert STATE.routes and STATE.ops and STATE.meta_cache and STATE.closures

    xl.reset_runtime()
    xl.device()  # the next use installs again what the reset uninstalled

    assert metrics.counter_names() == [] and metrics.metric_names() == []
    assert xl.compiled_cache_size() == 0
    assert not STATE.routes and not STATE.ops and not STATE.meta_cache and not STATE.closures
    assert STATE.routes_version == -1 and STATE.torch_seed is None and STATE.rng_leaf is None
    assert STATE.executables is not None and STATE.dispatcher is dispatch_mod.dispatch
    # the device stream restarts from torch's seed, as in a new process
    torch.testing.assert_close(torch.randn(4, device=dev).cpu(), first_draw)
    # the same program compiles again (its executable was forgotten) and computes the same
    torch.testing.assert_close(_step(x).cpu(), expected)
    assert metrics.counter_value("UncachedCompile") or metrics.counter_value("PersistentCacheHit")
    xl.sync()
    assert ran == []  # closures queued before the reset were dropped
    assert pending._v[0].op == "data"  # the live tensor's pending value ran at the barrier
    torch.testing.assert_close(pending.cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    with pytest.warns(UserWarning, match="no lowering"):  # warned again, as a new process
        torch.special.airy_ai(torch.full((2,), 3.0, device=dev)).cpu()


def test_reset_keeps_what_a_process_cannot_redo():
    mesh = STATE.process_mesh
    job, spmd, lock, refs = STATE.job, STATE.spmd, STATE.lock, STATE.refs
    STATE.rounds["tag"] = 3
    try:
        xl.reset_runtime()
        assert STATE.job is job and STATE.spmd == spmd and STATE.process_mesh is mesh
        assert STATE.lock is lock and STATE.refs is refs and STATE.rounds["tag"] == 3
    finally:
        STATE.rounds.pop("tag")
        xl.device()  # installs again what the reset uninstalled


# ------------------------------------------------------------------ record's inline encoding

_SCALARS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf")]),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]),
    st.sampled_from([torch.device("cpu"), torch.device("meta"), torch.device("xla:0")]),
    st.sampled_from([torch.contiguous_format, torch.channels_last, torch.strided]),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    st.builds(lambda v: np.float32(v), st.floats(width=32)),
    st.builds(lambda v: np.int64(v), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.builds(lambda v: torch.Size(v), st.lists(st.integers(0, 9), max_size=3)),
    st.just("tensor"),  # replaced by the lazy tensor below
)
_ATTRS = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner)),
    max_leaves=8,
)


_AVALS = (((2,), torch.float32),)
_META = torch.empty(2, device="meta")


def _one_vector(func, margs, mkw, akey, in_avals):
    """Shape inference for the encoding test: one float32 vector, whatever the op got."""
    prefix = node_prefix(op_code(func), akey, avals_code(_AVALS))
    return func, _META, _AVALS, prefix, None, None, False


def _tensorize(v, x):
    if v == "tensor" and type(v) is str:
        return x
    if type(v) in (list, tuple):
        return type(v)(_tensorize(e, x) for e in v)
    return v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    args=st.lists(_ATTRS, max_size=4),
    kwargs=st.dictionaries(st.sampled_from(["alpha", "dim", "out_dtype", "mode"]), _ATTRS),
)
def test_record_encodes_attributes_as_identity_encode(args, kwargs):
    """Any attribute values (ints, floats with -0.0/NaN/inf, bools, None, strings, dtypes,
    devices, formats, complex and numpy numbers, sizes, nested lists and tuples, lazy tensors,
    Python floats that become graph inputs): the node digest ``record`` computes from its inline
    encoding is the one ``identity.encode`` of the node's attributes gives. Shape inference is
    replaced (a meta kernel would reject most of these); the encoding is what is tested."""
    x = torch.ones(2, device=dev)
    args = [x, *(_tensorize(a, x) for a in args)]
    kwargs = {k: _tensorize(v, x) for k, v in kwargs.items()}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(record_mod, "infer", _one_vector)
        try:
            out = record_mod.record(aten.add.Tensor, tuple(args), kwargs)
        finally:
            STATE.meta_cache.clear()  # entries of the replaced shape inference
    n = out._v[0]
    akey = encode(n.attrs)
    assert n.digest == Node(n.op, n.inputs, n.attrs, n.avals, n.func).digest, akey


@settings(max_examples=300, deadline=None)
@given(v=_SCALARS.filter(lambda v: not (type(v) is str and v == "tensor")))
def test_encode_inline_tuple_path_equals_its_scalar_path(v):
    assert encode((v, v)) == "(" + encode(v) + "," + encode(v) + ")"


def test_recorded_real_ops_digest_as_encoded():
    """Real ops and meta kernels: each node's digest is the one its encoded attributes give."""
    x = torch.randn(3, 4, device=dev)
    outs = [
        x * 2.5,
        x.sum(-1, keepdim=True),
        x.to(torch.bfloat16),
        torch.nn.functional.pad(x, (1, 2), value=-0.0),
        x.view(-1)[1:7:2],
        torch.clamp(x, min=-1, max=None),
        x.new_zeros((2, 2)),
        torch.div(x, 3, rounding_mode="floor"),
        x.permute(1, 0).contiguous(),
    ]
    for out in outs:
        n = out._v[0]
        assert n.digest == Node(n.op, n.inputs, n.attrs, n.avals, n.func).digest, n.func


# ------------------------------------------------------------------ dispatch routes


class _Took(Exception):
    """Where dispatching went first: ``(kind, op)``."""


def _first_action(fn, func) -> tuple:
    try:
        fn(func, (object(),), {})
    except _Took as took:
        return took.args
    except Exception as e:  # noqa: BLE001 - anything else is a disagreement, shown
        return ("raised", type(e).__name__)
    return ("returned",)


def _all_ops() -> list:
    ops = set(LOWERINGS) | set(dispatch_mod.SPECIAL)
    for namespace in (torch.ops.aten, torch.ops.prims):
        for name in dir(namespace):
            packet = getattr(namespace, name, None)
            if not isinstance(packet, torch._ops.OpOverloadPacket):
                continue
            for ov in packet.overloads():
                ops.add(getattr(packet, ov))
    return sorted(ops, key=str)


def test_fast_routes_agree_with_the_slow_dispatch(monkeypatch):
    """For every aten and prims overload (a superset of the ops the OpInfo suite runs) and
    every op with a lowering or a special handler, the route ``dispatch`` caches takes the op
    where ``_dispatch_slow`` takes it: the same special handler, the same op recorded (an
    in-place op: its functional op), the same CPU-autocast check. A route depends on the op
    alone (``_dispatch_slow`` looks at arguments only for ops the fast route sends to it), so
    each op is dispatched once on a dummy argument, and the first action raises before any
    work."""
    fast = dispatch_mod.dispatch
    warned: list[Any] = []

    def took(kind):
        def fn(func, *a, **k):
            raise _Took(kind, func, bool(warned))

        return fn

    monkeypatch.setattr(dispatch_mod, "record", lambda func, *a, **k: took("record")(func))
    monkeypatch.setattr(dispatch_mod, "cpu_fallback", lambda func, *a, **k: took("cpu")(func))
    monkeypatch.setattr(dispatch_mod, "warn_cpu_autocast", lambda: warned.append(1))
    for op in list(dispatch_mod.SPECIAL):
        monkeypatch.setitem(dispatch_mod.SPECIAL, op, lambda a, k, op=op: took("special")(op))
    monkeypatch.setattr(dispatch_mod, "dispatch", dispatch_mod._dispatch_slow)  # slow all down
    STATE.routes.clear()
    STATE.routes_version = -1
    checked = 0
    try:
        for op in _all_ops():
            route = dispatch_mod._route(op)
            if route[1] == dispatch_mod._OTHER:  # the fast path calls _dispatch_slow itself
                continue
            warned.clear()
            got_fast = _first_action(fast, op)
            warned.clear()
            got_slow = _first_action(dispatch_mod._dispatch_slow, op)
            assert got_fast == got_slow and got_fast[0] in ("record", "special"), (op, route)
            checked += 1
    finally:
        STATE.routes.clear()  # routes to the patched handlers
        STATE.routes_version = -1
    assert checked > 500, checked


def test_the_reset_snippet_of_docs_lazy_runs():
    from tests.docsutil import section_block

    exec(section_block("docs/lazy.md", "Resetting the runtime", "python").text, {})  # noqa: S102
    xl.device()  # installs again what the reset uninstalled (torch.xla: the later tests' device)
