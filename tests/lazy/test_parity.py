"""Training parity with eager CPU PyTorch: same losses (rtol ~1e-3) for 5 steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl

from .models import CNN, GPT, MLP

pytestmark = pytest.mark.slow  # measured: most tests here take seconds


def _train(model, make_opt, batches, loss_fn, dev, clip=None):
    model = model.to(dev)
    opt = make_opt(model)
    losses = []
    for x, y in batches:
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if dev.type == "xla":
            xl.sync()
        losses.append(loss.item())
    return losses, model


def _parity(model, make_opt, batches, loss_fn, clip=None, rtol=1e-3):
    ref, ref_model = _train(
        copy.deepcopy(model), make_opt, batches, loss_fn, torch.device("cpu"), clip
    )
    got, got_model = _train(copy.deepcopy(model), make_opt, batches, loss_fn, xl.device(), clip)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=rtol, atol=1e-5)
    ref_state, got_state = ref_model.state_dict(), got_model.state_dict()
    assert list(got_state) == list(ref_state)  # the same parameters and buffers, in order
    for (n, p), q in zip(ref_state.items(), got_state.values(), strict=True):
        torch.testing.assert_close(q.cpu(), p, rtol=1e-2, atol=1e-3, msg=n)
    return got


def test_mlp_sgd_momentum():
    torch.manual_seed(0)
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(5)]
    _parity(
        MLP(),
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
        batches,
        F.cross_entropy,
    )


def test_cnn_batchnorm_adam():
    torch.manual_seed(0)
    batches = [(torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))) for _ in range(5)]
    _parity(
        CNN(),
        lambda m: torch.optim.Adam(m.parameters(), lr=1e-3),
        batches,
        lambda out, y: F.nll_loss(F.log_softmax(out, -1), y),
    )


def test_transformer_sdpa_adamw():
    torch.manual_seed(0)
    batches = []
    for _ in range(5):
        idx = torch.randint(0, 64, (2, 16))
        batches.append((idx, torch.roll(idx, -1, 1)))

    def loss_fn(logits, y):
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1), label_smoothing=0.1)

    _parity(
        GPT(),
        lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.1),
        batches,
        loss_fn,
        clip=1.0,
    )


@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
def test_weight_norm_gradients_lower_and_match_eager(last):
    """``parametrizations.weight_norm``'s backward (``_weight_norm_interface_backward``) is a
    device op, not a CPU fallback, for the norm over every axis but the first or the last."""
    from torch.nn.utils.parametrizations import weight_norm

    def grads(dev):
        torch.manual_seed(0)
        linear, conv = torch.nn.Linear(6, 8), torch.nn.Conv1d(2, 3, 3)
        model = torch.nn.Sequential(
            weight_norm(linear, dim=1 if last else 0), weight_norm(conv, dim=2 if last else 0)
        ).to(dev)
        x = torch.randn(2, 2, 6, generator=torch.Generator().manual_seed(1)).to(dev)
        model(x).square().sum().backward()
        return [p.grad for p in model.parameters()]

    from xlacache.lazy.lowering import LOWERINGS

    name = "aten::_weight_norm_interface_backward"
    before = xl.metrics.counter_value(name)
    got = grads(xl.device())
    if torch.ops.aten._weight_norm_interface_backward.default in LOWERINGS:  # torch >= 2.10
        assert xl.metrics.counter_value(name) == before  # no op ran on the CPU
    for g, want in zip(got, grads(torch.device("cpu")), strict=True):
        torch.testing.assert_close(g.cpu(), want, rtol=1e-5, atol=1e-6)
