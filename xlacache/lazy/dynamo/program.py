"""One AOTAutograd graph as one cached executable, called on the inputs' device arrays.

``CompiledGraph`` is what the backend gives AOTAutograd for a forward or backward graph it
can lower (``lower.unsupported`` is None). A call takes the lazy tensors' device arrays
(pending values are computed first, by the lazy executor), picks the executable for their
shapes, dtypes and placements (in memory; else through an alias entry of the persistent
cache, as the lazy executor does, keyed by the graph's code, its constants, those input
avals and the lowering code's fingerprint; else lowered and compiled, then aliased), runs it
and wraps its results as lazy tensors holding device data: no per-op tracing. ``LazyGraph``
runs a graph op by op on lazy tensors instead (lazy tracing): graphs that cannot be lowered,
and any graph whose lowering failed.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx import GraphModule

from xlacache import executables

from .. import metrics
from ..executor import materialize
from ..graph import DATA, data_node
from ..identity import lowering_fingerprint
from ..lowering import jax_dtype, precision, x64
from ..record import value
from ..tensor import LazyTensor
from . import lower

FORMAT = 2  # versions the graph key below (2: float32 precision settings)
REASONS: list[str] = []  # why graphs run lazily (fallbacks), newest last, bounded
_MAX_REASONS = 100


def note_fallback(reason: str) -> None:
    metrics.counter_inc("CompiledGraphFallback")
    REASONS.append(reason)
    del REASONS[:-_MAX_REASONS]


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


class LazyGraph:
    """Runs ``gm`` op by op on lazy tensors (boxed calling convention)."""

    _boxed_call = True

    def __init__(self, gm: GraphModule, reason: str) -> None:
        self.gm = gm
        self._boxed_call = True  # on the instance too: kept by Dynamo's wrapper of a backward
        note_fallback(reason)

    def __call__(self, *args: Any) -> Any:
        args = _unboxed(args)
        metrics.counter_inc("CompiledGraphLazyRun")
        return self.gm(*args)


def _mixed(i: int, x: Any) -> RuntimeError:
    what = f"{x.device} tensor of shape {list(x.shape)}" if isinstance(x, torch.Tensor) else x
    return RuntimeError(
        f"xlacache.lazy.dynamo: input {i} of a compiled graph is a {what}, not an xla tensor; "
        "move it with .to(xl.device())"
    )


class CompiledGraph:
    """A lowerable AOTAutograd graph: executables by input avals (boxed calling convention)."""

    _boxed_call = True

    def __init__(self, gm: GraphModule, what: str) -> None:
        with unset_fake_temporarily():  # AOTAutograd compiles under its fake mode
            self._init(gm, what)

    def _init(self, gm: GraphModule, what: str) -> None:
        self.gm = gm
        self._boxed_call = True  # on the instance too: kept by Dynamo's wrapper of a backward
        self.what = what
        self.built_under = precision.settings()
        self.fn, self.where = lower.build(gm, self.built_under)
        outs = gm.graph.output_node().args[0]
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        vals = [o.meta["val"] for o in outs if o is not None and o.op != "placeholder"]
        self.metas = [torch.empty(tuple(v.shape), dtype=v.dtype, device="meta") for v in vals]
        self.out_sig = [[list(v.shape), np.dtype(jax_dtype(v.dtype)).name] for v in vals]
        h = hashlib.blake2b(f"xlacache.lazy.dynamo/{FORMAT}\n".encode(), digest_size=16)
        h.update(gm.code.encode())
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                c = getattr(gm, n.target).detach().contiguous()
                h.update(f"{n.target} {c.dtype} {list(c.shape)}\n".encode())
                h.update(c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b"")
        self.code_digest = h.digest()
        self.executables: dict[tuple, Any] = {}
        self.fallback: LazyGraph | None = None

    def __call__(self, *args: Any) -> list:
        args = _unboxed(args)
        if self.fallback is not None:
            return self.fallback(*args)
        arrays = self._arrays(args)
        now = precision.settings()  # float32 precision: part of what an executable computes
        spec = (tuple((a.shape, a.dtype, a.sharding) for a in arrays), *now.values())
        exe = self.executables.get(spec)
        if exe is None:
            try:
                exe = self._compile(arrays, now)
            except Exception as e:  # noqa: BLE001 - never a wrong number: run it lazily
                self.fallback = LazyGraph(self.gm, f"{self.what}: {e}")
                warnings.warn(
                    f"xlacache.lazy.dynamo: a {self.what} graph runs lazily: {e}", stacklevel=2
                )
                return self.fallback(*args)
            self.executables[spec] = exe
        t0 = time.perf_counter_ns()
        with x64():
            results = exe(*arrays)
        metrics.metric_add("CompiledGraphExecuteTime", time.perf_counter_ns() - t0)
        metrics.counter_inc("CompiledGraphExecute")
        out: list[Any] = []
        for w in self.where:
            if w is None:
                out.append(None)
            elif w[0] == "in":
                out.append(args[w[1]])
            else:
                meta = self.metas[w[1]]
                out.append(LazyTensor(meta, (data_node(results[w[1]], meta.dtype), 0)))
        return out

    def _arrays(self, args: list) -> list:
        pending = []
        for i, a in enumerate(args):
            if not isinstance(a, LazyTensor):
                raise _mixed(i, a)
            if value(a)[0].op is not DATA:
                pending.append(a)
        if pending:
            materialize(pending)
        return [value(a)[0].data for a in args]

    def _signature(self, arrays: list) -> dict[str, list]:
        inputs = [[list(a.shape), np.dtype(a.dtype).name] for a in arrays]
        return {"inputs": inputs, "outputs": self.out_sig, "donated": []}

    def _compile(self, arrays: list, now: dict[str, str]) -> Callable[..., Any]:
        for a in arrays:
            if len(a.sharding.device_set) != 1:
                raise NotImplementedError("inputs placed on several devices (SPMD)")
        h = hashlib.blake2b(self.code_digest, digest_size=16)
        h.update(f"fp32 {sorted(now.items())};".encode())
        fn = self.fn if now == self.built_under else lower.build(self.gm, now)[0]
        for a in arrays:
            h.update(f"{tuple(a.shape)} {np.dtype(a.dtype).name};".encode())
        signature = self._signature(arrays)
        t0 = time.perf_counter_ns()
        alias = executables.alias_key(h.digest(), fingerprint())
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
                lowered = jax.jit(fn, keep_unused=True).lower(*arrays)
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
