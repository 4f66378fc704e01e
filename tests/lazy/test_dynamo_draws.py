"""Random draws in compiled graphs (``xlacache/lazy/dynamo/draws.py``): dropout and the other
draws run in the programs, and a checkpointed region that draws recomputes the same numbers in
its backward, whichever of its graphs compiled and whichever ran lazily."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import xlacache.lazy as xl
from xlacache.lazy import metrics, rng

DEV = xl.device()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _count(name: str) -> int:
    return metrics.counter_value(name) or 0


def _counts() -> tuple[int, int, int]:
    return tuple(
        _count(n) for n in ("CompiledGraphFallback", "CompiledGraphLazyRun", "CompiledGraphExecute")
    )


def test_random_draws_compile_and_follow_the_device_seed():
    """Dropout (``rand_like`` in AOTAutograd's graph) and the other draws run in the compiled
    program: new numbers every call, the same ones again after ``torch.manual_seed``."""

    def fn(x: torch.Tensor) -> tuple:
        kept = torch.nn.functional.dropout(x * 2, p=0.25, training=True)
        return kept, torch.randn_like(x), torch.bernoulli(x * 0.5), torch.rand(4, device=x.device)

    f = torch.compile(fn, backend="xlacache")
    x = torch.ones(200, 100).to(DEV)
    before = _count("CompiledGraphFallback"), _count("CompiledGraphExecute")
    torch.manual_seed(3)
    first = [t.cpu() for t in f(x)]
    second = [t.cpu() for t in f(x)]
    torch.manual_seed(3)
    again = [t.cpu() for t in f(x)]
    assert (_count("CompiledGraphFallback"), _count("CompiledGraphExecute")) == (
        before[0],
        before[1] + 3,
    )
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    kept, normal, coin, uniform = first
    scaled = torch.tensor(2 / 0.75).item()  # in float32
    assert set(kept.unique().tolist()) == {0.0, scaled}  # dropped, or scaled by 1 / (1 - p)
    assert 0.72 < (kept != 0).float().mean() < 0.78
    assert abs(normal.mean()) < 0.05 and 0.95 < normal.std() < 1.05
    assert set(coin.unique().tolist()) == {0.0, 1.0} and 0.47 < coin.mean() < 0.53
    assert uniform.shape == (4,) and bool(((uniform >= 0) & (uniform < 1)).all())


def test_dropout_in_a_checkpointed_region_recomputes_the_same_mask():
    """AOTAutograd saves the RNG state around a checkpointed region's draws and restores it to
    recompute them (``run_and_save_rng_state``/``run_with_rng_state``): the forward's program
    draws and says with which key, the backward's draws the same mask again."""
    from torch.utils.checkpoint import checkpoint

    w = torch.ones(500).to(DEV).requires_grad_()

    def region(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * w, p=0.5, training=True)

    f = torch.compile(lambda x: checkpoint(region, x, w, use_reentrant=False), backend="xlacache")
    x = torch.arange(1.0, 501.0)
    before = _counts()
    masks = []
    for _ in range(2):
        w.grad = None
        y = f(x.to(DEV))
        y.sum().backward()
        kept = y.detach().cpu() != 0
        assert 0 < kept.sum() < 500
        torch.testing.assert_close(w.grad.cpu(), kept.float() * x / 0.5)
        masks.append(kept)
    assert not torch.equal(*masks)  # a new mask every call, each recomputed as drawn
    # forward and backward ran as programs, twice each: nothing ran lazily
    assert _counts() == (before[0], before[1], before[2] + 4)


class _ModeInBackward(torch.autograd.Function):
    """Doubles its input; its backward also computes a ``torch.mode`` (no lowering) that adds
    nothing: the backward graph runs lazily, the forward's compiles."""

    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        return x * 2

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        return g * 2 + 0 * torch.mode(g, dim=-1).values.unsqueeze(-1)


def _region_mode_in_backward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.dropout(_ModeInBackward.apply(x * w), p=0.5, training=True)


def _region_mode_in_forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # a value the backward does not need, from an op with no lowering: the forward runs lazily
    dropped = torch.nn.functional.dropout(x * w, p=0.5, training=True)
    return dropped + torch.mode(x.detach(), dim=-1).values.unsqueeze(-1)


@pytest.mark.parametrize(
    "region, offset",
    [(_region_mode_in_backward, 0.0), (_region_mode_in_forward, 1.0)],
    ids=["compiled-forward-lazy-backward", "lazy-forward-compiled-backward"],
)
def test_a_checkpointed_draw_is_recomputed_when_one_of_its_graphs_runs_lazily(region, offset):
    """The state one graph saves is read by the other, whichever ran as a program: the lazy
    runtime replays a compiled draw from its key, a program replays a lazy draw."""
    w = torch.ones(4, 100).to(DEV).requires_grad_()
    f = torch.compile(lambda x: checkpoint(region, x, w, use_reentrant=False), backend="xlacache")
    x = torch.arange(1.0, 401.0).reshape(4, 100)
    before = _counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the graph that runs lazily says so
        y = f(x.to(DEV))
        y.sum().backward()
    now = _counts()
    assert (now[1] - before[1], now[2] - before[2]) == (1, 1)  # one graph each way
    mode = x.mode(dim=-1).values.unsqueeze(-1) if offset else 0.0
    kept = (y.detach().cpu() - mode) != 0
    assert 0 < kept.sum() < 400
    scale = 2.0 if region is _region_mode_in_backward else 1.0
    torch.testing.assert_close(w.grad.cpu(), kept.float() * x * scale / 0.5)


def test_saved_rng_states_say_their_key_and_number():
    """Both kinds of saved state give the key and number of the draw they saved, and anything
    else is refused with a clear error."""
    compiled = rng.compiled_state(rng.compiled_key(), 7)
    k0, k1, index, flag = (int(v) for v in rng.state_words(compiled))
    assert (index, flag) == (7, 1) and k0 == rng.get_seed()
    lazy = rng.get_state()
    seed, epoch, index, flag = (int(v) for v in rng.state_words(lazy))
    assert (seed, flag) == (rng.get_seed(), 0)
    for bad in (torch.zeros(8, dtype=torch.uint8), torch.zeros(32, dtype=torch.int8)):
        with pytest.raises(ValueError, match="not an xla RNG state"):
            rng.state_words(bad)


def test_checkpointed_hugging_face_model_with_dropout_compiles_and_trains_alike():
    """GPT-2 with its default dropout and gradient checkpointing, compiled: no graph runs
    lazily, and the losses are those of the same model without checkpointing (the recomputed
    masks are the forward's, so the gradients are too)."""
    transformers = pytest.importorskip("transformers")
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(0))

    def losses(checkpointed: bool) -> list[float]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4)
        model = transformers.GPT2LMHeadModel(cfg).to(DEV).train()
        if checkpointed:
            model.activation_checkpointing_enable({"use_reentrant": False})
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        forward = torch.compile(model, backend="xlacache")
        out = []
        for _ in range(3):
            loss = forward(input_ids=ids.to(DEV), labels=ids.to(DEV)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        return out

    before = _counts()
    plain = losses(False)
    assert losses(True) == plain
    assert _counts()[:2] == before[:2]
