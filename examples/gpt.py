"""Train a GPT-style model on synthetic tokens with xlacache.lazy (or eagerly on CPU).

python examples/gpt.py                          # small, a few seconds
python examples/gpt.py --layers 12 --d 512 --heads 8 --seq 128 --batch 4 --vocab 1024
python examples/gpt.py --cache /tmp/xla_cache   # persistent compilation cache
python examples/gpt.py --eager                  # plain PyTorch on CPU, for comparison
python examples/gpt.py --json                   # every figure as one JSON line
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

T0 = time.perf_counter()
IDLE_STEPS = 3  # extra steps traced with the device idle (not in the losses or step times)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, seq: int, dropout: float):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.tok.weight = self.head.weight
        for name, p in self.named_parameters():
            if p.dim() > 1:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--cache", "--cache-dir", dest="cache", default=None, help="xlacache directory")
    ap.add_argument("--eager", action="store_true", help="plain PyTorch on CPU")
    ap.add_argument("--json", action="store_true", help="print one JSON line of results")
    args = ap.parse_args()

    if args.eager:
        dev, xl = torch.device("cpu"), None
    else:
        import xlacache
        import xlacache.lazy as xl

        if args.cache:
            xlacache.initialize_cache(args.cache)
        dev = xl.device()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d, args.heads, args.layers, args.seq, args.dropout).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1))

    losses, step_times = [], []
    first_step_at = None
    idle_traces: list[tuple[float, float]] = []  # (wall, process CPU) seconds
    for step in range(args.steps + (IDLE_STEPS if xl is not None else 0)):
        if step >= args.steps:  # more steps with the device idle: tracing cost alone
            xl.wait_device_ops()
            t_iso, c_iso = time.perf_counter(), time.process_time()
        t = time.perf_counter()
        batch = data[step % args.steps].to(dev)
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if xl is not None:
            if step >= args.steps:
                idle_traces.append((time.perf_counter() - t_iso, time.process_time() - c_iso))
                xl.sync()
                loss.item()
                continue
            xl.sync()
        losses.append(loss.item())  # waits for the step to finish
        step_times.append(time.perf_counter() - t)
        if first_step_at is None:
            first_step_at = time.perf_counter() - T0
        if not args.json:
            print(f"step {step:3d}  loss {losses[-1]:.4f}  {step_times[-1] * 1000:8.1f} ms")

    steady = statistics.median(step_times[2:]) if len(step_times) > 3 else step_times[-1]
    result = {
        "mode": "eager" if args.eager else "lazy",
        "time_to_first_step_s": first_step_at,
        "first_step_s": step_times[0],
        "steady_step_s": steady,
        "total_s": time.perf_counter() - T0,
        "losses": losses,
        "loss": losses[-1],
    }
    if xl is not None:
        m = xl.metrics
        trace = m.metric_data("TraceTime")
        ops = m.counter_value("TracedOps") or 0
        compile_t = m.metric_data("CompileTime")
        # steady-state tracing: the median step after the first two (shape inference cached)
        tr = statistics.median(trace[2][2:]) / 1e9 if trace and len(trace[2]) > 2 else 0.0
        result.update(
            compiles=m.counter_value("UncachedCompile") or 0,
            persistent_hits=m.counter_value("PersistentCacheHit") or 0,
            cached_compiles=m.counter_value("CachedCompile") or 0,
            compile_s=(compile_t[1] / 1e9) if compile_t else 0.0,
            lowering_s=(m.metric_data("LoweringTime") or (0, 0))[1] / 1e9,
            trace_per_step_s=tr,  # overlapped with the previous step executing
            traced_ops_per_step=ops / max(1, trace[0] if trace else 1),
            trace_per_op_us=tr * 1e6 / max(1.0, ops / max(1, trace[0] if trace else 1)),
        )
        import xlacache

        result["stats"] = xlacache.stats()
        # the fastest of the idle steps: the others were slowed down by something else
        isolated_trace = min(w for w, _ in idle_traces)
        isolated_cpu = min(c for _, c in idle_traces)
        result["trace_idle_device_s"] = isolated_trace
        result["trace_per_op_idle_us"] = isolated_trace * 1e6 / result["traced_ops_per_step"]
        result["trace_idle_cpu_s"] = isolated_cpu
        result["trace_per_op_idle_cpu_us"] = isolated_cpu * 1e6 / result["traced_ops_per_step"]
        result["trace_share_of_steady_step"] = isolated_trace / steady
    if args.json:
        print(json.dumps(result))
    else:
        print(summary(result))


def summary(result: dict) -> str:
    """The run in a few lines for people (--json prints every figure)."""
    lines = [
        f"{result['mode']}: final loss {result['loss']:.4f}; first step "
        f"{result['first_step_s']:.2f} s, then {result['steady_step_s'] * 1000:.1f} ms a step; "
        f"first step done {result['time_to_first_step_s']:.2f} s after start",
    ]
    if "compiles" in result:
        compiled, loaded = result["compiles"], result["persistent_hits"]
        done = [f"compiled {compiled} program{'s' * (compiled != 1)}"] if compiled else []
        done += [f"loaded {loaded} from the persistent cache"] if loaded else []
        what = " and ".join(done) or "compiled nothing and loaded nothing"
        lines.append(f"{what} ({result['compile_s']:.2f} s getting programs ready)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
