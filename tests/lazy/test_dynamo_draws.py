"""Random draws in compiled graphs (``xlacache/lazy/dynamo/draws.py``): dropout and the other
draws run in the programs, and a checkpointed region that draws recomputes the same numbers in
its backward, whichever of its graphs compiled and whichever ran lazily."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import xlacache.lazy as xl
from tests.lazy.test_dynamo import _count, _fresh_dynamo  # noqa: F401 - its fixture too
from xlacache.lazy import rng

DEV = xl.device()


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


# draws as a checkpointed region makes them: factories, fills, ``*_like``, on the host
DRAWS = {
    "rand_like": torch.rand_like,
    "bernoulli": lambda x: torch.bernoulli(x / 400),
    "uniform_": lambda x: torch.empty_like(x).uniform_(-2, 3),
    "normal_": lambda x: torch.empty_like(x).normal_(1.0, 2.0),
    "exponential_": lambda x: torch.empty_like(x).exponential_(2.0),
    "rand": lambda x: torch.rand(x.shape, device=x.device),
    "randint": lambda x: torch.randint(0, 5, x.shape, device=x.device).float(),  # on the host
}


class _ModeInBackward(torch.autograd.Function):
    """The identity; its backward also computes a ``torch.mode`` (no lowering) that adds
    nothing, so that the backward's graph runs lazily."""

    @staticmethod
    def forward(ctx, x):  # noqa: ANN001, ANN205
        return x * 1

    @staticmethod
    def backward(ctx, g):  # noqa: ANN001, ANN205
        return g + 0 * torch.mode(g, dim=-1).values.unsqueeze(-1)


def _checkpointed(draw, lazy_forward: bool, lazy_backward: bool):  # noqa: ANN001, ANN202
    """``x * w * draw(x)`` checkpointed and compiled: with ``w`` all ones, ``w``'s gradient is
    the output itself exactly when the backward recomputes the forward's draw."""
    w = torch.ones(3, 100).to(DEV).requires_grad_()

    def region(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = (_ModeInBackward.apply(x * w) if lazy_backward else x * w) * draw(x)
        if lazy_forward:  # a value the backward does not need, from an op with no lowering
            y = y + 0 * torch.mode(x.detach(), dim=-1).values.unsqueeze(-1)
        return y

    f = torch.compile(lambda x: checkpoint(region, x, w, use_reentrant=False), backend="xlacache")
    return f, w


@pytest.mark.parametrize("name", list(DRAWS))
def test_every_kind_of_checkpointed_draw_compiles_and_is_recomputed(name):
    f, w = _checkpointed(DRAWS[name], lazy_forward=False, lazy_backward=False)
    x = torch.arange(1.0, 301.0).reshape(3, 100).to(DEV)
    before = _counts()
    y = f(x)
    y.sum().backward()
    runs_lazily = name == "randint"  # a host draw: its graphs run lazily
    now = _counts()
    assert (now[1] - before[1], now[2] - before[2]) == ((2, 0) if runs_lazily else (0, 2))
    assert torch.equal(w.grad.cpu(), y.detach().cpu())


@pytest.mark.parametrize("name", ["rand_like", "rand", "randint"])
@pytest.mark.parametrize(
    "lazy", [(True, False), (False, True), (True, True)], ids=["fwd-lazy", "bwd-lazy", "both-lazy"]
)
def test_a_checkpointed_draw_is_recomputed_when_its_graphs_run_lazily(name, lazy):
    """The state one graph saves is read by the other, whichever ran as a program: the lazy
    runtime replays a compiled draw from its key (a factory draw, with no tensor argument,
    too), a program replays a lazy draw, and a draw on the host is replayed from the CPU
    generator's saved state."""
    f, w = _checkpointed(DRAWS[name], *lazy)
    x = torch.arange(1.0, 301.0).reshape(3, 100).to(DEV)
    before = _counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the graph that runs lazily says so
        y = f(x)
        y.sum().backward()
    lazy_runs = _counts()[1] - before[1]
    assert lazy_runs == (2 if name == "randint" or all(lazy) else 1)
    assert torch.equal(w.grad.cpu(), y.detach().cpu())


def test_saved_rng_states_say_their_key_and_number():
    """Both kinds of saved state give the key and number of the draw they saved, and anything
    else is refused with a clear error."""
    compiled = rng.compiled_state(rng.compiled_key(), 7)
    k0, k1, index, flag = (int(v) for v in rng.state_words(compiled))
    assert (index, flag) == (7, 1) and k0 == rng.get_seed()
    lazy = rng.get_state()
    seed, epoch, index, flag = (int(v) for v in rng.state_words(lazy))
    assert (seed, flag) == (rng.get_seed(), 0)
    host = torch.cat([lazy, torch.get_rng_state()])  # what the lazy runtime saves
    assert list(rng.state_words(host)) == list(rng.state_words(lazy))
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


def test_functional_normal_draws_on_the_device():
    """``normal_functional`` (what AOTAutograd writes for ``normal_``) is a device draw when a
    graph runs lazily too, not a CPU fallback: the same numbers after the same seed."""
    x = torch.zeros(1000).to(DEV)
    fallbacks = _count("aten::normal_functional")
    torch.manual_seed(5)
    a = torch.ops.aten.normal_functional.default(x, 1.0, 2.0).cpu()
    torch.manual_seed(5)
    b = torch.ops.aten.normal_functional.default(x, 1.0, 2.0).cpu()
    assert _count("aten::normal_functional") == fallbacks
    assert torch.equal(a, b) and abs(a.mean() - 1.0) < 0.2 and abs(a.std() - 2.0) < 0.2


def test_host_draws_compile_and_draw_what_eager_draws():
    """``randint`` and ``randperm`` (a diffusion step's timesteps, a shuffle), which the lazy
    runtime draws on the CPU generator, are drawn there at each call of the program: the
    numbers eager CPU draws after the same seed, new ones every call, nothing run lazily."""

    def step(x: torch.Tensor) -> tuple:
        t = torch.randint(0, 1000, (x.shape[0],), device=x.device)
        order = torch.randperm(x.shape[0], device=x.device)
        return x[order] * t[:, None], t, order

    f = torch.compile(step, backend="xlacache")
    x = torch.arange(32.0).reshape(8, 4)
    torch.manual_seed(0)
    want = step(x)
    before = _counts()
    torch.manual_seed(0)
    got = [t.cpu() for t in f(x.to(DEV))]
    again = [t.cpu() for t in f(x.to(DEV))]
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    assert not torch.equal(got[1], again[1])
    now = _counts()
    assert (now[1] - before[1], now[2] - before[2]) == (0, 2)


def test_host_draws_sized_by_a_dynamic_size_compile():
    """With the batch size dynamic (an int input of the graph), the host draw takes its size
    from that input at each call."""

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, 1000, (x.shape[0],), device=x.device)

    f = torch.compile(step, backend="xlacache")
    before = _counts()
    for batch in (8, 6, 5):  # the second size makes it dynamic
        torch.manual_seed(batch)
        want = step(torch.ones(batch, 4))
        torch.manual_seed(batch)
        assert torch.equal(f(torch.ones(batch, 4).to(DEV)).cpu(), want)
    now = _counts()
    assert (now[1] - before[1], now[2] - before[2]) == (0, 3)


def test_reparameterized_sample_compiles_with_its_gradient():
    """A VAE's ``Normal(mu, sigma).rsample()``: AOTAutograd writes ``empty`` then
    ``normal_functional``; both lower (``empty`` as the lazy runtime's zeros), and the
    gradient is the reparameterization's, ``x * (1 + eps)``."""
    w = torch.ones(3, 100).to(DEV).requires_grad_()

    def sample(x: torch.Tensor) -> torch.Tensor:
        return torch.distributions.Normal(x * w, x * w + 0.5).rsample()

    f = torch.compile(sample, backend="xlacache")
    x = torch.arange(1.0, 301.0).reshape(3, 100)
    before = _counts()
    y = f(x.to(DEV))
    y.sum().backward()
    now = _counts()
    assert (now[1] - before[1], now[2] - before[2]) == (0, 2)
    eps = (y.detach().cpu() - x) / (x + 0.5)
    assert 0.8 < eps.std() < 1.2
    torch.testing.assert_close(w.grad.cpu(), x * (1 + eps), rtol=1e-5, atol=1e-4)


def test_a_host_draw_numpy_cannot_hold_runs_lazily():
    """A ``bfloat16`` host draw has no numpy array to give the program: its graph runs lazily
    (with the reason) instead of failing."""
    f = torch.compile(
        lambda x: x + torch.randint(0, 5, (3,), dtype=torch.bfloat16, device=x.device),
        backend="xlacache",
    )
    before = _counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = f(torch.zeros(3, dtype=torch.bfloat16).to(DEV)).cpu()
    assert y.dtype == torch.bfloat16 and bool(((y >= 0) & (y < 5)).all())
    assert _counts()[1] - before[1] == 1
