"""Barriers: pending IR -> JAX function -> compiled executable (cached by graph key) -> execute.

At a barrier the pending values are collected, the graph reachable from them is put in
post-order, and its identity (``identity.graph_key``) is a blake2b digest of the node prefixes in
that order, the input positions, the outputs and the donated inputs. Node prefixes come from
the recording cache, so a steady training loop costs one pass over the nodes here and never
re-lowers. On an in-memory miss the graph is turned into a JAX function and compiled with
``jax.jit(...).lower(...).compile()``, which is where ``xlacache.initialize_cache`` hooks in: the
persistent store is consulted inside that compile.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from xlacache import executables
from xlacache.lazy_settings import lazy_setting

from . import closures, device_checks, metrics, rng
from .distributed.agreement import agree
from .distributed.program import process_program
from .executable_cache import Executable, ExecutableCache, map_limit
from .graph import (
    DATA,
    RANDOM,
    RNG,
    SCALAR,
    Node,
    Placeholder,
    data_node,
    nodes_made,
    placeholder,
    toposort,
)
from .identity import graph_key, lowering_fingerprint
from .lowering import cast, jax_dtype, lower_random, lowering_of, x64
from .lowering.checks import CHECKED_OPS, SIGNATURE, returning_checks
from .lowering.dtypes import weak_int
from .reads import cut, keep_computed
from .record import record, value
from .spmd import placement as spmd
from .state import STATE
from .tensor import LOCK, LazyTensor, flush_trace_metrics, live_tensors, restore_gc
from .transfer import to_host


@dataclass
class _Step:
    lower: Callable[..., Any]
    args: tuple
    kwargs: dict
    ins: tuple[tuple[int, int], ...]
    avals: tuple
    name: str


EXECUTABLES = STATE.executables = ExecutableCache(
    lazy_setting("compilation_cache_size"), map_limit()
)


def _fill(t: Any, ins: list[Any]) -> Any:
    if isinstance(t, Placeholder):
        return ins[t.i]
    if isinstance(t, tuple):
        return tuple(_fill(e, ins) for e in t)
    return t


def _build(order: list[Node], outs: list[tuple[Node, int]], checked: bool = False) -> Callable:
    """A JAX function ``f(*arrays, scalars)`` computing ``outs`` from the graph's leaves
    (``order`` from ``toposort``, whose positions the nodes hold); ``checked``: and, last,
    which checks failed (``lowering.checks``)."""
    leaf_arg: dict[int, tuple[str, int]] = {}
    steps: list[tuple[int, _Step | None]] = []
    n_arr = n_sc = 0
    for i, n in enumerate(order):
        if n.op in (DATA, RNG):
            leaf_arg[i] = ("a", n_arr)
            n_arr += 1
        elif n.op == SCALAR:  # a float32 or (an exact integer in float32) int64 input
            leaf_arg[i] = ("s" if n.avals[0][1] is torch.float32 else "i", n_sc)
            n_sc += 1
        else:
            ins = tuple((m.pos, k) for m, k in n.inputs)
            if n.op == RANDOM:
                kind, idx, shape, dtype, params = n.attrs
                fn = _random_lowering(kind, idx, shape, dtype, params)
                phs = tuple(placeholder(j) for j in range(len(ins)))
                steps.append((i, _Step(fn, phs, {}, ins, n.avals, RANDOM)))
                continue
            targs, tkw = n.attrs
            low = lowering_of(n.func)
            steps.append((i, _Step(low, targs, dict(tkw), ins, n.avals, str(n.func))))
    out_pos = [(n.pos, k) for n, k in outs]

    def run(*args: Any) -> list[Any]:
        arrays, scalars = args[:-1], args[-1]
        env: list[Any] = [None] * len(order)
        for i, (kind, j) in leaf_arg.items():
            if kind == "a":
                env[i] = (arrays[j],)
            else:
                env[i] = (scalars[j] if kind == "s" else weak_int(scalars[j]),)
        for i, st in steps:
            ins = [env[p][k] for p, k in st.ins]
            try:
                res = st.lower(
                    *_fill(st.args, ins), **{k: _fill(v, ins) for k, v in st.kwargs.items()}
                )
            except Exception as e:
                raise RuntimeError(f"xlacache.lazy: lowering {st.name} failed: {e}") from e
            res = (res,) if not isinstance(res, (tuple, list)) else tuple(res)
            env[i] = tuple(
                conform_result(r, a, st.name) for r, a in zip(res, st.avals, strict=False)
            )
        return [env[p][k] for p, k in out_pos]

    return returning_checks(run) if checked else run


def _random_lowering(kind: str, idx: int, shape: tuple, dtype: Any, params: tuple) -> Callable:
    def fn(key: Any, *inputs: Any) -> Any:
        return lower_random(
            key, *inputs, kind=kind, index=idx, shape=shape, dtype=dtype, params=params
        )

    return fn


_NP_DTYPES: dict[Any, np.dtype] = {}


def conform_result(r: Any, aval: Any, name: str) -> Any:
    """Cast a lowering's result to the dtype and shape torch's meta kernel predicted."""
    if aval is None or r is None:
        return r
    shape, dtype = aval
    if not isinstance(r, jax.Array):
        r = jnp.asarray(r)
    jdt = _NP_DTYPES.get(dtype)
    if jdt is None:
        jdt = _NP_DTYPES[dtype] = np.dtype(jax_dtype(dtype))
    if r.dtype != jdt:  # eager's conversion rules (XLA's convert saturates)
        r = cast(r, jdt)
    if r.weak_type:  # strong types only: what the next graph sees is exact
        r = lax.convert_element_type(r, jdt)
    if r.shape != shape:
        if r.size == int(np.prod(shape)):
            r = r.reshape(shape)
        else:
            try:
                r = jnp.broadcast_to(r, shape)
            except ValueError as e:
                raise RuntimeError(
                    f"xlacache.lazy: {name} lowered to shape {r.shape}, expected {shape}"
                ) from e
    return r


def set_allow_execution(allow: bool) -> bool:
    """Allow (or, inside ``compile(full_graph=True)``, forbid) running graphs before the
    barrier; returns the previous setting."""
    prev = STATE.allow_execution
    STATE.allow_execution = allow
    return prev


def materialize(tensors: list[LazyTensor], what: str = "a read (.cpu/.item/print)") -> None:
    """Run the graph needed by ``tensors`` only (``.item()``, ``.cpu()``, ``print``)."""
    if not STATE.allow_execution:
        raise RuntimeError(
            "xlacache.lazy: a graph had to run inside compile(full_graph=True) (.item(), .cpu(), "
            "printing a tensor, data-dependent control flow, or an op that runs on CPU)"
        )
    with LOCK:
        if _run(tensors, donate=False, what=what):
            # later draws take a new epoch, as after sync(): a loop whose only barrier is a
            # read records the same random ops every step, not ever higher indices
            rng.new_epoch()
    restore_gc()


def to_cpu(t: LazyTensor) -> torch.Tensor:
    """Run the graph ``t`` needs, then copy its value to CPU (``TransferFromDevice``). A value
    sharded across processes is gathered first (a program every process runs)."""
    materialize([t])
    device_checks.raise_if_set()
    leaf = value(t)[0]
    data = leaf.data
    if not data.is_fully_addressable and not data.is_fully_replicated:
        with LOCK:
            everywhere = spmd.replicated(data.sharding)
            gathered = record(spmd.SHARD, (t, spmd.constraint_code(everywhere)), {})
            _run([gathered], donate=False, what="a read of a sharded value")
            leaf = value(gathered)[0]
        if not leaf.data.is_fully_replicated:
            raise RuntimeError(f"xlacache.lazy: a gathered value is {leaf.data.sharding}")
    return to_host(leaf, t.dtype)


def sync(wait: bool = False) -> None:
    """Run everything pending (``mark_step``); buffers of overwritten device data are donated."""
    with LOCK:
        flush_trace_metrics()
        metrics.counter_inc("MarkStep")
        _run(live_tensors(), donate=True, what="sync")
        STATE.trim_base = nodes_made()  # nothing made before is pending (trim.py)
        rng.new_epoch()
        restore_gc()
    closures.run()
    if wait:
        wait_device_ops()
    else:
        device_checks.raise_if_set(wait=False)


def wait_device_ops() -> None:
    """Block until every device value is computed (``xm.wait_device_ops``)."""
    for t in live_tensors():
        n = t._v[0]
        if n.op == DATA:
            n.data.block_until_ready()
    device_checks.raise_if_set()


def _run(targets: list[LazyTensor], donate: bool, what: str) -> bool:
    """Run the graph of ``targets``' pending values; False when none was pending."""
    with LOCK:
        t_start = time.perf_counter_ns()
        outs: list[tuple[Node, int]] = []
        out_ix: dict[tuple[int, int], int] = {}
        for t in targets:
            n, k = value(t)
            if n.op != DATA and (id(n), k) not in out_ix:
                out_ix[(id(n), k)] = len(outs)
                outs.append((n, k))
        if not outs:
            return False
        everyone = live_tensors()
        order = toposort(outs)  # sets each node's ``pos``
        # a read keeps what else its graph computes (sync's targets are every live value)
        consumers = [] if donate else keep_computed(everyone, order, outs, out_ix)
        arrays: list[Any] = []
        scalars: list[float] = []
        leaf_nodes: list[Node] = []
        prefixes: list[bytes] = [n.prefix for n in order]
        wiring: list[int] = []  # per node: number of inputs, then (position, output) pairs
        add = wiring.append
        for n in order:
            ins = n.inputs
            add(len(ins))
            if ins:
                for m, k in ins:
                    add(m.pos)
                    add(k)
            elif n.op is DATA or n.op is RNG:
                arrays.append(n.data)
                leaf_nodes.append(n)
            elif n.op is SCALAR:
                scalars.append(n.data)
        donated: tuple[int, ...] = ()
        if donate:
            held = {id(t._v[0].data) for t in everyone if t._v[0].op == DATA}
            out_shapes = {n.avals[k] for n, k in outs}
            donated = tuple(
                j
                for j, n in enumerate(leaf_nodes)
                if n.op == DATA and id(n.data) not in held and n.avals[0] in out_shapes
            )
        wiring.append(len(outs))
        for n, k in outs:
            wiring.append(n.pos)
            wiring.append(k)
        wiring.append(len(donated))
        wiring.extend(donated)
        # SPMD (spmd/placement.py): input placements are part of the key; None until used
        placements = spmd.graph_inputs(arrays, leaf_nodes, order)
        key = graph_key(prefixes, wiring, placements)
        metrics.metric_add("GraphBuildTime", time.perf_counter_ns() - t_start)
        sc = np.asarray(scalars, dtype=np.float32)
        exe = EXECUTABLES.get(key)
        if exe is None:
            exe = _compile(key, order, outs, arrays, sc, donated, what)
            EXECUTABLES.put(key, exe)
        else:
            metrics.counter_inc("CachedCompile")
            if exe.across:
                _agree(exe.across, key, what, arrays, sc)
        t0 = time.perf_counter_ns()
        with x64():
            results = exe.compiled(*arrays, sc)
        metrics.metric_add("ExecuteTime", time.perf_counter_ns() - t0)
        if exe.checked:
            device_checks.note(results[-1])
            results = results[:-1]
        metrics.counter_inc("ExecuteComputation")
        new_nodes = [data_node(r, n.avals[k][1]) for r, (n, k) in zip(results, outs, strict=True)]
        cut(consumers, out_ix, new_nodes)
        for t in everyone:
            n, k = t._v
            j = out_ix.get((id(n), k))
            if j is not None:
                t._v = (new_nodes[j], 0)
        return True


def _agree(across: str, key: bytes, what: str, arrays: list[Any], scalars: np.ndarray) -> None:
    """Before a cross-process program runs: every process runs it now, and a program over a
    mesh gets the same values where each process passes its own copy (``agreement``)."""
    values = spmd.replicated_inputs(arrays, scalars) if across == "mesh" else b""
    agree(key, what, inputs=values)


def _where(order: list[Node], arrays: list[Any]) -> tuple[Any, tuple | None, str]:
    """Where a graph's program runs: ``(process program or None, its devices (None: the
    default device), "collectives" / "mesh" when it runs on other processes' devices too)``.

    A graph with a collective is one program over the process mesh (``distributed/``); an SPMD
    graph runs on its mesh's devices (``spmd/``)."""
    procs = process_program(order)
    devices = spmd.program_devices(arrays, order)
    if procs is not None:
        if devices is not None:
            raise RuntimeError(
                "xlacache.lazy: a graph with collectives (all_reduce, all_gather, "
                "optimizer_step) over SPMD-sharded values: shard the batch over the mesh "
                "instead (docs/spmd.md)"
            )
        return procs, procs.devices, "collectives"
    return None, devices, "mesh" if spmd.spans_processes(devices) else ""


def _compile(
    key: bytes,
    order: list[Node],
    outs: list[tuple[Node, int]],
    arrays: list[Any],
    scalars: np.ndarray,
    donated: tuple[int, ...],
    what: str,
) -> Executable:
    n_ops = sum(1 for n in order if n.op not in (DATA, RNG, SCALAR))
    metrics.metric_add("GraphOps", n_ops)
    out_dtypes = tuple(n.avals[k][1] for n, k in outs)
    procs, devices, across = _where(order, arrays)
    # a process program's check is each process's own; a mesh's is one global value
    checked = any(n.func in CHECKED_OPS for n in order)
    signature = _signature(arrays, scalars, outs, donated, checked)
    if procs is not None:
        out_shapes = [n.avals[k][0] for n, k in outs] + [()] * checked
        global_avals = procs.avals(arrays, scalars, out_shapes)
        signature = procs.signature(signature)
    if across:
        _agree(across, key, what, arrays, scalars)
    # With a persistent cache, the graph key (exact, the same in every process) names the
    # program: an alias entry maps it (and its devices) to the executable's key, so a warm
    # process loads the executable without lowering the graph (``xlacache.executables``).
    alias = executables.alias_key(key, lowering_fingerprint(), devices)
    if alias is not None:
        t0 = time.perf_counter_ns()
        program = executables.load(alias, signature, devices)
        if program is not None:
            metrics.metric_add("CompileTime", time.perf_counter_ns() - t0)
            metrics.counter_inc("PersistentCacheHit")
            metrics.counter_inc("PersistentCacheAliasHit")
            program = program if procs is None else procs.wrap(program)
            return Executable(program, n_ops, out_dtypes, across, checked)
    # tracing a graph of thousands of nodes allocates hundreds of thousands of short-lived jax
    # objects; with the collector on, they trigger full collections (a fifth of the lowering
    # time). They are freed by reference counting; any cycles are collected after.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        fn = _build(order, outs, checked)
        # keep_unused: every graph input is a parameter, as the signature says
        if procs is None:
            jitted = jax.jit(fn, donate_argnums=donated, keep_unused=True)
        else:
            jitted = procs.jit(fn, len(arrays) + 1, donated)
        with warnings.catch_warnings(), x64():
            warnings.filterwarnings("ignore", message=".*[Dd]onat.*")
            lowered = jitted.lower(*(global_avals if procs else (*arrays, scalars)))
            t1 = time.perf_counter_ns()
            metrics.metric_add("LoweringTime", t1 - t0)
            with executables.capture() as compiled_here:
                compiled = lowered.compile()
        metrics.metric_add("CompileTime", time.perf_counter_ns() - t1)
    finally:
        if gc_was_on:
            gc.enable()
    # what the persistent cache did for this compile (nothing: no cache initialized)
    hit = sum(1 for _, outcome in compiled_here if outcome == "hit")
    miss = len(compiled_here) - hit
    if hit:
        metrics.counter_inc("PersistentCacheHit", hit)
    else:
        if miss:
            metrics.counter_inc("PersistentCacheMiss", miss)
        metrics.counter_inc("UncachedCompile")
    if alias is not None:
        executables.store(alias, compiled_here, signature, compiled)
    program = compiled if procs is None else procs.wrap(compiled)
    return Executable(program, n_ops, out_dtypes, across, checked)


def _signature(
    arrays: list[Any],
    scalars: np.ndarray,
    outs: list[tuple[Node, int]],
    donated: tuple,
    checked: bool = False,
) -> dict[str, list]:
    """What the graph's executable takes and returns (checked when it is loaded by alias)."""
    inputs = [[list(a.shape), np.dtype(a.dtype).name] for a in arrays]
    inputs.append([[len(scalars)], "float32"])
    outputs = []
    for n, k in outs:
        shape, dtype = n.avals[k]
        outputs.append([list(shape), np.dtype(jax_dtype(dtype)).name])
    if checked:
        outputs.append(SIGNATURE)
    return {"inputs": inputs, "outputs": outputs, "donated": list(donated)}


def clear_compiled_cache() -> None:
    """Forget in-memory executables (the next barrier compiles or hits the persistent cache)."""
    EXECUTABLES.clear()


def compiled_cache_size() -> int:
    return len(EXECUTABLES)
