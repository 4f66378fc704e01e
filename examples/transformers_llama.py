"""Fine-tune a small Hugging Face Llama (random weights, nothing downloaded) on xlacache.lazy.

XLA_PERSISTENT_CACHE_PATH=/tmp/xla_cache python examples/transformers_llama.py
XLA_PERSISTENT_CACHE_PATH=/tmp/xla_cache python examples/transformers_llama.py   # warm: loads
python examples/transformers_llama.py --bf16 --save /tmp/tiny-llama   # autocast, save_pretrained

The model keeps transformers' defaults (KV cache, SDPA attention); the environment variable
alone turns the persistent cache on, as with torch_xla. A step closure prints the loss after
each logged step's barrier, without running a second graph.
"""

from __future__ import annotations

import argparse
import time

import torch
import transformers

import xlacache.lazy as xl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--bf16", action="store_true", help='torch.autocast("xla", bfloat16)')
    ap.add_argument("--save", help="save_pretrained into this directory at the end")
    args = ap.parse_args()

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4 * args.seq,
    )
    dev = xl.device()
    model = transformers.LlamaForCausalLM(config).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, config.vocab_size, (64, args.seq))
    tracker = xl.RateTracker()

    def report(step: int, loss: torch.Tensor, t0: float) -> None:
        seconds = time.perf_counter() - t0  # the step ran: this closure runs after its sync
        print(f"step {step:3d}  loss {loss.item():.4f}  {seconds:6.2f}s  {tracker.rate():.1f}/s")

    for step in range(args.steps):
        t0 = time.perf_counter()
        batch = data[(step * 4) % 64 :][:4].to(dev)
        opt.zero_grad()
        with torch.autocast("xla", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        tracker.add(batch.shape[0])
        xl.add_step_closure(report, args=(step, loss, t0))
        xl.sync()
    m = xl.metrics
    print(
        f"compiled {m.counter_value('UncachedCompile') or 0}, "
        f"loaded from the persistent cache {m.counter_value('PersistentCacheHit') or 0}, "
        f"ran on CPU: {m.executed_fallback_ops() or 'nothing'}"
    )
    if args.save:
        model.save_pretrained(args.save)
        print(f"saved to {args.save}")


if __name__ == "__main__":
    main()
