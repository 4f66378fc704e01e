"""The lazy runtime's mutable state, in one object: ``STATE``, and ``reset``.

Every module of the runtime keeps what changes while a program runs here (counters, the
compiled-graph cache, dispatch routes, the RNG stream, step closures, the job joined...), so
that a reader finds it in one place and ``reset()`` can put the runtime back to the state a
new process has (``xlacache.lazy.reset_runtime``).

Containers are made once and cleared in place, never replaced: hot paths bind them to module
names (``_ROUTES = STATE.routes``) and read scalars as attributes of ``STATE`` (a slotted
dataclass: one attribute load, as cheap as the one-element lists it replaces).

``reset()`` keeps what a new process could not have otherwise, or what would make a wrong
number if forgotten (fields marked ``KEEP``): live tensors and their identifying storages
(pending values still run at the next barrier), the installed dispatcher, the trace lock, the
``jax.distributed`` job this process joined and its mesh (JAX cannot join twice), the
cross-process sequence numbers (every process must keep counting alike), SPMD's latch and
global mesh (graph keys cover placements once SPMD is in use), and the step-closure thread.
Pure memo tables of exact values (op and aval codes, leaf digests, encodings of named
values, sharding codes, functional ops) stay in their modules: they hold nothing a program can
observe; so do the counters that must only grow (tensors' creation order, toposort's visit
marks: a restart could confuse a live tensor or node with a new one).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KEEP = {"keep": True}  # field metadata: ``reset`` leaves the field alone


def _unset(func: Any, args: tuple, kwargs: dict) -> Any:
    raise RuntimeError("xlacache.lazy: no dispatcher installed (import xlacache.lazy)")


def _keep(factory: Callable[[], Any]) -> Any:
    return field(default_factory=factory, metadata=KEEP)


@dataclass(eq=False, slots=True)
class RuntimeState:
    """Everything the lazy runtime changes as it runs (see the module docstring)."""

    # tracing (tensor.py): one tracer at a time (the training loop and MpDeviceLoader's thread)
    lock: threading.RLock = _keep(threading.RLock)
    dispatcher: Callable[[Any, tuple, dict], Any] = field(default=_unset, metadata=KEEP)
    trace_ns: int = 0  # ns spent in dispatch since the last barrier
    traced_ops: int = 0  # top-level ops recorded since the last barrier
    untraced: bool = False  # the top-level op being dispatched records nothing
    depth: int = 0  # dispatch depth (> 1: an op that another op dispatched)
    gc_deferred: tuple | None = None  # (thresholds before, during) while tracing
    # trim.py: a cap on the pending graph, looked at every ``trim_every`` top-level ops
    trim_check: Callable[[], None] = field(default=lambda: None, metadata=KEEP)
    trim_every: int = field(default=5000, metadata=KEEP)  # XLA_TRIM_GRAPH_CHECK_FREQUENCY
    trim_size: int = field(default=100_000, metadata=KEEP)  # XLA_TRIM_GRAPH_SIZE (nodes)
    trim_at: int = 0  # ``traced_ops`` at the next look
    trim_base: int = 0  # nodes made before this number are in no pending graph past the cap
    # the live registry (tensor.py): weak references to every tensor's state cell
    refs: list = _keep(list)
    refs_limit: int = field(default=1 << 16, metadata=KEEP)
    storages: weakref.WeakKeyDictionary = _keep(weakref.WeakKeyDictionary)
    fake_address: int = field(default=1 << 60, metadata=KEEP)  # non-canonical: any access faults
    # dispatch.py: how each op is dispatched, by id(op); the version of the tables it came from
    routes: dict = field(default_factory=dict)
    routes_version: int = -1
    warned_fallback: set = field(default_factory=set)  # ops whose CPU fallback warned
    warned_cpu_autocast: bool = False  # autocast.py: CPU autocast over device tensors warned
    # record.py: what recording knows about each op; memoized meta-kernel results
    ops: dict = field(default_factory=dict)
    meta_cache: dict = field(default_factory=dict)
    # special.py: small constants served without recording (the autograd seed)
    constants: dict = field(default_factory=dict)
    # executor.py: the compiled-graph LRU (set by the executor at import; cleared, not replaced)
    executables: Any = field(default=None, metadata=KEEP)
    allow_execution: bool = True  # False inside compile(full_graph=True)
    # rng.py: the device stream, one (seed, epoch) leaf per trace epoch
    torch_seed: int | None = None  # torch.initial_seed() the stream was started from
    rng_seed: int = 0
    rng_epoch: int = 0
    rng_index: int = 0
    rng_leaf: Any = None
    rng_calls: int = 0  # compiled graphs' draws: one key per call (rng.compiled_key)
    # closures.py: step closures queued for the next sync; the asynchronous ones' thread
    closures: list = field(default_factory=list)
    closure_error: BaseException | None = None
    closure_queue: Any = field(default=None, metadata=KEEP)
    # metrics.py: counters by name; timings: name -> [count, accumulator, deque of samples]
    counters: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    # distributed/: the job joined, its process mesh, cross-process sequence numbers
    job: Any = field(default=None, metadata=KEEP)
    process_mesh: Any = field(default=None, metadata=KEEP)
    sequences: dict = _keep(dict)  # agreement: domain -> itertools.count
    last_sequence: dict = _keep(dict)  # agreement: domain -> last number used
    rounds: dict = _keep(dict)  # rendezvous: tag -> rounds so far
    stdout_filter: Any = field(default=None, metadata=KEEP)  # quiet: Gloo's lines kept out
    # dynamo/: why graphs ran lazily (newest last, bounded), fallbacks warned about, the
    # decompositions AOTAutograd gets (built at first use)
    dynamo_reasons: list = field(default_factory=list)
    dynamo_warned: set = field(default_factory=set)
    dynamo_decompositions: dict = field(default_factory=dict)
    dynamo_compiling: dict | None = None  # while the backend compiles: what its graphs do
    # spmd/: whether SPMD is in use (then graph keys cover placements), the global mesh
    spmd: bool = field(default=False, metadata=KEEP)
    global_mesh: Any = field(default=None, metadata=KEEP)

    def reset(self) -> None:
        """Back to a new process's state, but for the ``KEEP`` fields; containers are cleared
        in place (modules hold them by name), the compiled-graph cache emptied."""
        with self.lock:
            for f in dataclasses.fields(self):
                if f.metadata.get("keep"):
                    continue
                current = getattr(self, f.name)
                if f.default_factory is not dataclasses.MISSING:
                    current.clear()
                else:
                    setattr(self, f.name, f.default)
            if self.executables is not None:
                self.executables.clear()


STATE = RuntimeState()
