"""A GPT-style training step in plain JAX, run once through xlacache.

    python examples/jax_train_step.py CACHE_DIR [--layers 4] [--d-model 256]

Prints one JSON line: time to the first finished step, a steady step, and
xlacache.stats(). Run it twice with the same CACHE_DIR: the second run loads the
compiled step instead of compiling it.
"""

from __future__ import annotations

import argparse
import json
import time

START = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import xlacache  # noqa: E402


def init(key, layers: int, d: int, vocab: int, seq: int) -> dict:
    keys = iter(jax.random.split(key, 4 * layers + 2))
    dense = lambda m, n: jax.random.normal(next(keys), (m, n)) * (1 / m**0.5)  # noqa: E731
    return {
        "embed": dense(vocab, d),
        "pos": jnp.zeros((seq, d)),
        "blocks": [
            {
                "qkv": dense(d, 3 * d),
                "out": dense(d, d),
                "up": dense(d, 4 * d),
                "down": dense(4 * d, d),
                "ln1": jnp.ones(d),
                "ln2": jnp.ones(d),
            }
            for _ in range(layers)
        ],  # fmt: skip
    }


def norm(x, g):
    return g * (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)


def loss_fn(params, tokens, heads: int):
    x = params["embed"][tokens] + params["pos"]
    b, t, d = x.shape
    causal = jnp.tril(jnp.ones((t, t), bool))
    for blk in params["blocks"]:
        q, k, v = jnp.split(norm(x, blk["ln1"]) @ blk["qkv"], 3, axis=-1)
        split = lambda a: a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
        att = split(q) @ split(k).transpose(0, 1, 3, 2) / (d // heads) ** 0.5
        att = jax.nn.softmax(jnp.where(causal, att, -1e9), axis=-1)
        x = x + (att @ split(v)).transpose(0, 2, 1, 3).reshape(b, t, d) @ blk["out"]
        x = x + jax.nn.gelu(norm(x, blk["ln2"]) @ blk["up"]) @ blk["down"]
    logits = x @ params["embed"].T
    labels = jnp.roll(tokens, -1, axis=1)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1))


def make_step(heads: int, lr: float = 1e-3):
    @jax.jit
    def step(params, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("cache_dir")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    args = p.parse_args()

    xlacache.initialize_cache(args.cache_dir)
    params = init(jax.random.key(0), args.layers, args.d_model, args.vocab, args.seq)
    tokens = jax.random.randint(jax.random.key(1), (args.batch, args.seq), 0, args.vocab)
    step = make_step(args.heads)
    t0 = time.perf_counter()
    params, loss = step(params, tokens)
    loss.block_until_ready()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    params, loss = step(params, tokens)
    loss.block_until_ready()
    steady = time.perf_counter() - t0
    print(json.dumps({
        "first_step_s": first, "steady_step_s": steady, "loss": float(loss),
        "process_s": time.perf_counter() - START, "stats": xlacache.stats(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
