"""AOTAutograd's own cache, kept in xlacache entries: a warm process skips AOTAutograd.

PyTorch's ``AOTAutogradCache`` serves a backend whose compilers are
``SerializableAOTDispatchCompiler``s returning an ``OutputCode``: on a hit it unpickles the
whole AOTAutograd result (its runtime wrappers and metadata, and the backend's compiled
graphs) instead of tracing the joint graph and partitioning it again. ``XlaOutputCode`` is the
backend's ``OutputCode``: the graph (pickled with its fake tensors by torch's
``GraphPickler``) and what runs it (``CompiledGraph``, whose executables come through their
own alias entries: no lowering, no XLA compile; or ``LazyGraph``).

While the backend compiles with an xlacache cache initialized (``serving``), AOTAutograd's
cache is bundled (the ``OutputCode`` in the entry), its backward compiled with its forward (so
the entry is written then), its local directory unused, and its "remote cache" is
``AotEntries``: each entry an alias entry of the xlacache cache (verified, signed, tiered,
pruned, read-only in a reader like every entry), keyed by AOTAutograd's own key (the Dynamo
graph's code, its inputs' shapes, strides and dtypes, torch's configuration and version) and
this package's fingerprint (``program.fingerprint``: the lowering code) and JAX's environment
(``executables.alias_key``). These are torch internals: rows of ``torch_internals.INTERNALS``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
from torch._inductor.output_code import OutputCode
from torch.fx import GraphModule

from xlacache import api, counters, entry, executables

from .. import metrics, torch_internals
from ..state import STATE

FORMAT = 1
# the backward compiled with the forward, so the entry is whole when written (torch 2.10+;
# on 2.9 a warm process retraces, and still loads its executables by alias)
BACKWARD_NOW = "torch._functorch.config.force_non_lazy_backward_lowering"
KEPT_META = ("val",)  # what an entry keeps of each node's ``meta`` (``lower.plan`` reads it)


@dataclass(eq=False)
class XlaOutputCode(OutputCode):
    """One compiled AOTAutograd graph as AOTAutograd's cache stores it (boxed call)."""

    gm: GraphModule | None
    what: str
    make: Callable[[GraphModule, str], Any]  # the graph -> what runs it (the backend's)
    mutates: bool = True  # AOTAutograd said the graph updates an input
    runtime: Any = None
    graph_bytes: bytes | None = None
    _boxed_call: bool = field(default=True)

    def __post_init__(self) -> None:
        if self.runtime is None and self.gm is not None:
            self.runtime = self.make(self.gm, self.what)

    def __call__(self, inputs: Sequence[Any]) -> Any:
        return self.runtime(inputs)

    def prepare_for_serialization(self) -> None:
        """(On the copy AOTAutograd pickles.) The graph as bytes, nothing that runs."""
        from torch.fx._graph_pickler import GraphPickler, Options

        nodes = list(self.gm.graph.nodes)
        metas = [n.meta for n in nodes]
        try:  # each node's value only: what the backend reads (its stack trace and provenance
            # are half the bytes and a third of the loading); the graph's code is the same
            for n, meta in zip(nodes, metas, strict=True):
                n.meta = {k: meta[k] for k in KEPT_META if k in meta}
            self.graph_bytes = GraphPickler.dumps(self.gm, Options(ops_filter=None))
        finally:
            for n, meta in zip(nodes, metas, strict=True):
                n.meta = meta
        self.gm = None
        self.runtime = None

    def post_compile(self, example_inputs: Sequence[Any], constants: Any, kwargs: Any) -> None:
        """(After a cache hit.) The graph back, with its fakes, and what runs it."""
        if self.runtime is not None:
            return
        from torch._guards import detect_fake_mode
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        mode = detect_fake_mode(example_inputs) or FakeTensorMode(shape_env=ShapeEnv())
        self.gm = GraphPickler.loads(self.graph_bytes, mode)  # type: ignore[arg-type]
        self.runtime = self.make(self.gm, self.what)
        metrics.counter_inc("CompiledGraphAotHit")
        note_mutation(self.mutates)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass


def note_mutation(mutates: bool) -> None:
    """Record, for the Dynamo graph being compiled, whether an AOTAutograd graph of it updates
    an input (``mutates``; a graph loaded from AOTAutograd's cache says what it said)."""
    seen = STATE.dynamo_compiling
    if seen is not None:
        seen["graphs"] = seen.get("graphs", 0) + 1
        seen["mutates"] = seen.get("mutates", False) or mutates


def _alias(key: str) -> str | None:
    from .program import fingerprint

    digest = hashlib.blake2b(f"aot/{FORMAT}\n{key}".encode(), digest_size=16).digest()
    return executables.alias_key(digest, fingerprint())


class AotEntries:
    """AOTAutogradCache's "remote cache" (``get``/``put`` of its base64 pickles): alias
    entries of the xlacache cache that hold AOTAutograd's entry for its key."""

    def get(self, key: str) -> dict | None:
        cache = api.get_cache()
        alias = _alias(key) if cache is not None else None
        found = cache.lookup(alias) if alias is not None else None
        if found is None:
            return None
        try:
            if not entry.is_alias(found.header):
                raise ValueError(f"entry {alias} is not an alias entry")
            record = _record(found.payload())
            if record.get("format") != FORMAT or record.get("key") != key:
                raise ValueError("the entry was stored for another AOTAutograd key")
            data = record["entry"]
            base64.b64decode(data, validate=True)
        except Exception as exc:  # noqa: BLE001 - a bad entry is a miss, never a wrong graph
            counters.record_error("alias", exc)
            return None
        return {"data": data}

    def put(self, key: str, data: dict) -> None:
        cache = api.get_cache()
        alias = _alias(key) if cache is not None else None
        if alias is None:
            return
        record = {"format": FORMAT, "key": key, "entry": data["data"]}
        cache.save_alias(alias, record, label="aot:" + key[:24])


def _record(payload: bytes) -> dict:
    import json

    record = json.loads(payload)
    if not isinstance(record, dict):
        raise ValueError("an AOTAutograd alias entry holds no record")
    return record


@contextlib.contextmanager
def serving() -> Iterator[bool]:
    """While the backend compiles: AOTAutograd's cache in xlacache entries (True), or as
    torch has it when no xlacache cache is initialized, or on torch 2.9 (False)."""
    if api.get_cache() is None or not torch_internals.has(BACKWARD_NOW):
        yield False
        return
    entries = AotEntries()
    with (
        torch._functorch.config.patch(
            bundled_autograd_cache=True,
            enable_autograd_cache=False,  # torch's local directory: not read
            enable_remote_autograd_cache=True,
            force_non_lazy_backward_lowering=True,
        ),
        mock.patch.object(AOTAutogradCache, "get_remote_cache", staticmethod(lambda: entries)),
        mock.patch.object(  # nor written: the xlacache entry is the one copy
            AOTAutogradCache, "_write_to_local_cache", staticmethod(lambda key, content: None)
        ),
    ):
        yield True
