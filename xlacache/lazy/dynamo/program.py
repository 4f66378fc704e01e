"""One AOTAutograd graph as cached executables, called on the inputs' device arrays.

``CompiledGraph`` is what the backend gives AOTAutograd for a forward, backward or inference
graph it can lower (``lower.plan(gm).reason`` is None). A call takes the lazy tensors' device
arrays (pending values are computed first, by the lazy executor) and the 0-d CPU tensors'
values (packed per dtype), picks the executable for the binding of the graph's symbolic sizes
(one for a static graph: Dynamo's guards fix its shapes and dtypes), runs it, gives the
updated inputs their new values in place (their buffers donated where nothing else holds
them) and wraps the results as lazy tensors holding device data: no per-op tracing. The
executable comes from memory, else through an alias entry of the persistent cache (keyed by
the graph's code, its constants, the input shapes and dtypes, the int inputs and the lowering
code's fingerprint), else it is lowered, compiled and aliased.

``LazyGraph`` runs a graph op by op on lazy tensors instead (lazy tracing): graphs that cannot
be lowered, and any graph whose lowering failed (announced once, with the reason).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch
from jax._src.interpreters.pxla import get_default_device
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx import GraphModule

from xlacache import counters, executables

from .. import device_checks, metrics, torch_internals
from ..executor import materialize
from ..graph import DATA, Node, leaf_prefix
from ..identity import lowering_fingerprint
from ..lowering import jax_dtype, precision, x64
from ..lowering.checks import SIGNATURE
from ..record import assign
from ..rng import compiled_key, compiled_state, state_words
from ..state import STATE
from ..tensor import LOCK, LazyTensor, new_lazy
from . import draws, input_views, lower, sizes, strided

FORMAT = 3  # versions the graph key below (2: float32 precision settings; 3: whole steps)
_MAX_REASONS = 100
_REASONS: list[str] = STATE.dynamo_reasons
_refcount = sys.getrefcount
_increment_version = torch._C._increment_version


_ZEROS = torch.ops.aten.zeros.default
_SHARED_ZEROS_BYTES = 1 << 20  # zeros up to this size are made once and shared
_shared_zeros: dict[tuple, jax.Array] = {}


def zeros_array(n: Node) -> jax.Array | None:
    """A device array for a pending ``zeros`` factory value, or None for any other node.

    Autograd gives a backward zeros for the outputs the loss does not use (logits, a KV
    cache); computing each as a lazy graph would run a program per input per step. Arrays
    are immutable, so small ones are made once and shared (never for an input the program
    updates: its buffer may be donated)."""
    if n.op is not _ZEROS or n.inputs:
        return None
    shape, dtype = n.avals[0]
    key = (shape, dtype, get_default_device())  # where the lazy executor would compute it
    z = _shared_zeros.get(key)
    if z is None:
        with x64():
            z = jax.numpy.zeros(shape, jax_dtype(dtype))
        if z.nbytes <= _SHARED_ZEROS_BYTES and len(_shared_zeros) < 256:
            _shared_zeros[key] = z
    return z


def note_fallback(reason: str, warn: bool = False) -> None:
    """Count a graph that runs lazily and keep why (``report()``); ``warn``: say it once."""
    metrics.counter_inc("CompiledGraphFallback")
    _REASONS.append(reason)
    del _REASONS[:-_MAX_REASONS]
    if warn and reason not in STATE.dynamo_warned:
        STATE.dynamo_warned.add(reason)
        warnings.warn(f"xlacache.lazy.dynamo: a graph runs lazily: {reason}", stacklevel=3)


@functools.cache
def fingerprint() -> str:
    """The lazy lowering code's fingerprint and this package's source (how graphs lower)."""
    h = hashlib.sha256(f"compile/{FORMAT} {lowering_fingerprint()}".encode())
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _unboxed(args: tuple) -> Any:
    """AOTAutograd calls a graph with a list of its inputs (boxed), or with the inputs."""
    return args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)


def _holders(c: Any) -> int:
    """How many cells hold the value tuple of the cell ``c`` as their own: 1 for a tensor with
    no root, 2 for a plain alias of its root (same value, no view op between), 0 for a view."""
    r = c._root
    if r is None:
        return 1
    if c._chain or c._rgen != r._gen or r._v is not c._v:
        return 0
    return 2


class LazyGraph:
    """Runs ``gm`` op by op on lazy tensors (boxed calling convention)."""

    _boxed_call = True

    def __init__(self, gm: GraphModule, reason: str, warn: bool = False) -> None:
        self.gm = gm
        self._run = strided.lazy_runner(draws.lazy_graph(gm))
        self._boxed_call = True  # an instance attribute: Dynamo's wrappers copy it (wraps)
        note_fallback(reason, warn)

    def __call__(self, *args: Any) -> Any:
        args = _unboxed(args)
        metrics.counter_inc("CompiledGraphLazyRun")
        with torch_internals.without_aot_alias_analysis():
            return self._run(*args)


def _host_scalar(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0


def _mixed(i: int, x: Any, want: str) -> RuntimeError:
    what = f"{x.device} tensor of shape {list(x.shape)}" if isinstance(x, torch.Tensor) else x
    return RuntimeError(
        f"xlacache.lazy.dynamo: input {i} of a compiled graph is a {what}, not {want}; "
        "move it with .to(xl.device())"
    )


@dataclass
class _Program:
    """One binding's executable and what its results are."""

    run: Callable[..., Any]  # donating the updated inputs' buffers
    plain: Callable[..., Any] | None  # donating nothing (built when first needed)
    fn: Callable[..., list]  # the JAX function (to build ``plain``)
    avals: list  # its arguments' shapes and dtypes
    outs: list[tuple[torch.Tensor, tuple, bytes]]  # per device output: meta, leaf avals, prefix
    updates: list[tuple[tuple, bytes]]  # per updated input: its leaf's avals and prefix
    digest: bytes
    signature: dict
    sizes: list[int]  # the graph's int outputs (sizes a backward takes) in this binding


class CompiledGraph:
    """A lowerable AOTAutograd graph: executables by size binding (boxed calling convention)."""

    _boxed_call = True

    def __init__(self, gm: GraphModule, what: str, plan: lower.Plan) -> None:
        with unset_fake_temporarily():  # AOTAutograd compiles under its fake mode
            self._init(gm, what, plan)

    def _init(self, gm: GraphModule, what: str, plan: lower.Plan) -> None:
        self._boxed_call = True  # an instance attribute: Dynamo's wrappers copy it (wraps)
        self.gm = gm
        self.what = what
        self.plan = plan
        self.dev = plan.device_inputs
        self.host_inputs = [i for i, k in enumerate(plan.kinds) if k != lower.DEVICE]
        self.ints = plan.int_inputs
        self.static = not plan.symbolic and not self.ints
        self.donated = tuple(self.dev.index(i) for i in plan.device_updates)
        self.updated = frozenset(plan.device_updates)
        self.groups = [(np.dtype(jax_dtype(d)), members) for d, members in plan.groups]
        h = hashlib.blake2b(f"xlacache.lazy.dynamo/{FORMAT}\n".encode(), digest_size=16)
        h.update(gm.code.encode())
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                c = getattr(gm, n.target).detach().contiguous()
                h.update(f"{n.target} {c.dtype} {list(c.shape)}\n".encode())
                h.update(c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b"")
        self.code_digest = h.digest()
        self.programs: dict[tuple, _Program] = {}
        self.fallback: LazyGraph | None = None

    def __call__(self, *args: Any) -> list:
        args = _unboxed(args)
        if self.fallback is not None:
            return self.fallback(*args)
        with LOCK:
            arrays = self._arrays(args)
            packed = self._packed(args)
            now = precision.settings()  # float32 precision: part of what a program computes
            key: tuple = (*now.values(), *(() if self.static else self._key(args)))
            if STATE.spmd:
                key += tuple(a.sharding for a in arrays)
            prog = self.programs.get(key)
            if prog is None:
                try:
                    prog = self._program(args, arrays, packed, now)
                except Exception as e:  # noqa: BLE001 - never a wrong number: run it lazily
                    counters.hidden("dynamo.lowering", e)
                    self.fallback = LazyGraph(self.gm, f"{self.what}: {e}", warn=True)
                    return self.fallback(*args)
                self.programs[key] = prog
            p = self.plan
            host = ()
            if p.host is not None and p.counter_step is None:
                host = p.host(*[args[i] for i in self.host_inputs])
            run = prog.run if self._exclusive(args, arrays) else self._plain(prog)
            t0 = time.perf_counter_ns()
            with x64():
                results = run(*arrays, *packed)
            metrics.metric_add("CompiledGraphExecuteTime", time.perf_counter_ns() - t0)
            metrics.counter_inc("CompiledGraphExecute")
            if p.checked:
                device_checks.note(results[-1])
            key = packed[-1] if p.random else None
            out = self._outputs(args, results, host, prog, key)
            self._update(args, results, host, prog)
        return out

    # -- inputs

    def _arrays(self, args: list) -> list:
        arrays: list[Any] = []
        pending: list[int] = []  # positions in ``arrays`` of values to compute first
        for j, i in enumerate(self.dev):
            a = args[i]
            c = getattr(a, "_c", None)
            if c is None or not isinstance(a, LazyTensor):
                raise _mixed(i, a, "an xla tensor")
            r = c._root
            n = c._v[0] if r is None or c._rgen == r._gen else None
            if n is not None and n.op is DATA:
                arrays.append(n.data)
                continue
            z = None if n is None or i in self.updated or STATE.spmd else zeros_array(n)
            if z is None:
                pending.append(j)
            arrays.append(z)
        if pending:
            materialize([args[self.dev[j]] for j in pending])
            for j in pending:
                arrays[j] = args[self.dev[j]]._c._v[0].data
        return arrays

    def _packed(self, args: list) -> list:
        """The 0-d CPU tensors' values, one array per dtype (their values now: copies)."""
        out = []
        for np_dtype, members in self.groups:
            try:
                out.append(np.array([args[i].item() for i in members], np_dtype))
            except Exception as e:
                bad = next((i for i in members if not _host_scalar(args[i])), members[0])
                raise _mixed(bad, args[bad], "a 0-d CPU tensor") from e
        if self.plan.host_draws:  # (``draws.HOST``)
            ints = {self.plan.placeholders[i]: int(args[i]) for i in self.ints}
            out += [draws.draw_on_host(n, ints) for n in self.plan.host_draws]
        for i in self.plan.rng_inputs:  # saved RNG states (``draws.py``)
            try:
                out.append(state_words(args[i]))
            except (ValueError, AttributeError) as e:
                raise RuntimeError(f"xlacache.lazy.dynamo: input {i}: {e}") from e
        if self.plan.random:  # the key of this call's draws, last
            out.append(compiled_key())
        return out

    def _key(self, args: list) -> tuple:
        ints = tuple(int(args[i]) for i in self.ints)
        shapes = tuple(tuple(args[i].shape) for i in self.dev if self.plan.symbolic)
        return (ints, shapes)

    def _exclusive(self, args: list, arrays: list) -> bool:
        """Does nothing but the updated inputs themselves hold their values (their buffers can
        be donated)? Counted references: the value tuple's holders (the tensor's cell, and its
        root's for an alias such as a parameter), the node and its array, and the names here
        and in ``arrays``; anything more (another tensor, a pending node, a second input)
        keeps the buffer."""
        for i in self.plan.device_updates:
            c = args[i]._c
            holders = _holders(c)
            v = c._v
            n = v[0]
            if not holders or _refcount(v) > holders + 2:
                return False
            if _refcount(n) > 3 or _refcount(n.data) > 3:
                return False
        return True

    # -- results

    def _outputs(
        self, args: list, results: list, host: tuple, prog: _Program, key: np.ndarray | None
    ) -> list:
        out: list[Any] = []
        outs = prog.outs
        for w in self.plan.outputs:
            if w is None:
                out.append(None)
            elif w[0] == "dev":
                meta, avals, prefix = outs[w[1]]
                node = Node(DATA, (), None, avals, data=results[w[1]], prefix=prefix)
                out.append(new_lazy(meta, avals[0], (node, 0)))
            elif w[0] == "in":
                out.append(args[w[1]])
            elif w[0] == "view":
                view, start, i = self.plan.views[w[1]]
                out.append(input_views.replay(view, start, args[i], self.plan.placeholders, args))
            elif w[0] == "size":
                out.append(prog.sizes[w[1]])
            elif w[0] == "rng":  # the state of this call's draw w[1], for the backward
                out.append(compiled_state(key, w[1]))
            else:
                out.append(host[w[1]])
        return out

    def _update(self, args: list, results: list, host: tuple, prog: _Program) -> None:
        p = self.plan
        first = p.n_device_outputs
        updated = []
        for j, i in enumerate(p.device_updates):
            t = args[i]
            avals, prefix = prog.updates[j]
            v = (Node(DATA, (), None, avals, data=results[first + j], prefix=prefix), 0)
            c = t._c
            r = c._root
            if r is None:
                c._v = v
                c._gen += 1
            elif _holders(c):  # an alias of its root (a parameter): the root's value too
                r._v = c._v = v
                r._gen += 1
                c._rgen = r._gen
            else:  # a view: written through to its base
                assign(t, LazyTensor(c._meta, v))
            updated.append(t)
        if p.host_updates:  # the CPU tensors (step counters) in one op
            targets = [args[i] for i in p.host_updates]
            if p.counter_step is not None:
                torch._foreach_add_(targets, p.counter_step)
            else:
                torch._foreach_copy_(targets, list(host[p.n_host_outputs :]))
        if updated:
            _increment_version(updated)  # as an in-place op would: autograd checks saved values

    # -- compiling

    def _program(self, args: list, arrays: list, packed: list, now: dict[str, str]) -> _Program:
        for a in arrays:
            if len(a.sharding.device_set) != 1:
                raise NotImplementedError("inputs placed on several devices (SPMD)")
        p = self.plan
        bind = _binding(p, args)
        if bind is None:
            raise NotImplementedError("input sizes that the size symbols given do not fix")
        ints = {i: int(args[i]) for i in self.ints}
        fn = lower.build(p, bind, ints, now)
        size_values = [sizes.concrete(v, bind) for v in p.size_results]
        vals = [r.meta["val"] for r in p.device_results[: p.n_device_outputs]]
        metas = [torch.empty(sizes.aval(v, bind)[0], dtype=v.dtype, device="meta") for v in vals]
        update_dtypes = [p.placeholders[i].meta["val"].dtype for i in p.device_updates]
        outs = []
        for m in metas:
            leaf = ((tuple(m.shape), m.dtype),)
            outs.append((m, leaf, leaf_prefix(DATA, leaf)))
        updates = []
        for i, d in zip(p.device_updates, update_dtypes, strict=True):
            leaf = ((tuple(arrays[self.dev.index(i)].shape), d),)
            updates.append((leaf, leaf_prefix(DATA, leaf)))
        h = hashlib.blake2b(self.code_digest, digest_size=16)
        h.update(f"fp32 {sorted(now.items())};".encode())
        for a in (*arrays, *packed):
            h.update(f"{tuple(a.shape)} {np.dtype(a.dtype).name};".encode())
        h.update(f"ints {sorted(ints.items())};donated {self.donated}".encode())
        results = [[list(m.shape), np.dtype(jax_dtype(m.dtype)).name] for m in metas]
        results += [
            [list(arrays[self.dev.index(i)].shape), np.dtype(jax_dtype(d)).name]
            for i, d in zip(p.device_updates, update_dtypes, strict=True)
        ]
        if p.checked:
            results.append(SIGNATURE)
        inputs = [[list(a.shape), np.dtype(a.dtype).name] for a in (*arrays, *packed)]
        signature = {"inputs": inputs, "outputs": results, "donated": list(self.donated)}
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (*arrays, *packed)]
        run = self._compile(fn, h.digest(), signature, avals, self.donated)
        plain = None if self.donated else run
        return _Program(run, plain, fn, avals, outs, updates, h.digest(), signature, size_values)

    def _plain(self, prog: _Program) -> Callable[..., Any]:
        """The program without donation (an updated input's buffer is held elsewhere)."""
        if prog.plain is None:
            digest = hashlib.blake2b(prog.digest + b"plain", digest_size=16).digest()
            sig = {**prog.signature, "donated": []}
            prog.plain = self._compile(prog.fn, digest, sig, prog.avals, ())
        return prog.plain

    def _compile(
        self,
        fn: Callable[..., Any],
        digest: bytes,
        signature: dict,
        avals: list,
        donated: tuple[int, ...],
    ) -> Callable[..., Any]:
        t0 = time.perf_counter_ns()
        alias = executables.alias_key(digest, fingerprint())
        if alias is not None:
            program = executables.load(alias, signature)
            if program is not None:
                metrics.metric_add("CompiledGraphCompileTime", time.perf_counter_ns() - t0)
                metrics.counter_inc("CompiledGraphAliasHit")
                return program
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            with warnings.catch_warnings(), x64():
                warnings.filterwarnings("ignore", message=".*[Dd]onat.*")
                jitted = jax.jit(fn, donate_argnums=donated, keep_unused=True)
                lowered = jitted.lower(*avals)
                metrics.counter_inc("CompiledGraphLowering")
                with executables.capture() as compiled_here:
                    compiled = lowered.compile()
        finally:
            if gc_was_on:
                gc.enable()
        metrics.metric_add("CompiledGraphCompileTime", time.perf_counter_ns() - t0)
        metrics.counter_inc("CompiledGraphCompile")
        if alias is not None:
            executables.store(alias, compiled_here, signature, compiled)
        return compiled


def _binding(p: lower.Plan, args: list) -> dict[Any, int] | None:
    """The concrete value of every size symbol of ``p``'s inputs in this call (``sizes``;
    a saved RNG state's length is no size of the graph's)."""
    pairs = zip(p.placeholders, p.kinds, args, strict=True)
    return sizes.symbol_values((n.meta["val"], a) for n, k, a in pairs if k != lower.RNG)
