"""Training scripts for `compat.py --upgrade`: the JAX GPT and a Flax NNX + optax LM.

Run in a compat venv (the installed xlacache, JAX, Flax) from a folder holding this file
and `jax_gpt.py`::

    python compat_models.py gpt CACHE_DIR [--steps 3]     # "-" as CACHE_DIR: no cache
    python compat_models.py flax CACHE_DIR

Each builds its model from a config (nothing downloaded), initializes it on the device (as a
training script does: several small programs), trains `--steps` steps, and prints one JSON
line: jax version, xlacache's misses (programs compiled) and hits, every loss as a hex
float, and a digest of the final parameters.
"""

from __future__ import annotations

import argparse
import hashlib
import json

import numpy as np


def gpt(steps: int) -> tuple[list[float], list]:
    """The GPT of jax_gpt.py (small: 2 layers, d=64), parameters drawn on the device."""
    import jax
    import jax.numpy as jnp
    from jax_gpt import Config, init_params, make_batch, make_train_step

    cfg = Config.small()
    shapes = init_params(cfg)  # numpy: only the shapes (and which are ones or zeros) are used
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 64))

    def draw(leaf: np.ndarray):
        if not leaf.any() or (leaf == 1).all():
            return jnp.full(leaf.shape, leaf.flat[0], jnp.float32)
        return jax.random.normal(next(keys), leaf.shape, jnp.float32) * 0.02

    params = jax.tree_util.tree_map(draw, shapes)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    opt_state = (jnp.zeros((), jnp.int32), zeros, jax.tree_util.tree_map(jnp.zeros_like, params))
    step = make_train_step(cfg)
    losses = []
    for i in range(steps):
        params, opt_state, loss = step(params, opt_state, make_batch(cfg, seed=i))
        losses.append(float(loss))
    return losses, jax.tree_util.tree_leaves(params)


def flax_lm(steps: int) -> tuple[list[float], list]:
    """A small Transformer LM in Flax NNX, trained with optax.adamw."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    vocab, d, heads, layers, seq, batch = 128, 64, 4, 2, 32, 4
    listed = getattr(nnx, "List", list)  # Flax 0.12 holds submodules in nnx.List

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.ln1 = nnx.LayerNorm(d, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(
                num_heads=heads, in_features=d, decode=False, rngs=rngs
            )
            self.ln2 = nnx.LayerNorm(d, rngs=rngs)
            self.up = nnx.Linear(d, 4 * d, rngs=rngs)
            self.down = nnx.Linear(4 * d, d, rngs=rngs)

        def __call__(self, x, mask):
            x = x + self.attn(self.ln1(x), mask=mask)
            return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))

    class LM(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Embed(vocab, d, rngs=rngs)
            self.pos = nnx.Param(jax.random.normal(rngs.params(), (seq, d)) * 0.01)
            self.blocks = listed([Block(rngs) for _ in range(layers)])
            self.ln = nnx.LayerNorm(d, rngs=rngs)
            self.head = nnx.Linear(d, vocab, rngs=rngs)

        def __call__(self, tokens):
            x = self.embed(tokens) + self.pos[...][: tokens.shape[1]]
            mask = nnx.make_causal_mask(tokens)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln(x))

    model = LM(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(3e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, tokens):
        def loss_fn(model):
            logits = model(tokens[:, :-1])
            labels = tokens[:, 1:]
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        tokens = jnp.asarray(rng.integers(0, vocab, (batch, seq + 1), dtype=np.int32))
        losses.append(float(train_step(model, optimizer, tokens)))
    return losses, jax.tree_util.tree_leaves(nnx.state(model, nnx.Param))


MODELS = {"gpt": gpt, "flax": flax_lm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("cache", help="xlacache directory, or - for none")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    import jax

    import xlacache

    if args.cache != "-":
        xlacache.initialize_cache(args.cache)
    losses, leaves = MODELS[args.model](args.steps)
    digest = hashlib.sha256()
    for leaf in leaves:
        digest.update(np.asarray(leaf).tobytes())
    stats = xlacache.stats()
    print(json.dumps({
        "jax": jax.__version__, "misses": stats["misses"], "hits": stats["hits"],
        "errors": stats["errors"], "losses": [x.hex() for x in losses],
        "params": digest.hexdigest(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
