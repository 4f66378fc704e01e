"""GPT-style JAX training step: cold and warm first-step times with no cache, JAX's
own persistent cache, and xlacache, each configuration in a fresh process.

    .venv/bin/python benchmarks/jax_gpt.py                 # full size, 3 repetitions
    .venv/bin/python benchmarks/jax_gpt.py --small --reps 1   # smoke test (seconds)
    .venv/bin/python benchmarks/jax_gpt.py --profile       # + cProfile of a warm xlacache run

The model (12 layers, d=512, 8 heads, seq 128, batch 4, vocab 1024; AdamW written by
hand) is importable: `from benchmarks.jax_gpt import Config, init_state, make_train_step`.

Every measurement happens inside a child process started afresh:

- ``none``: no persistent cache; ``jax``: JAX's own cache (jax_compilation_cache_dir,
  min compile time 0, min entry size 0); ``xlacache``: ``xlacache.initialize_cache``.
  Each runs twice on one directory: ``cold`` (empty) then ``warm``.
- first step: wall time of the train step's first call, until its outputs are ready
  (tracing, lowering, compile-or-load, first execution); import+init: from the
  parent's spawn to that call (interpreter start, imports, parameter init).
- steady step: median of the next ``--steps`` calls.
- ``raw``: a child compiles the step, captures the exact arguments JAX hands
  ``compile_or_get_cached`` and writes ``executable.serialize()`` to a file; a second,
  fresh child answers its own ``compile_or_get_cached`` with
  ``backend.deserialize_executable(payload, executable_devices, compile_options)``
  (the call xlacache and JAX's cache make) and times it: the first deserialize in a
  fresh process is the "raw deserialize_and_load". That child's first step is the
  floor any cache can reach.

overhead = warm first step - steady step; ratio = overhead / raw deserialize.
Results: a markdown table on stdout, JSON in bench-results/jax_gpt.json.
"""

from __future__ import annotations

import time

_T_START = time.time()  # before importing jax, for the import+init figure

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"

# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    layers: int = 12
    d_model: int = 512
    heads: int = 8
    seq: int = 128
    batch: int = 4
    vocab: int = 1024
    lr: float = 3e-4
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8

    @classmethod
    def small(cls) -> Config:
        return cls(layers=2, d_model=64, heads=2, seq=32, batch=2, vocab=128)


def init_params(cfg: Config, seed: int = 0) -> dict:
    """Parameters as numpy arrays (no JAX computation, so no compiles before the step)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    d = cfg.d_model

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def layer():
        return {
            "ln1_g": np.ones(d, np.float32),
            "ln1_b": np.zeros(d, np.float32),
            "qkv_w": normal(d, 3 * d),
            "qkv_b": np.zeros(3 * d, np.float32),
            "proj_w": normal(d, d, std=0.02 / (2 * cfg.layers) ** 0.5),
            "proj_b": np.zeros(d, np.float32),
            "ln2_g": np.ones(d, np.float32),
            "ln2_b": np.zeros(d, np.float32),
            "fc_w": normal(d, 4 * d),
            "fc_b": np.zeros(4 * d, np.float32),
            "out_w": normal(4 * d, d, std=0.02 / (2 * cfg.layers) ** 0.5),
            "out_b": np.zeros(d, np.float32),
        }

    return {
        "tok_emb": normal(cfg.vocab, d),
        "pos_emb": normal(cfg.seq, d, std=0.01),
        "layers": [layer() for _ in range(cfg.layers)],
        "lnf_g": np.ones(d, np.float32),
        "lnf_b": np.zeros(d, np.float32),
        "head_w": normal(d, cfg.vocab),
    }


def init_state(cfg: Config, seed: int = 0):
    """(params, opt_state) on the default device; opt_state = (step, m, v)."""
    import jax
    import numpy as np

    params = init_params(cfg, seed)
    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    opt_state = (np.zeros((), np.int32), zeros, jax.tree_util.tree_map(np.copy, zeros))
    return jax.device_put(params), jax.device_put(opt_state)


def make_batch(cfg: Config, seed: int = 1):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq + 1), dtype=np.int32)


def _layer_norm(x, g, b, eps=1e-5):
    import jax.numpy as jnp

    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jnp.reciprocal(jnp.sqrt(var + eps)) * g + b


def forward(cfg: Config, params, tokens):
    import jax
    import jax.numpy as jnp

    B, T = tokens.shape
    H, D = cfg.heads, cfg.d_model
    x = params["tok_emb"][tokens] + params["pos_emb"][:T]
    mask = jnp.tril(jnp.ones((T, T), bool))
    for p in params["layers"]:
        h = _layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["qkv_w"] + p["qkv_b"], 3, axis=-1)
        q, k, v = (t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(D // H).astype(x.dtype)
        att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + y @ p["proj_w"] + p["proj_b"]
        h = _layer_norm(x, p["ln2_g"], p["ln2_b"])
        x = x + jax.nn.gelu(h @ p["fc_w"] + p["fc_b"]) @ p["out_w"] + p["out_b"]
    x = _layer_norm(x, params["lnf_g"], params["lnf_b"])
    return x @ params["head_w"]


def loss_fn(cfg: Config, params, batch):
    import jax
    import jax.numpy as jnp

    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = forward(cfg, params, inputs)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def adamw(cfg: Config, params, grads, opt_state):
    """One AdamW update (decoupled weight decay on matrices only), by hand."""
    import jax
    import jax.numpy as jnp

    step, m, v = opt_state
    step = step + 1
    t = step.astype(jnp.float32)
    m = jax.tree_util.tree_map(lambda m, g: cfg.b1 * m + (1 - cfg.b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v, g: cfg.b2 * v + (1 - cfg.b2) * g * g, v, grads)
    c1 = 1 - cfg.b1**t
    c2 = 1 - cfg.b2**t

    def update(p, m, v):
        decay = cfg.weight_decay * p if p.ndim >= 2 else 0.0
        return p - cfg.lr * ((m / c1) / (jnp.sqrt(v / c2) + cfg.eps) + decay)

    return jax.tree_util.tree_map(update, params, m, v), (step, m, v)


def make_train_step(cfg: Config):
    """The jitted step: (params, opt_state, batch) -> (params, opt_state, loss)."""
    import functools

    import jax

    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(functools.partial(loss_fn, cfg))(params, batch)
        params, opt_state = adamw(cfg, params, grads, opt_state)
        return params, opt_state, loss

    return jax.jit(train_step, donate_argnums=(0, 1))


# -- children --------------------------------------------------------------------------


def _spawn_wall() -> float:
    return float(os.environ.get("JAX_GPT_SPAWN_WALL", _T_START))


def _time_compile_or_get_cached(record: dict) -> None:
    """Wrap (whatever is installed as) compile_or_get_cached to time every call."""
    from jax._src import compiler

    inner = compiler.compile_or_get_cached

    def timed(*args, **kw):
        start = time.perf_counter()
        record.setdefault("_enter", start)
        try:
            return inner(*args, **kw)
        finally:
            record["_exit"] = time.perf_counter()
            record["compile_or_load_s"] = record.get("compile_or_load_s", 0.0) + (
                record["_exit"] - start
            )
            record["compile_or_load_calls"] = record.get("compile_or_load_calls", 0) + 1

    compiler.compile_or_get_cached = timed


def _instrument_xlacache(record: dict) -> None:
    """Time the pieces of xlacache's hit and save paths by wrapping them from outside."""
    from xlacache import api, entry, jax_bridge

    def wrap(owner, name, label):
        inner = getattr(owner, name)

        def timed(*args, **kw):
            start = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                record[label] = record.get(label, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)

    wrap(jax_bridge, "key_inputs", "xc_key_inputs_s")
    wrap(jax_bridge, "_stripped_bytecode", "xc_key_strip_bytecode_s")
    wrap(jax_bridge, "_normalized_options", "xc_key_normalize_options_s")
    wrap(jax_bridge, "_topology", "xc_key_topology_s")
    wrap(jax_bridge, "cache_key", "xc_key_sha256_s")
    wrap(jax_bridge, "module_name", "xc_module_name_s")
    decode = entry.decode

    def timed_decode(blob, key_=None, check_body=True):
        start = time.perf_counter()
        try:
            return decode(blob, key_, check_body)
        finally:
            label = "xc_decode_verify_body_s" if check_body else "xc_decode_no_verify_s"
            record[label] = record.get(label, 0.0) + time.perf_counter() - start

    entry.decode = timed_decode  # store.get verifies (sha256 of body); lookup re-parses
    wrap(entry.Entry, "payload", "xc_zstd_decompress_s")
    wrap(entry, "encode", "xc_save_encode_s")  # zstd compress + sha256 + header
    cache = api.get_cache()
    if cache is not None:
        store = cache.store
        wrap(store, "get", "xc_store_get_s")  # read + verify + index touch
        if hasattr(store, "_record_hit"):
            wrap(store, "_record_hit", "xc_sqlite_touch_s")
        wrap(store, "put", "xc_save_store_put_s")  # tmp write + fsync + rename + SQLite
        wrap(cache, "lookup", "xc_lookup_s")
        wrap(cache, "save", "xc_save_s")  # serialize + encode + put
        wrap(cache, "get_or_compile", "xc_get_or_compile_s")


def _capture_compile_args(captured: dict, replace_with=None) -> None:
    """Record what JAX hands compile_or_get_cached; optionally answer it ourselves."""
    from jax._src import compiler

    inner = compiler.compile_or_get_cached

    def hook(
        backend,
        computation,
        devices,
        compile_options,
        host_callbacks,
        executable_devices,
        *args,
        **kw,
    ):
        captured.update(
            backend=backend,
            compile_options=compile_options,
            executable_devices=executable_devices,
        )
        if replace_with is not None:
            return replace_with(backend, compile_options, executable_devices)
        start = time.perf_counter()
        exe = inner(
            backend,
            computation,
            devices,
            compile_options,
            host_callbacks,
            executable_devices,
            *args,
            **kw,
        )
        captured["compile_s"] = time.perf_counter() - start
        captured["executable"] = exe
        return exe

    compiler.compile_or_get_cached = hook


def _run_steps(cfg: Config, steps: int, record: dict, before_first_call=None) -> None:
    import jax

    params, opt_state = init_state(cfg)
    batch = make_batch(cfg)
    step = make_train_step(cfg)
    if before_first_call is not None:
        before_first_call()
    t0 = time.time()
    p0 = time.perf_counter()
    record["import_init_s"] = t0 - _spawn_wall()
    params, opt_state, loss = step(params, opt_state, batch)
    jax.block_until_ready((params, opt_state, loss))
    record["first_step_s"] = time.time() - t0
    if "_enter" in record:
        # first step = before (trace + lower) + compile-or-load + after (first execution)
        record["first_before_compile_s"] = record.pop("_enter") - p0
        record["first_after_compile_s"] = time.perf_counter() - record.pop("_exit")
    record["start_to_first_step_done_s"] = record["import_init_s"] + record["first_step_s"]
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, batch)
        jax.block_until_ready((params, opt_state, loss))
        times.append(time.perf_counter() - t)
    record["step_times_s"] = times
    record["steady_step_s"] = statistics.median(times) if times else None
    record["loss"] = float(loss)


def child_main(args) -> dict:
    cfg = Config.small() if args.small else Config()
    record: dict = {"mode": args.child, "interpreter_start_s": _T_START - _spawn_wall()}
    mode = args.child
    if mode == "jax":
        import jax

        jax.config.update("jax_compilation_cache_dir", args.cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    elif mode == "xlacache":
        import xlacache

        xlacache.initialize_cache(args.cache_dir)

    if mode in ("none", "jax", "xlacache"):
        profiler = None

        def before():
            nonlocal profiler
            _time_compile_or_get_cached(record)
            if mode == "xlacache" and args.instrument:
                _instrument_xlacache(record)
            if args.profile_out:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()

        if args.profile_out:
            # profile only the first step: stop right after it
            _run_first_profiled(cfg, args, record, before, lambda: profiler)
        else:
            _run_steps(cfg, args.steps, record, before)
        if mode == "xlacache":
            import xlacache

            record["xlacache_stats"] = xlacache.stats()
        if mode == "xlacache" and args.instrument:
            _time_file_read(record)
        return record

    if mode == "raw-prepare":
        return _raw_prepare(cfg, args, record)
    if mode == "raw-load":
        return _raw_load(cfg, args, record)
    raise SystemExit(f"unknown child mode {mode}")


def _time_file_read(record: dict) -> None:
    """Re-read the (page-cached) entry file and re-hash it: the store's raw I/O and sha256."""
    import hashlib

    from xlacache import api, entry

    store = api.get_cache().store
    paths = sorted(store.entries_dir.glob("*/*.xlac"), key=lambda p: p.stat().st_size)
    if not paths:
        return
    path = paths[-1]
    t = time.perf_counter()
    blob = path.read_bytes()
    record["xc_file_read_s"] = time.perf_counter() - t
    t = time.perf_counter()
    hashlib.sha256(blob).digest()
    record["xc_sha256_whole_entry_s"] = time.perf_counter() - t
    t = time.perf_counter()
    e = entry.decode(blob, check_body=False)
    record["xc_decode_no_hash_s"] = time.perf_counter() - t
    t = time.perf_counter()
    e.payload()
    record["xc_zstd_decompress_again_s"] = time.perf_counter() - t
    record["entry_file_bytes"] = len(blob)
    record["payload_bytes"] = e.header.payload_size


def _run_first_profiled(cfg, args, record, before, get_profiler) -> None:
    import io
    import pstats

    import jax

    params, opt_state = init_state(cfg)
    batch = make_batch(cfg)
    step = make_train_step(cfg)
    before()
    t0 = time.time()
    record["import_init_s"] = t0 - _spawn_wall()
    out = step(params, opt_state, batch)
    jax.block_until_ready(out)
    record["first_step_s"] = time.time() - t0
    profiler = get_profiler()
    profiler.disable()
    s = io.StringIO()
    ps = pstats.Stats(profiler, stream=s)
    ps.sort_stats("cumulative").print_stats(45)
    ps.sort_stats("tottime").print_stats(25)
    Path(args.profile_out).write_text(s.getvalue())


def _raw_prepare(cfg: Config, args, record: dict) -> dict:
    """Compile once; write the serialized executable; time deserialize in a warm process."""
    import jax

    params, opt_state = init_state(cfg)
    batch = make_batch(cfg)
    step = make_train_step(cfg)
    captured: dict = {}
    _capture_compile_args(captured)
    t = time.perf_counter()
    traced = step.trace(params, opt_state, batch)
    record["trace_s"] = time.perf_counter() - t
    t = time.perf_counter()
    lowered = traced.lower()
    record["lower_s"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    record["lower_compile_total_s"] = record["lower_s"] + time.perf_counter() - t
    record["compile_s"] = captured["compile_s"]
    exe = compiled.runtime_executable()
    t = time.perf_counter()
    payload = exe.serialize()
    record["serialize_s"] = time.perf_counter() - t
    record["payload_bytes"] = len(payload)
    Path(args.payload_out).write_bytes(payload)
    backend = captured["backend"]
    times = []
    for _ in range(3):
        t = time.perf_counter()
        backend.deserialize_executable(
            payload, captured["executable_devices"], captured["compile_options"]
        )
        times.append(time.perf_counter() - t)
    record["deserialize_in_warm_process_s"] = times
    # The public API, for comparison (pickle + the same deserialize + load).
    from jax.experimental import serialize_executable as se

    blob, in_tree, out_tree = se.serialize(compiled)
    times = []
    for _ in range(2):
        t = time.perf_counter()
        se.deserialize_and_load(blob, in_tree, out_tree)
        times.append(time.perf_counter() - t)
    record["jax_experimental_deserialize_and_load_s"] = times
    del jax
    return record


def _raw_load(cfg: Config, args, record: dict) -> dict:
    """A fresh process whose compile is answered by deserializing the payload file."""
    payload = Path(args.payload_out).read_bytes()
    captured: dict = {}

    def load(backend, compile_options, executable_devices):
        t = time.perf_counter()
        exe = backend.deserialize_executable(payload, executable_devices, compile_options)
        record["raw_deserialize_first_s"] = time.perf_counter() - t
        return exe

    def before():
        _capture_compile_args(captured, replace_with=load)
        _time_compile_or_get_cached(record)

    _run_steps(cfg, args.steps, record, before)
    times = []
    for _ in range(2):
        t = time.perf_counter()
        captured["backend"].deserialize_executable(
            payload, captured["executable_devices"], captured["compile_options"]
        )
        times.append(time.perf_counter() - t)
    record["raw_deserialize_again_s"] = times
    return record


# -- driver ----------------------------------------------------------------------------


def run_child(mode: str, args, cache_dir: str | None = None, **extra) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--result",
        out,
        "--steps",
        str(args.steps),
    ]
    if args.small:
        cmd.append("--small")
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    for name, value in extra.items():
        if value is True:
            cmd.append("--" + name.replace("_", "-"))
        elif value not in (None, False):
            cmd += ["--" + name.replace("_", "-"), str(value)]
    env = dict(os.environ, JAX_GPT_SPAWN_WALL=repr(time.time()))
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"child {mode} failed ({proc.returncode})")
    try:
        return json.loads(Path(out).read_text())
    finally:
        os.unlink(out)


def _summ(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "n": len(values),
        "values": values,
    }


def driver(args) -> dict:
    runs: list[dict] = []
    work = Path(tempfile.mkdtemp(prefix="jax_gpt_bench_"))
    try:
        kept: dict[str, Path] = {}  # the last repetition's cache dirs and payload
        for rep in range(args.reps):
            for mode in args.modes:
                if mode == "raw":
                    payload = work / f"payload{rep}.bin"
                    prep = run_child("raw-prepare", args, payload_out=payload)
                    load = run_child("raw-load", args, payload_out=payload)
                    runs.append({"rep": rep, "config": "raw", "phase": "prepare", **prep})
                    runs.append({"rep": rep, "config": "raw", "phase": "load", **load})
                    _progress(runs[-2])
                    _progress(runs[-1])
                    if "raw" in kept:
                        kept["raw"].unlink(missing_ok=True)
                    kept["raw"] = payload
                    continue
                cache_dir = work / f"{mode}{rep}"
                if cache_dir.exists():
                    shutil.rmtree(cache_dir)
                cache_dir.mkdir()
                for phase in ("cold", "warm"):
                    r = run_child(mode, args, str(cache_dir), instrument=mode == "xlacache")
                    runs.append({"rep": rep, "config": mode, "phase": phase, **r})
                    _progress(runs[-1])
                if mode in kept:
                    shutil.rmtree(kept[mode], ignore_errors=True)
                kept[mode] = cache_dir
        # More warm samples: further fresh processes on the last repetition's warm dirs.
        for i in range(args.warm_reps):
            for mode in args.modes:
                if mode == "raw":
                    r = run_child("raw-load", args, payload_out=kept["raw"])
                    runs.append({"rep": f"w{i}", "config": "raw", "phase": "load", **r})
                elif mode != "none":
                    r = run_child(mode, args, str(kept[mode]), instrument=mode == "xlacache")
                    runs.append({"rep": f"w{i}", "config": mode, "phase": "warm", **r})
                else:
                    continue
                _progress(runs[-1])
        profile = None
        if args.profile:
            cache_dir = kept.get("xlacache")
            if cache_dir is None:
                cache_dir = work / "profile"
                cache_dir.mkdir()
                run_child("xlacache", args, str(cache_dir))
            out = RESULTS / "jax_gpt_profile.txt"
            RESULTS.mkdir(exist_ok=True)
            r = run_child("xlacache", args, str(cache_dir), profile_out=out)
            profile = {"first_step_s": r["first_step_s"], "file": str(out)}
            print(f"cProfile of a warm xlacache first step -> {out}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summarize(runs, args, profile)


def _progress(r: dict) -> None:
    shown = {
        k: (round(v, 3) if isinstance(v, float) else v)
        for k, v in r.items()
        if k.endswith("_s") and not isinstance(v, list)
    }
    print(f"[rep {r['rep']}] {r['config']:8s} {r['phase']:7s} {shown}", file=sys.stderr)


def summarize(runs: list[dict], args, profile) -> dict:
    def pick(config, phase, field):
        return [r.get(field) for r in runs if r["config"] == config and r["phase"] == phase]

    table: dict = {}
    pairs = [(c, p) for c in ("none", "jax", "xlacache") for p in ("cold", "warm")]
    for config, phase in [*pairs, ("raw", "load")]:
        rows = [r for r in runs if r["config"] == config and r["phase"] == phase]
        if not rows:
            continue
        table[f"{config}/{phase}"] = {
            field: _summ(pick(config, phase, field))
            for field in (
                "first_step_s",
                "import_init_s",
                "start_to_first_step_done_s",
                "steady_step_s",
                "compile_or_load_s",
                "first_before_compile_s",
                "first_after_compile_s",
            )
        }
    result: dict = {
        "config": asdict(Config.small() if args.small else Config()),
        "reps": args.reps,
        "warm_reps": args.warm_reps,
        "steps": args.steps,
        "table": table,
        "runs": runs,
        "profile": profile,
    }
    raw = {
        "raw_deserialize_first_s": _summ(pick("raw", "load", "raw_deserialize_first_s")),
        "deserialize_in_warm_process_s": _summ(
            [min(v) for v in pick("raw", "prepare", "deserialize_in_warm_process_s") if v]
        ),
        "jax_experimental_deserialize_and_load_s": _summ(
            [min(v) for v in pick("raw", "prepare", "jax_experimental_deserialize_and_load_s") if v]
        ),
        "ideal_first_step_s": _summ(pick("raw", "load", "first_step_s")),
        "trace_s": _summ(pick("raw", "prepare", "trace_s")),
        "lower_s": _summ(pick("raw", "prepare", "lower_s")),
        "compile_s": _summ(pick("raw", "prepare", "compile_s")),
        "payload_bytes": (pick("raw", "prepare", "payload_bytes") or [None])[0],
    }
    result["raw"] = raw
    # Goals, per repetition: overhead = warm first step - steady step (same run).
    goals: dict = {}
    raw_first = raw["raw_deserialize_first_s"]
    for config in ("jax", "xlacache"):
        warm = [r for r in runs if r["config"] == config and r["phase"] == "warm"]
        overheads = [
            r["first_step_s"] - r["steady_step_s"]
            for r in warm
            if r.get("steady_step_s") is not None
        ]
        goals[config] = {"overhead_s": _summ(overheads)}
        if raw_first and overheads:
            goals[config]["ratio"] = statistics.median(overheads) / raw_first["median"]
            warm_proc = raw["deserialize_in_warm_process_s"]
            if warm_proc:
                goals[config]["ratio_vs_warm_process_deserialize"] = (
                    statistics.median(overheads) / warm_proc["median"]
                )
    ideal = [
        r["first_step_s"] - r["steady_step_s"]
        for r in runs
        if r["config"] == "raw" and r["phase"] == "load" and r.get("steady_step_s")
    ]
    if ideal and raw_first:
        goals["raw_load_floor"] = {
            "overhead_s": _summ(ideal),
            "ratio": statistics.median(ideal) / raw_first["median"],
        }
    if "jax/warm" in table and "xlacache/warm" in table:
        goals["xlacache_warm_not_slower_than_jax_warm"] = (
            table["xlacache/warm"]["first_step_s"]["median"]
            <= table["jax/warm"]["first_step_s"]["median"]
        )
    if "xlacache" in goals and "ratio" in goals["xlacache"]:
        goals["xlacache_ratio_within_1.2"] = goals["xlacache"]["ratio"] <= 1.2
    result["goals"] = goals
    for phase in ("warm", "cold"):
        rows = [r for r in runs if r["config"] == "xlacache" and r["phase"] == phase]
        fields_ = sorted({k for r in rows for k in r if k.startswith("xc_")})
        if phase == "cold":
            fields_ = [f for f in fields_ if f.startswith("xc_save")]
        breakdown = {f: _summ([r.get(f) for r in rows]) for f in fields_}
        breakdown["stats_load_seconds"] = _summ(
            [r.get("xlacache_stats", {}).get("load_seconds") for r in rows]
        )
        breakdown["stats_compile_seconds"] = _summ(
            [r.get("xlacache_stats", {}).get("compile_seconds") for r in rows]
        )
        result[f"xlacache_{phase}_breakdown"] = breakdown
    return result


def _fmt(s: dict | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:.2f} / {s['min']:.2f}"


def print_table(result: dict) -> None:
    t = result["table"]
    n, w = result["reps"], result["reps"] + result.get("warm_reps", 0)
    print(
        f"\nJAX GPT train step, a fresh process per run; median / min of {n} cold and "
        f"{w} warm runs, seconds\n"
    )
    print(
        "| config | cold first step | warm first step | warm: trace+lower | "
        "warm: compile-or-load | warm: first execution | steady step | import+init (warm) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    names = {
        "none": "no cache",
        "jax": "JAX's own cache",
        "xlacache": "xlacache",
        "raw": "deserialize only (floor)",
    }
    for config, name in names.items():
        cold = t.get(f"{config}/cold")
        warm = t.get(f"{config}/load" if config == "raw" else f"{config}/warm")
        if not warm:
            continue
        rows = [r for r in (cold, warm) if r]
        steady = _summ([v for r in rows for v in (r["steady_step_s"] or {}).get("values", [])])
        print(
            f"| {name} | {_fmt(cold['first_step_s']) if cold else '-'} | "
            f"{_fmt(warm['first_step_s'])} | {_fmt(warm['first_before_compile_s'])} | "
            f"{_fmt(warm['compile_or_load_s'])} | {_fmt(warm['first_after_compile_s'])} | "
            f"{_fmt(steady)} | {_fmt(warm['import_init_s'])} |"
        )
    raw = result["raw"]
    if raw["raw_deserialize_first_s"]:
        print(
            f"\nexecutable: {raw['payload_bytes'] / 1e6:.2f} MB serialized; "
            f"trace {_fmt(raw['trace_s'])}, lower {_fmt(raw['lower_s'])}, "
            f"compile {_fmt(raw['compile_s'])}"
        )
        print(
            f"raw deserialize_executable, first in a fresh process: "
            f"{_fmt(raw['raw_deserialize_first_s'])}; in the compiling process: "
            f"{_fmt(raw['deserialize_in_warm_process_s'])}; "
            f"jax.experimental deserialize_and_load: "
            f"{_fmt(raw['jax_experimental_deserialize_and_load_s'])}"
        )
        print(
            f"first step of a fresh process that loads the payload with no cache code "
            f"(floor): {_fmt(raw['ideal_first_step_s'])}"
        )
    g = result["goals"]
    print("\n| warm run | overhead = first - steady | ratio to raw deserialize |")
    print("|---|---|---|")
    for config, name in (
        ("jax", "JAX's own cache"),
        ("xlacache", "xlacache"),
        ("raw_load_floor", "deserialize only (floor)"),
    ):
        if config in g and g[config].get("overhead_s"):
            ratio = g[config].get("ratio")
            print(
                f"| {name} | {_fmt(g[config]['overhead_s'])} | "
                f"{'-' if ratio is None else f'{ratio:.2f}x'} |"
            )
    if "xlacache_warm_not_slower_than_jax_warm" in g:
        print(
            f"\ngoal 1, xlacache warm first step <= JAX cache's: "
            f"{g['xlacache_warm_not_slower_than_jax_warm']}"
        )
    if "xlacache_ratio_within_1.2" in g:
        print(
            f"goal 2, xlacache overhead within 1.2x raw deserialize: "
            f"{g['xlacache_ratio_within_1.2']} ({g['xlacache']['ratio']:.2f}x)"
        )
    for phase in ("warm", "cold"):
        b = result.get(f"xlacache_{phase}_breakdown") or {}
        if any(b.values()):
            print(f"\nxlacache {phase} run, time inside (median / min, ms):")
            for k, v in b.items():
                if v:
                    print(f"  {k:34s} {v['median'] * 1e3:9.1f} / {v['min'] * 1e3:9.1f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="tiny model, for smoke tests")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="steady steps after the first")
    p.add_argument(
        "--warm-reps",
        type=int,
        default=0,
        help="extra warm runs per cache (on the last repetition's directories)",
    )
    p.add_argument(
        "--modes",
        nargs="+",
        default=["none", "jax", "xlacache", "raw"],
        choices=["none", "jax", "xlacache", "raw"],
    )
    p.add_argument(
        "--profile", action="store_true", help="also cProfile a warm xlacache first step"
    )
    p.add_argument("--out", default=str(RESULTS / "jax_gpt.json"))
    # child-only
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    p.add_argument("--payload-out", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    p.add_argument("--instrument", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        record = child_main(args)
        record = {k: v for k, v in record.items() if _jsonable(v)}
        Path(args.result).write_text(json.dumps(record))
        return
    result = driver(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    print(f"\nJSON: {out}")


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except TypeError:
        return False


if __name__ == "__main__":
    main()
