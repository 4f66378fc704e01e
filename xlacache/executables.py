"""Executables by alias: load a program's executable without lowering it.

The persistent key of a compilation is computed from its lowered module, so a warm process
normally lowers each program only to find out its key. A runtime that can name its programs
exactly before lowering them (the lazy runtime: a digest of its IR graph) stores, next to
each executable, an *alias entry* mapping that name, together with everything else the key
depends on, to the key; a later process loads the executable through the alias::

    alias = executables.alias_key(program=graph_digest, lowering=code_fingerprint)
    program = executables.load(alias, signature) if alias else None
    if program is None:                                  # no alias yet: lower and compile
        with executables.capture() as compiled:
            program = jax.jit(f, keep_unused=True).lower(*args).compile()
        if alias:
            executables.store(alias, compiled, signature)
    outputs = program(*args)

What must be exact is split this way: the caller names its program (``program``: a digest
that differs whenever the program differs) and the code that lowers it (``lowering``: a
fingerprint that changes with that code, including how it calls ``jax.jit``); xlacache adds
JAX's and jaxlib's versions and JAX's whole configuration (which decide the lowered module
and the compile options with the program), the device the program runs on, and this
process's environment components of the key (entry format, jaxlib, platform, devices and
topology, codegen XLA flags); see `xlacache.key.alias_key`. Loading through an alias also
checks that the stored executable's key components are the ones recorded with the alias and
match this process, that it loads on the expected device, and that its parameters and results
are the caller's ``signature``; anything else is a miss, and the caller lowers and compiles.

A program over several devices (SPMD, a mesh across the processes of a job) passes its
device assignment as ``devices`` to `alias_key` and `load`, and its compiled jit function to
`store`: the alias record then also carries the placement (mesh and partition spec) of each
input and output, and `load` returns a `ShardedProgram` that places inputs and assembles
global outputs as the compiled function would, after checking the executable's per-device
shapes and XLA shardings against the record. Every process of a job computes the same alias
key for a program over the job's devices.

Alias entries live in the same stores as executables (local, remote through the tiered
store, GCS), are verified, signed and pruned like them, and a read-only process only reads
them. They are listed with the label ``alias:<module name>``. Counted in `xlacache.stats()`
as ``alias_hits``, ``alias_misses`` and ``alias_writes``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from xlacache import api, counters, jax_bridge, jax_programs
from xlacache import key as key_mod
from xlacache.jax_programs import Program, ShardedProgram

__all__ = ["Program", "ShardedProgram", "alias_key", "capture", "load", "store"]


def alias_key(program: bytes, lowering: str, devices: Sequence[Any] | None = None) -> str | None:
    """The alias key of `program` lowered by code with fingerprint `lowering`, compiled in
    this process's environment for `devices` (its device assignment; default: one device);
    None when no cache is initialized or the environment cannot be described exactly."""
    if api.get_cache() is None:
        return None
    try:
        env = jax_programs.environment(devices)
        parts = {"program": bytes(program), "lowering": lowering.encode(), **env.parts}
        return key_mod.alias_key(parts, env.digests)
    except jax_programs.NotDescribable:
        return None
    except Exception as exc:  # noqa: BLE001 - no alias is only slower
        counters.record_error("alias", exc)
        return None


def load(
    alias: str, signature: Mapping[str, Any], devices: Sequence[Any] | None = None
) -> Program | ShardedProgram | None:
    """The executable the alias entry `alias` names, ready to call, or None (a miss).

    `signature` is ``{"inputs": [[dims, dtype], ...], "outputs": [...], ...}`` (dtype names
    as numpy spells them; global shapes for a program over several devices; further keys are
    compared with the stored record as they are). `devices` as for `alias_key`.
    """
    cache = api.get_cache()
    if cache is None:
        return None
    try:
        env = jax_programs.environment(devices)
    except Exception as exc:  # noqa: BLE001
        if not isinstance(exc, jax_programs.NotDescribable):
            counters.record_error("alias", exc)
        return None
    want = _normalized(signature)
    sharded = len(env.device_ids) > 1
    placed: dict[str, list] = {}

    def accept(record: dict, header: Any) -> None:
        if record.get("format") != key_mod.ALIAS_FORMAT:
            raise ValueError(f"alias record format {record.get('format')!r}")
        if record.get("signature") != want:
            raise ValueError("the alias was stored for another program signature")
        recorded = record.get("components") or {}
        for name in key_mod.COMPONENTS:
            if header.components.get(name) != recorded.get(name):
                raise ValueError(f"the target's {name} component is not the recorded one")
        for name in key_mod.ENVIRONMENT_COMPONENTS:
            if header.components.get(name) != env.digests[name]:
                raise ValueError(f"the target's {name} component differs in this process")
        if header.context.get("device_ids") != env.device_ids:
            raise ValueError(f"the target loads on devices {header.context.get('device_ids')}")
        if sharded:
            placements = record.get("placements")
            if not isinstance(placements, dict):
                raise ValueError("the alias records no placements for a multi-device program")
            placed["inputs"], placed["outputs"] = jax_programs.shardings_from(placements)

    def verify(executable: Any) -> None:
        if sharded:
            jax_programs.check_placements(executable, want, placed["inputs"], placed["outputs"])
        else:
            jax_programs.check_signature(executable, want)

    executable = cache.resolve_alias(alias, accept, jax_bridge.load_entry, verify)
    if executable is None:
        return None
    if sharded:
        shapes = [tuple(dims) for dims, _ in want["outputs"]]
        return ShardedProgram(executable, placed["inputs"], placed["outputs"], shapes)
    return Program(executable, env.device)


@contextlib.contextmanager
def capture() -> Iterator[list]:
    """The compilations this thread sends through the cache inside the block, for `store`."""
    with jax_bridge.capture() as captured:
        yield captured


def store(alias: str, captured: list, signature: Mapping[str, Any], compiled: Any = None) -> bool:
    """Store the alias entry `alias` -> the key of the one executable compiled (or loaded)
    in `captured` (from `capture`), if that executable is in the store. `compiled` (the
    ``jax.stages.Compiled`` program) gives the placements of a multi-device program. Returns
    whether an alias was stored (never in a read-only process)."""
    cache = api.get_cache()
    if cache is None or len(captured) != 1:
        return False
    ident, outcome = captured[0]
    if outcome not in ("hit", "stored"):
        return False  # the executable itself is not stored: an alias would name nothing
    record = {
        "format": key_mod.ALIAS_FORMAT,
        "target": ident.key,
        "components": ident.components,
        "signature": _normalized(signature),
    }
    if compiled is not None:
        try:
            placements = jax_programs.placements_of(compiled)
        except jax_programs.NotDescribable:
            return False  # loaded without lowering only what is described exactly
        except Exception as exc:  # noqa: BLE001 - no alias is only slower
            counters.record_error("alias", exc)
            return False
        if placements is not None:
            record["placements"] = placements
    platform = ident.inputs.platform
    return cache.save_alias(alias, record, label=ident.label, platform=platform)


def _normalized(signature: Mapping[str, Any]) -> dict:
    return json.loads(json.dumps(signature, sort_keys=True))
