"""Activation checkpointing (``torch.utils.checkpoint``) on the lazy device: the recomputed
forward draws the random numbers the first one drew (``torch.xla``'s RNG state)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import xlacache.lazy as xl
from xlacache.lazy import metrics

DEV = xl.device()


def _block() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.5), nn.Linear(16, 8))


def _grads(block: nn.Module, x: torch.Tensor, how: str) -> list[torch.Tensor]:
    block.zero_grad()
    torch.manual_seed(1)  # the same dropout masks for every way of running it
    h = x
    for _ in range(2):
        reentrant = how == "reentrant"
        h = block(h) if how == "plain" else checkpoint(block, h, use_reentrant=reentrant)
    h.square().mean().backward()
    xl.sync()
    return [p.grad.cpu() for p in block.parameters()]


@pytest.mark.parametrize("how", ["reentrant", "non_reentrant"])
def test_checkpointed_dropout_recomputes_the_same_masks(how):
    block = _block().to(DEV)
    x = torch.randn(4, 8).to(DEV).requires_grad_()  # reentrant checkpoints need one
    want = _grads(block, x, "plain")
    got = _grads(block, x, how)
    assert any(g.abs().sum() > 0 for g in want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def _step_across_a_barrier(block: nn.Module, x: torch.Tensor, ckpt: bool) -> list:
    block.zero_grad()
    torch.manual_seed(2)
    out = checkpoint(block, x, use_reentrant=False) if ckpt else block(x)
    loss = out.square().sum()
    xl.sync()  # the forward's epoch of draws ends here: the backward runs in the next one
    (loss + nn.functional.dropout(x, 0.5).sum()).backward()  # the next epoch draws too
    xl.sync()
    return [p.grad.cpu() for p in block.parameters()]


def test_a_backward_after_a_barrier_recomputes_the_forwards_masks_and_compiles_once():
    block = _block().to(DEV)
    x = torch.randn(4, 8).to(DEV)
    want = _step_across_a_barrier(block, x, ckpt=False)
    seen = []
    for _ in range(4):
        got = _step_across_a_barrier(block, x, ckpt=True)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
        seen.append(metrics.counter_value("UncachedCompile") or 0)
    assert seen[1] == seen[3]


def test_the_device_module_is_there_and_its_state_round_trips():
    assert torch.xla.get_rng_state is not None and torch.xla._initialized
    state = torch.xla.get_rng_state()
    a = torch.rand(3, device=DEV).cpu()
    torch.xla.set_rng_state(state)
    torch.testing.assert_close(torch.rand(3, device=DEV).cpu(), a)
    b = torch.rand(3, device=DEV).cpu()
    assert not torch.equal(a, b)


@pytest.mark.parametrize("seed", [0, 2**63 + 5, 2**64 - 1])  # torch.seed() draws any uint64
def test_the_state_holds_every_torch_seed(seed):
    torch.manual_seed(seed)
    state = torch.xla.get_rng_state()
    a = torch.rand(2, device=DEV).cpu()
    torch.xla.set_rng_state(state)
    torch.testing.assert_close(torch.rand(2, device=DEV).cpu(), a)
    assert torch.initial_seed() == seed
