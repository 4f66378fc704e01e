"""``nn.EmbeddingBag`` / ``F.embedding_bag`` on the device: lowered (no CPU run), eager's values
and gradients in every mode, eager's errors as device checks, lazily and compiled."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.device_checks import DeviceCheckError, DeviceIndexError

DEV = xl.device()
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4, 1])
WEIGHT = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))

# (mode, offsets, include_last_offset, padding_idx, per_sample_weights)
CASES = [
    ("sum", [0, 4], False, None, False),
    ("sum", [0, 0, 8, 8], False, 4, True),  # empty bags, padding, weights per entry
    ("sum", [0, 3, 3, 10], True, None, True),
    ("mean", [0, 4], False, 4, False),
    ("mean", [0, 0, 8, 8], False, None, False),
    ("mean", [0, 4, 10], True, 4, False),
    ("max", [0, 4], False, None, False),
    ("max", [0, 0, 8, 8], False, 4, False),
    ("max", [0, 3, 3, 10], True, None, False),
]


def _run(dev, case, weight=WEIGHT, indices=INDICES, scale_grad_by_freq=False):
    mode, offsets, last, pad, weighted = case
    w = weight.clone().to(dev).requires_grad_()
    p = torch.linspace(0.5, 1.5, len(indices)).to(dev).requires_grad_() if weighted else None
    out = F.embedding_bag(
        indices.to(dev), w, torch.tensor(offsets).to(dev), mode=mode, padding_idx=pad,
        include_last_offset=last, per_sample_weights=p, scale_grad_by_freq=scale_grad_by_freq,
    )  # fmt: skip
    (out * torch.arange(out.numel()).reshape(out.shape).to(dev).sin()).sum().backward()
    return [t.cpu() for t in (out.detach(), w.grad, *([p.grad] if weighted else []))]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-last{c[2]}-pad{c[3]}")
def test_every_mode_gives_eagers_values_and_gradients_without_a_cpu_run(case):
    metrics.clear_counters()
    for got, want in zip(_run(DEV, case), _run("cpu", case), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert metrics.executed_fallback_ops() == []


def test_max_keeps_eagers_order_with_nans():
    """A NaN first in a bag stays its maximum; a NaN later is passed over."""
    weight = WEIGHT.clone()
    weight[7, 1] = float("nan")
    for indices in ([7, 2, 7, 3, 4, 5, 6, 7, 8, 1], [2, 7, 3, 1, 7, 4, 5, 6, 8, 9]):
        case = ("max", [0, 3, 6], False, None, False)
        got = _run(DEV, case, weight, torch.tensor(indices))
        want = _run("cpu", case, weight, torch.tensor(indices))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_scale_grad_by_freq_divides_by_each_indexs_count_as_embedding_does(mode):
    """Each entry's gradient over its index's count in the input (CUDA's kernel, and
    ``F.embedding``'s; eager CPU's bag kernel looks counts up at other entries)."""
    offsets = torch.tensor([0, 0, 8, 8])
    w = WEIGHT.clone().requires_grad_()
    rows = F.embedding(INDICES, w, padding_idx=4, scale_grad_by_freq=True)
    bag = torch.searchsorted(offsets, torch.arange(len(INDICES)), right=True) - 1
    keep = INDICES != 4
    want = torch.zeros(4, 3).index_add(0, bag[keep], rows[keep])
    if mode == "mean":
        want = want / torch.bincount(bag[keep], minlength=4).clamp(min=1)[:, None]
    (want * torch.arange(12.0).reshape(4, 3).sin()).sum().backward()
    got = _run(DEV, (mode, offsets.tolist(), False, 4, False), scale_grad_by_freq=True)
    torch.testing.assert_close(got[0], want.detach())
    torch.testing.assert_close(got[1], w.grad)


@pytest.mark.parametrize(
    "offsets, last",
    [([1, 4], False), ([0, 6, 3], False), ([0, 11], False), ([0, 4, 6], True)],
    ids=["not from 0", "decreasing", "past the input", "last offset before the end"],
)
def test_bad_offsets_raise(offsets, last):
    bag = F.embedding_bag(
        INDICES.to(DEV), WEIGHT.to(DEV), torch.tensor(offsets).to(DEV), include_last_offset=last
    )
    with pytest.raises(DeviceCheckError, match="embedding_bag's offsets"):
        bag.cpu()


def test_an_index_out_of_range_raises_and_sparse_gradients_are_refused():
    bag = F.embedding_bag(torch.tensor([1, 12]).to(DEV), WEIGHT.to(DEV), torch.tensor([0]).to(DEV))
    with pytest.raises(DeviceIndexError):
        bag.cpu()
    sparse = torch.nn.EmbeddingBag(10, 3, sparse=True).to(DEV)
    out = sparse(INDICES.to(DEV), torch.tensor([0, 4]).to(DEV))
    with pytest.raises(RuntimeError, match="sparse=True"):
        out.sum().backward()


def test_max_norm_renormalizes_bfloat16_rows_as_eager():
    """Eager's scale is a bfloat16 scalar: the rows are scaled in bfloat16 (a float32 scale
    was one bfloat16 step off)."""
    weight = (torch.randn(5, 5, generator=torch.Generator().manual_seed(3)) * 2).bfloat16()
    indices = torch.tensor([0, 2, 4, 2])
    want, got = weight.clone(), weight.clone().to(DEV)
    torch.embedding_renorm_(want, indices, 1.0, 2.0)
    torch.embedding_renorm_(got, indices.to(DEV), 1.0, 2.0)
    assert torch.equal(got.cpu(), want)


def test_a_compiled_bag_model_trains_as_eager_in_compiled_graphs():
    import xlacache.lazy.dynamo as xc

    def train(dev, compiled):
        torch.manual_seed(0)
        bag = torch.nn.EmbeddingBag(10, 4, mode="mean").to(dev)
        head = torch.nn.Linear(4, 2).to(dev)
        params = [*bag.parameters(), *head.parameters()]
        opt = torch.optim.SGD(params, lr=0.5)

        def loss_of(x, offsets, y):
            return F.cross_entropy(head(bag(x, offsets)), y)

        step = torch.compile(loss_of, backend="xlacache") if compiled else loss_of
        losses = []
        for _ in range(3):
            loss = step(INDICES.to(dev), torch.tensor([0, 4]).to(dev), torch.tensor([0, 1]).to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    lazy_runs = xc.report()["CompiledGraphLazyRun"]
    torch.testing.assert_close(train(DEV, True), train("cpu", False), rtol=1e-5, atol=0)
    assert xc.report()["CompiledGraphLazyRun"] == lazy_runs
