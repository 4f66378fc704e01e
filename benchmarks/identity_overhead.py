"""What cache identity and trust cost on the hit path: signature checks and explanations.

    .venv/bin/python benchmarks/identity_overhead.py            # GPT step (compiles ~10 s)
    .venv/bin/python benchmarks/identity_overhead.py --small    # tiny model, seconds

1. Signature check on a hit of a 10 MB entry (incompressible payload, so the stored
   entry is 10 MB too): `CompilationCache.lookup` (store read, SHA-256 checks, decode,
   and with trusted keys the signature check) of an unsigned entry without trusted keys,
   against a signed one with trusted HMAC and Ed25519 keys; and `TrustedKeys.check`
   alone.
2. Explanations off on the hit path: the GPT training step's real compile arguments,
   a hit through `CompilationCache.get_or_compile` (no deserialize, then with it) with
   no explainer (XLACACHE_EXPLAIN unset) and with one; and the key itself
   (`jax_bridge.identity`: component digests). Run the script again with
   PYTHONPATH pointing at another checkout to compare key times across versions (the
   hit-path part needs this version).

Medians over --reps in one process. Results: a table on stdout, JSON in
bench-results/identity_overhead.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout's xlacache wins


def interleaved_ms(fns: dict, reps: int) -> dict[str, float]:
    """Median milliseconds of each function, timed in turn within every repetition so
    that a busy machine slows them alike."""
    for fn in fns.values():
        fn()  # warm: page cache, lazy imports
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def median_ms(fn, reps: int) -> float:
    return interleaved_ms({"fn": fn}, reps)["fn"]


def never(*_):
    raise AssertionError("not on a hit")


def signature_figures(workdir: Path, reps: int) -> dict:
    from xlacache import entry, signing
    from xlacache.cache import CompilationCache
    from xlacache.stores.local import LocalStore

    payload = os.urandom(10 * 1024 * 1024)
    store = LocalStore(workdir / "sig", fsync=False)
    figures: dict = {}
    plain_key = "00" * 32
    store.put(plain_key, entry.encode(plain_key, payload, compile_seconds=5.0))
    figures["entry_bytes"] = store.stat(plain_key).size
    plain = CompilationCache(store)
    lookups = {"lookup_unsigned_no_trust_ms": lambda: plain.lookup(plain_key)}
    checks = {}
    for n, kind in enumerate(("hmac", "ed25519"), start=1):
        private, public = signing.generate(kind)
        signer, trusted = signing.load_signing_key(private), signing.load_trusted_keys(public)
        key = f"{n:064x}"
        store.put(key, entry.encode(key, payload, compile_seconds=5.0, signer=signer))
        cache = CompilationCache(store, trusted=trusted)
        assert cache.lookup(key) is not None
        lookups[f"lookup_signed_{kind}_ms"] = lambda c=cache, k=key: c.lookup(k)
        header = store.read_header(key)
        checks[f"check_only_{kind}_ms"] = lambda t=trusted, h=header: t.check(h)
    figures.update(interleaved_ms(lookups, reps))
    figures.update(interleaved_ms(checks, reps * 10))
    return figures


def capture_compile(small: bool):
    """The arguments JAX passes compile_or_get_cached for the GPT step, and its result."""
    from jax._src import compiler

    from benchmarks.jax_gpt import Config, init_state, make_batch, make_train_step

    cfg = Config.small() if small else Config()
    captured = {}
    original = compiler.compile_or_get_cached

    def spy(*args, **kw):
        result = original(*args, **kw)
        captured.setdefault("args", (args, kw, result))
        return result

    compiler.compile_or_get_cached = spy
    try:
        state = init_state(cfg)
        make_train_step(cfg)(*state, make_batch(cfg))
    finally:
        compiler.compile_or_get_cached = original
    return captured["args"]


def hit_path_figures(workdir: Path, reps: int, small: bool) -> dict:
    from xlacache import jax_bridge

    args, _, executable = capture_compile(small)
    backend, computation, devices, options, _, executable_devices = args[:6]
    figures: dict = {}
    if hasattr(jax_bridge, "identity"):
        figures["key_ms"] = median_ms(
            lambda: jax_bridge.identity(backend, computation, devices, options), reps
        )
    else:  # another version of xlacache: only its key
        from xlacache.key import cache_key

        figures["key_ms"] = median_ms(
            lambda: cache_key(jax_bridge.key_inputs(backend, computation, devices, options)), reps
        )
        return figures
    from xlacache import explain
    from xlacache.cache import CompilationCache
    from xlacache.key import Identity
    from xlacache.stores.local import LocalStore

    ident = jax_bridge.identity(backend, computation, devices, options)
    figures["summary_ms"] = median_ms(ident.summary, min(reps, 10))
    store = LocalStore(workdir / "hit", fsync=False)
    cold = CompilationCache(store)
    cold.get_or_compile(ident.key, compile=lambda: executable, load=never,
                        serialize=lambda e: e.serialize(), identity=ident)  # fmt: skip
    figures["entry_bytes"] = store.stat(ident.key).size
    explainer = explain.Explainer(store, workdir / "hit" / explain.MISS_LOG)
    other_flags = dataclasses.replace(ident.inputs, xla_flags=("--xla_cpu_enable_fast_math=true",))
    miss = explain.Side.of_identity(Identity(other_flags, label=ident.label))
    figures["explain_miss_ms"] = median_ms(lambda: explain.explain(store, miss), min(reps, 10))

    def deserialize(payload):
        return backend.deserialize_executable(payload, executable_devices, options)

    hits = {}
    for name, ex in (("off", None), ("on", explainer)):
        cache = CompilationCache(store, explainer=ex)

        def hit(cache=cache, load=len):
            return cache.get_or_compile(ident.key, compile=never, load=load, serialize=never,
                                        identity=ident)  # fmt: skip

        hits[name] = hit
    no_load = {f"hit_no_deserialize_explain_{n}_ms": h for n, h in hits.items()}
    figures.update(interleaved_ms(no_load, reps))
    loading = {
        f"hit_with_deserialize_explain_{n}_ms": lambda h=h: h(load=deserialize)
        for n, h in hits.items()
    }
    figures.update(interleaved_ms(loading, max(3, reps // 10)))
    return figures


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="tiny model, for smoke tests")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--out", default=str(ROOT / "bench-results" / "identity_overhead.json"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xlacache-identity-") as tmp:
        workdir = Path(tmp)
        result = {"small": args.small, "reps": args.reps}
        try:
            result["signature"] = signature_figures(workdir, args.reps)
        except ImportError as exc:  # another version of xlacache without signing
            result["signature"] = {"skipped": str(exc)}
        result["hit_path"] = hit_path_figures(workdir, args.reps, args.small)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print("| figure | value |\n|---|---|")
    for section in ("signature", "hit_path"):
        for name, value in result[section].items():
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            print(f"| {section}.{name} | {shown} |")


if __name__ == "__main__":
    main()
