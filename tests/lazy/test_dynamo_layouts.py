"""Compiled graphs read views with eager's layouts: AOTAutograd replays a view of a view (a
``chunk`` of a transposed tensor) as ``as_strided`` over the storage eager's strides index, and
applies in-place view ops to ``xla`` fakes (GPT-NeoX and Swin in transformers do both)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.fx import Graph, GraphModule

import xlacache.lazy as xl
from tests.lazy.test_dynamo import _fresh_dynamo  # noqa: F401 - its fixture
from xlacache.lazy.dynamo import strided

DEV = xl.device()
aten = torch.ops.aten


def _rope_of_chunk(x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    q = x.view(2, 6, -1, 12).transpose(1, 2).chunk(3, dim=-1)[1]  # GPT-NeoX's query
    rot = torch.cat((-q[..., 1:2], q[..., :1]), dim=-1)
    return torch.cat([q[..., :2] * cos + rot * cos.flip(-1), q[..., 2:]], dim=-1)


def _attention_of_chunks(x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    q, k, v = x.view(2, 6, -1, 12).transpose(1, 2).chunk(3, dim=-1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)


def _update_through_a_chunk(x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.transpose(0, 2).chunk(2, dim=0)[1].add_(100)
    return y


def _in_place_view_ops(x: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    pooled = F.adaptive_avg_pool1d(x.transpose(1, 2), 1)  # Swin's pooler: squeeze_ inside
    return pooled.clone().unsqueeze_(0).transpose_(1, 2).squeeze_(0) * 2


@pytest.mark.parametrize(
    "fn", [_rope_of_chunk, _attention_of_chunks, _update_through_a_chunk, _in_place_view_ops]
)
def test_views_of_views_compile_to_eager_values(fn):
    g = torch.Generator().manual_seed(0)
    x, cos = torch.randn(2, 6, 24, generator=g), torch.randn(6, 2, generator=g)
    got = torch.compile(fn, backend="xlacache")(x.to(DEV), cos.to(DEV)).cpu()
    torch.testing.assert_close(got, fn(x, cos), rtol=1e-5, atol=1e-6)


def _graph(op: object, *rest: object) -> tuple[GraphModule, torch.Tensor]:
    """``op(x.t(), *rest)`` as an FX graph whose nodes carry eager's layouts (as AOTAutograd's
    do), and the eager ``x.t()`` it starts from."""
    x = torch.arange(12.0).reshape(4, 3)
    g = Graph()
    ph = g.placeholder("x")
    ph.meta["val"] = x
    t = g.call_function(aten.t.default, (ph,))
    t.meta["val"] = x.t()  # strides (1, 3)
    out = g.call_function(op, (t, *rest))
    g.output(out)
    return GraphModule(torch.nn.Module(), g), x


def _lowered(gm: GraphModule, x: torch.Tensor) -> torch.Tensor:
    node = next(n for n in gm.graph.nodes if n.target in strided.LAYOUT_OPS)
    fn = strided.lowering(node, int)
    rest = [jnp.asarray(a.numpy()) if isinstance(a, torch.Tensor) else a for a in node.args[1:]]
    return torch.from_numpy(np.array(fn(jnp.asarray(x.t().numpy()), *rest)))


def test_as_strided_reads_the_storage_its_input_views():
    gm, x = _graph(aten.as_strided.default, [2, 2], [1, 3], 4)
    want = x.t().as_strided([2, 2], [1, 3], 4)  # eager: positions in x's storage
    assert torch.equal(_lowered(gm, x), want)
    assert torch.equal(strided.lazy_runner(gm)(x.to(DEV)).cpu(), want)  # a lazily run graph


def test_as_strided_scatter_writes_the_storage_its_input_views():
    src = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    gm, x = _graph(aten.as_strided_scatter.default, src, [2, 2], [3, 1], 1)
    want = torch.as_strided_scatter(x.t(), src, [2, 2], [3, 1], 1)
    assert torch.equal(_lowered(gm, x), want)
    assert torch.equal(strided.lazy_runner(gm)(x.to(DEV)).cpu(), want)


def test_as_strided_past_its_input_raises():
    gm, x = _graph(aten.as_strided.default, [2], [1], 11)  # positions 11, 12: x holds 0..11
    with pytest.raises(NotImplementedError, match="storage its input does not hold"):
        _lowered(gm, x)


def _gpt_neox() -> torch.nn.Module:
    import transformers as T

    cfg = T.GPTNeoXConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64,
    )  # fmt: skip
    return T.GPTNeoXForCausalLM(cfg)


def _swin() -> torch.nn.Module:
    import transformers as T

    cfg = T.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
        window_size=4, num_labels=5, drop_path_rate=0.0,
    )  # fmt: skip
    return T.SwinForImageClassification(cfg)


def _inputs(name: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    if name == "swin":
        x = torch.randn(2, 3, 32, 32, generator=g)
        return {"pixel_values": x, "labels": torch.randint(0, 5, (2,), generator=g)}
    ids = torch.randint(0, 96, (2, 12), generator=g)
    return {"input_ids": ids, "labels": ids}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt_neox", "swin"])
def test_transformers_models_with_views_of_views_compile_to_eager_losses_and_grads(name):
    """GPT-NeoX (a partial rotary embedding of chunks of a transposed view: its compiled
    logits were off by 0.3) and Swin (``adaptive_avg_pool1d``: AOTAutograd failed)."""
    torch.manual_seed(0)
    ref = {"gpt_neox": _gpt_neox, "swin": _swin}[name]()
    model = {"gpt_neox": _gpt_neox, "swin": _swin}[name]().to(DEV)
    model.load_state_dict(ref.state_dict())
    inputs = _inputs(name)
    want = ref(**inputs).loss
    want.backward()
    got = torch.compile(model, backend="xlacache")(**{k: v.to(DEV) for k, v in inputs.items()})
    got.loss.backward()
    torch.testing.assert_close(got.loss.cpu(), want, rtol=1e-5, atol=1e-6)
    for (n, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=n)
