"""Which serialization of a lowered program stays the same across JAX versions?

Run it with the python of each JAX version's venv (e.g. `make compat COMPAT_ARGS=--keep`
leaves them under /tmp), from the repository root, and compare the digests it prints::

    for v in 0.8.3 0.9.2 0.10.2; do
        /tmp/xlacache-compat-$v/bin/python benchmarks/program_forms.py
    done

It lowers the GPT train step of `jax_gpt.py` (small: 2 layers, d=64) and prints, for the
module JAX hands `compile_or_get_cached`, a digest of each candidate form: the pretty text
and the generic text with private functions renamed by order of appearance
(`jax_portable.canonical_text` is the generic one), that module's MLIR bytecode, and the
StableHLO portable artifact at fixed target versions (or why it cannot be made). docs/
compat.md has the results and the choice.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # jax_gpt; the installed xlacache wins


def main() -> None:
    import jax
    from jax._src import compiler
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    from jax_gpt import Config, init_state, make_batch, make_train_step

    from xlacache import jax_portable

    captured = []
    original = compiler.compile_or_get_cached

    def hook(backend, computation, *args, **kwargs):
        captured.append(computation)
        return original(backend, computation, *args, **kwargs)

    compiler.compile_or_get_cached = hook
    cfg = Config.small()
    params, opt_state = init_state(cfg)
    make_train_step(cfg)(params, opt_state, make_batch(cfg))[2].block_until_ready()
    (computation,) = captured

    def digest(data: bytes | str) -> str:
        return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]

    generic = jax_portable.canonical_text(computation)
    with mlir.make_ir_context() as context:
        renamed = ir.Module.parse(generic.decode())
        out = io.BytesIO()
        renamed.operation.write_bytecode(file=out)
        forms = {
            "generic text, renamed": digest(generic),
            "pretty text, renamed": digest(renamed.operation.get_asm(enable_debug_info=False)),
            "bytecode, renamed": digest(out.getvalue()),
        }
        for target in ("1.0.0", hlo.get_minimum_version(), hlo.get_current_version()):
            try:
                artifact = hlo.serialize_portable_artifact(renamed, target, True)
                forms[f"portable artifact {target}"] = digest(artifact)
            except Exception as exc:  # noqa: BLE001 - what cannot be made is a result too
                forms[f"portable artifact {target}"] = f"fails: {str(exc)[:60]}"
        del context
    private = [
        name
        for op in computation.body.operations
        if (name := jax_portable._symbol(op)) and jax_portable._visibility(op) == "private"
    ]
    print(json.dumps({"jax": jax.__version__, "private functions": private, **forms}, indent=1))


if __name__ == "__main__":
    main()
