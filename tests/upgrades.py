"""Helpers for the upgrade tests: real entries of this jaxlib, and copies of them that claim
to come from another environment (another jaxlib, platform, devices), as a cache shared
across a JAX upgrade or across machines holds them."""

from __future__ import annotations

import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

from tests.conftest import forge_header
from xlacache import api, entry, key
from xlacache.stores.local import LocalStore

OTHER_JAXLIB = "0.0.1"
ARG = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(4, 8)  # host data: no compile


def program(x):
    """A small training-step-like program with private functions (where, log_softmax)."""
    return jnp.where(x > 0, jax.nn.log_softmax(x * 3.0), 0.0).sum()


def compile_into(path, fn=program, arg=None, captured=None, **settings) -> tuple[str, float]:
    """Run `fn` jitted with a cache at `path`; (the one key it stored, its result).
    `captured` (a list) receives the compilation's (Identity, outcome)."""
    import xlacache
    from xlacache import jax_bridge

    jax.clear_caches()
    xlacache.initialize_cache(str(path), prefetch=0, **settings)
    before = set(_keys(path))
    with jax_bridge.capture() as seen:
        result = float(jax.jit(fn)(ARG if arg is None else arg))
    if captured is not None:
        captured.extend(seen)
    api._reset_for_tests()
    jax.clear_caches()
    added = sorted(set(_keys(path)) - before)
    assert len(added) == 1, added
    return added[0], result


def _keys(path) -> list[str]:
    with LocalStore(path, readonly=True) as store:
        return [i.key for i in store.list() if not i.label.startswith(entry.ALIAS_LABEL_PREFIX)]


def read(path, key_: str) -> bytes:
    with LocalStore(path, readonly=True) as store:
        return store.peek(key_)


def foreign(blob: bytes, jaxlib: str = OTHER_JAXLIB, **fields) -> tuple[str, bytes]:
    """A copy of the entry `blob` as the same compilation under another jaxlib would have
    stored it (its key, jaxlib component, summary and producer say `jaxlib`; `fields`
    replace further header fields): (its key, its blob). Its body is this jaxlib's
    executable, which no loader of the other environment may ever be handed."""
    header = entry.decode(blob).header
    components = dict(fields.pop("components", header.components))
    components["jaxlib"] = key.component_digests(replace(_inputs(), jaxlib_version=jaxlib))[
        "jaxlib"
    ]
    summary = json.loads(json.dumps(header.summary))
    summary.setdefault("jaxlib", {})["version"] = jaxlib
    new_key = key.key_from_components(components)
    changed = {"key": new_key, "components": components, "summary": summary,
               "producer": {**header.producer, "jaxlib": jaxlib}, **fields}  # fmt: skip
    return new_key, forge_header(blob, **changed)


def _inputs() -> key.KeyInputs:
    return key.KeyInputs(b"", b"", "", "", "", (), "", ())


def store_only(path, *blobs: tuple[str, bytes], drop: tuple[str, ...] = ()) -> None:
    """Put `blobs` into the directory and remove the entries `drop`."""
    with LocalStore(path) as store:
        for k, b in blobs:
            store.put(k, b)
        for k in drop:
            store.delete(k)
