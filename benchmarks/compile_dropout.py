"""A tiny GPT-2 with its default dropout (0.1): steady train step, eager CPU against
``torch.compile(backend="xlacache")`` (model and ``opt.step`` compiled, PyTorch's recipe).

    python benchmarks/compile_dropout.py              # ~1 min
    python benchmarks/compile_dropout.py --steps 40
    python benchmarks/compile_dropout.py --checkpoint # activation checkpointing on every block
    python benchmarks/compile_dropout.py --diffusion  # a denoiser: randint timesteps, randn noise

Dropout is ``rand_like`` in AOTAutograd's forward graph: the compiled program draws it from a
key per call (``lazy/dynamo/draws.py``); before that, every such forward ran lazily. With
``--checkpoint`` (transformers' activation checkpointing, non-reentrant), the blocks' draws are
torch's RNG-state operators, which the forward's and backward's programs lower too. With
``--diffusion``, a denoiser's step as diffusion models train (the sampling of timesteps with
``randint`` and of noise inside the compiled function): ``randint`` is drawn on the host at
each call, as the lazy runtime draws it. Reported:
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


def gpt2(dev: object, checkpoint: bool) -> tuple:
    """A tiny GPT-2 with its default dropout: its loss on a batch, and its parameters."""
    import torch
    import transformers as T

    cfg = T.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    model = T.GPT2LMHeadModel(cfg).to(dev).train()
    if checkpoint:
        model.activation_checkpointing_enable({"use_reentrant": False})
    ids = torch.randint(0, 96, (2, 12)).to(dev)
    return (lambda m: m(input_ids=ids, labels=ids).loss), model


def denoiser(dev: object) -> tuple:
    """A denoising step as diffusion models train: timesteps from ``randint``, noise from
    ``randn_like``, an MLP predicting the noise."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    net = nn.Sequential(nn.Linear(33, 128), nn.SiLU(), nn.Linear(128, 128), nn.SiLU())
    net.append(nn.Linear(128, 32)).to(dev)
    keep = torch.linspace(0.999, 0.01, 1000).to(dev)  # the signal kept at each timestep
    x0 = torch.randn(64, 32).to(dev)

    def loss(m: nn.Module) -> torch.Tensor:
        t = torch.randint(0, 1000, (x0.shape[0],), device=x0.device)
        noise = torch.randn_like(x0)
        a = keep[t][:, None]
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return F.mse_loss(m(torch.cat([xt, t[:, None].float() / 1000], dim=1)), noise)

    return loss, net


def child(mode: str, steps: int, checkpoint: bool, diffusion: bool) -> dict:
    warnings.simplefilter("ignore")
    import torch

    import xlacache.lazy as xl
    from xlacache.lazy import dynamo

    compiled = mode == "xlacache"
    dev = xl.device() if compiled else torch.device("cpu")
    torch.manual_seed(0)
    loss_of, model = denoiser(dev) if diffusion else gpt2(dev, checkpoint)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = model
    if compiled and diffusion:  # the sampling is part of the compiled function
        loss_of = torch.compile(loss_of, backend="xlacache")
    elif compiled:
        forward = torch.compile(model, backend="xlacache")

    def update() -> None:
        opt.step()

    update = torch.compile(update, backend="xlacache") if compiled else update
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = loss_of(forward)
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
    ap.add_argument("--diffusion", action="store_true", help="a denoiser's step, sampled")
    ap.add_argument("--child", choices=["eager", "xlacache"])
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.checkpoint, args.diffusion)))
        return
    for mode in ("eager", "xlacache"):
        cmd = [sys.executable, __file__, "--child", mode, "--steps", str(args.steps)]
        cmd += ["--checkpoint"] if args.checkpoint else []
        cmd += ["--diffusion"] if args.diffusion else []
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(f"{mode:9} steady {out['steady_ms']:6.2f} ms  lazy runs {out['lazy_runs']}  "
              f"fallbacks {out['fallbacks']}")  # fmt: skip


if __name__ == "__main__":
    main()
