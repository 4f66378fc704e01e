"""Hugging Face ``generate`` on the lazy device: the tiny Llama of ``tests/lazy/hf_models.py``,
greedy and beam search, each in a fresh process, against eager CPU.

    python benchmarks/lazy_generate.py                   # 16 new tokens, greedy and 3 beams
    python benchmarks/lazy_generate.py --tokens 32 --beams 4

``generate`` reads only its stopping check each token; the KV cache and the beams' state stay
pending. Reported per mode: wall seconds (the first call: every graph compiled, no persistent
cache), the graphs compiled and each one's op count (steady sizes: no token computes an earlier
one again), and whether the tokens equal eager's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lazy_gpt import run_json  # noqa: E402


def child(mode: str, tokens: int, beams: int) -> dict:
    import warnings

    import torch

    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    import xlacache.lazy as xl
    from tests.lazy.hf_models import VOCAB, build
    from xlacache.lazy import metrics

    kw = {"num_beams": beams} if mode == "beam" else {}
    outs, secs = [], []
    for dev in ("cpu", xl.device()):
        model = build("llama").eval().to(dev)
        ids = torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
        metrics.clear_all()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(dev), attention_mask=torch.ones_like(ids).to(dev),
                max_new_tokens=tokens, do_sample=False, pad_token_id=0, eos_token_id=None, **kw,
            )  # fmt: skip
        outs.append(out.cpu())
        secs.append(time.perf_counter() - t0)
    sizes = (metrics.metric_data("GraphOps") or (0, 0, [0]))[2]
    return {
        "mode": mode,
        "eager_s": round(secs[0], 3),
        "lazy_s": round(secs[1], 3),
        "graphs_compiled": metrics.counter_value("UncachedCompile") or 0,
        "graph_ops": sizes,  # each compiled graph's op count, in order
        "tokens_equal_eager": bool(torch.equal(outs[0], outs[1])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--beams", type=int, default=3)
    ap.add_argument("--child", choices=("greedy", "beam"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tokens, args.beams)))
        return
    for mode in ("greedy", "beam"):
        cmd = [sys.executable, __file__, "--child", mode]
        cmd += ["--tokens", str(args.tokens), "--beams", str(args.beams)]
        print(json.dumps(run_json(cmd)))


if __name__ == "__main__":
    main()
