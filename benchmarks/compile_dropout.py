"""A tiny GPT-2 with its default dropout (0.1): steady train step, eager CPU against
``torch.compile(backend="xlacache")`` (model and ``opt.step`` compiled, PyTorch's recipe).

    python benchmarks/compile_dropout.py              # ~1 min
    python benchmarks/compile_dropout.py --steps 40
    python benchmarks/compile_dropout.py --checkpoint # activation checkpointing on every block

Dropout is ``rand_like`` in AOTAutograd's forward graph: the compiled program draws it from a
key per call (``lazy/dynamo/draws.py``); before that, every such forward ran lazily. With
``--checkpoint`` (transformers' activation checkpointing, non-reentrant), the blocks' draws are
torch's RNG-state operators, which the forward's and backward's programs lower too. Reported:
the median of the steady steps (after 3), the graphs that ran lazily, and the fallback reasons.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import warnings


def child(mode: str, steps: int, checkpoint: bool) -> dict:
    warnings.simplefilter("ignore")
    import torch
    import transformers as T

    import xlacache.lazy as xl
    from xlacache.lazy import dynamo

    compiled = mode == "xlacache"
    dev = xl.device() if compiled else torch.device("cpu")
    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    model = T.GPT2LMHeadModel(cfg).to(dev).train()
    if checkpoint:
        model.activation_checkpointing_enable({"use_reentrant": False})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model, backend="xlacache") if compiled else model

    def update() -> None:
        opt.step()

    update = torch.compile(update, backend="xlacache") if compiled else update
    ids = torch.randint(0, 96, (2, 12)).to(dev)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        update()
        opt.zero_grad(set_to_none=True)
        if compiled:
            xl.sync()
        loss.item()
        times.append(time.perf_counter() - t)
    report = dynamo.report() if compiled else {}
    return {
        "steady_ms": statistics.median(times[3:]) * 1e3,
        "lazy_runs": report.get("CompiledGraphLazyRun", 0),
        "fallbacks": report.get("fallback_reasons", []),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing")
    ap.add_argument("--child", choices=["eager", "xlacache"])
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.checkpoint)))
        return
    for mode in ("eager", "xlacache"):
        cmd = [sys.executable, __file__, "--child", mode, "--steps", str(args.steps)]
        cmd += ["--checkpoint"] if args.checkpoint else []
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(f"{mode:9} steady {out['steady_ms']:6.2f} ms  lazy runs {out['lazy_runs']}  "
              f"fallbacks {out['fallbacks']}")  # fmt: skip


if __name__ == "__main__":
    main()
