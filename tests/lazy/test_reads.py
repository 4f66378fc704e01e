"""A read (``.item()``, ``.cpu()``, control flow on a value) runs the graph that value needs and
keeps what else that graph computes which pending values need later (``lazy/reads.py``):
a loop whose only barrier is a read runs graphs of a steady size, never its whole history again."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import xlacache.lazy as xl
from xlacache.lazy import metrics


def _uncached() -> int:
    return metrics.counter_value("UncachedCompile") or 0


def _graph_sizes() -> list[int]:
    """The op counts of the graphs compiled since the metrics were cleared."""
    data = metrics.metric_data("GraphOps")
    return data[2] if data else []


def _train_without_sync(dev: torch.device | str, steps: int) -> tuple[list[float], list[int]]:
    """AdamW steps whose only barrier is ``loss.item()``: the losses, and the graphs compiled
    at each step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(5, 6).to(dev)
    y = torch.tensor([0, 2, 1, 1, 0]).to(dev)
    losses, compiled = [], []
    for _ in range(steps):
        before = _uncached()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        compiled.append(_uncached() - before)
    return losses, compiled


def test_a_loop_whose_only_barrier_is_a_read_compiles_a_steady_graph():
    eager, _ = _train_without_sync("cpu", 7)
    lazy, compiled = _train_without_sync(xl.device(), 7)
    torch.testing.assert_close(lazy, eager, rtol=1e-5, atol=1e-6)
    # each read's graph starts from what the last one computed: the optimizer's update of the
    # step before and this step's forward, the same graph from the third step on (before, the
    # forward of every earlier step was in it, and each step compiled a larger graph)
    assert compiled[3:] == [0, 0, 0, 0], compiled


def test_random_draws_between_reads_keep_one_graph_and_draw_anew():
    """Each read starts a new epoch of draws, as ``sync()`` does: the next step records the
    same random ops (before, their indices grew: a new graph every step, pytorch/xla#2783)."""
    dev = xl.device()
    ones = torch.ones(64).to(dev)
    # a process's first dropout keeps its intermediates alive (torch imports torch._dynamo
    # inside that call, and the call's frames stay referenced): its read returns one more value
    nn.functional.dropout(ones, 0.5).sum().item()
    xl.sync()  # ends the epoch of any draws made before
    kept, compiled = [], []
    for _ in range(6):
        before = _uncached()
        kept.append(nn.functional.dropout(ones, 0.5).sum().item())
        compiled.append(_uncached() - before)
    assert compiled[1:] == [0] * 5, compiled
    assert len(set(kept)) > 1  # new masks every step
    assert all(v % 2 == 0 and 0 < v < 128 for v in kept)  # kept ones scaled by 2


def _decode(dev: torch.device | str, tokens: int) -> tuple[torch.Tensor, list[int]]:
    """A beam-search-like loop: a cache grown and reordered each token, and a stopping check
    read each token. The final cache, and the size of each read's graph."""
    torch.manual_seed(1)
    w = torch.randn(4, 4).to(dev)
    cache = torch.randn(3, 1, 4).to(dev)
    sizes = []
    for _ in range(tokens):
        new = torch.tanh(cache[:, -1:] @ w)
        cache = torch.cat([cache, new], dim=1)
        order = cache.sum(dim=(1, 2)).argsort()  # the beams, best first
        cache = cache.index_select(0, order)
        before = len(_graph_sizes())
        if bool((cache.abs().amax() > 1e6).item()):  # the stopping check: never true here
            break
        sizes.extend(_graph_sizes()[before:])
    return cache.cpu(), sizes


def test_a_decoding_loop_reads_graphs_that_do_not_grow_with_the_tokens():
    eager, _ = _decode("cpu", 8)
    metrics.clear_all()
    xl.clear_compiled_cache()
    lazy, sizes = _decode(xl.device(), 8)
    torch.testing.assert_close(lazy, eager, rtol=1e-6, atol=1e-6)
    # each token's graph computes that token only; the reordered cache, which the check does
    # not read, starts the next graph as device data (before: 8 graphs of 2, 3, ... 9 tokens)
    assert len(sizes) == 8 and max(sizes) == min(sizes[1:]), sizes


def test_a_value_a_read_computed_on_the_way_is_not_computed_again():
    dev = xl.device()
    x = torch.randn(4, 5)
    xl.sync()
    values, indices = x.to(dev).exp().max(dim=1)  # one node, two outputs
    doubled = indices * 2  # pending, on the second output
    del indices
    total = values.sum().item()  # runs exp and max; keeps max's indices for `doubled`
    metrics.clear_all()
    xl.clear_compiled_cache()
    got = doubled.cpu()
    assert torch.equal(got, x.exp().max(dim=1).indices * 2)
    assert total == pytest.approx(x.exp().max(dim=1).values.sum().item(), rel=1e-6)
    assert _graph_sizes() == [1]  # the multiplication alone


def test_views_and_in_place_updates_after_a_read_stay_exact():
    results = []
    for dev in ("cpu", xl.device()):
        torch.manual_seed(2)
        a = torch.randn(3, 4).to(dev) * 2
        row = a[1]  # a view, pending
        col = a[:, 2]
        first = a.sum().item()
        row.add_(1)  # reaches `a` and `col` through the root
        a.mul_(3)
        second = (col * 1).sum().item()
        results.append((first, second, a.cpu(), row.cpu()))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.slow
def test_hugging_face_beam_search_generates_as_eager_with_graphs_of_one_token():
    """``generate`` reads only its stopping check each token; the KV cache, reordered for the
    beams after the check, starts each next token's graph as device data."""
    from tests.lazy.hf_models import VOCAB, build

    outs = []
    for dev in ("cpu", xl.device()):
        model = build("llama").eval().to(dev)
        ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
        metrics.clear_all()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids.to(dev), attention_mask=torch.ones_like(ids).to(dev),
                max_new_tokens=6, num_beams=2, do_sample=False, pad_token_id=0,
                eos_token_id=None,
            )  # fmt: skip
        outs.append(out.cpu())
    assert torch.equal(outs[1], outs[0])
    sizes = _graph_sizes()
    big = [s for s in sizes if s > 150]  # the graphs with the model's forward, one a token
    # before: each token's graph held every earlier token's forward (319, 642, 961, ...)
    assert len(big) >= 5 and max(big) < 1.2 * min(big), sizes
