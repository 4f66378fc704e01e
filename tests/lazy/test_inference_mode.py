"""``torch.inference_mode()`` on the device as in eager: evaluation loops give eager's values
with no CPU fallback (ops torch decomposes above autograd reach the runtime whole there), views
of tensors made outside it are normal tensors, and value checks raise only where eager does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from tests.lazy import hf_models
from xlacache.lazy import metrics
from xlacache.lazy.device_checks import DeviceIndexError

DEV = xl.device()


def _fallbacks() -> dict[str, int]:
    return {n: metrics.counter_value(n) for n in metrics.counter_names() if "::" in n}


@pytest.mark.parametrize("name", ["gpt2", "bert", "t5"])
def test_an_evaluation_gives_eagers_loss_without_cpu_fallback(name):
    batch = hf_models.batch(name, 0)
    with torch.inference_mode():
        want = hf_models.build(name).eval()(**batch).loss.item()
    model = hf_models.build(name).eval().to(DEV)
    before = _fallbacks()
    with torch.inference_mode():
        got = model(**{k: v.to(DEV) for k, v in batch.items()}).loss.item()
    assert got == pytest.approx(want, rel=1e-5)
    assert _fallbacks() == before


def test_an_ignored_target_is_no_index_error():
    x, t = torch.randn(4, 5), torch.tensor([1, -100, 2, 4])
    with torch.inference_mode():
        want = F.cross_entropy(x, t)
        got = F.cross_entropy(x.to(DEV), t.to(DEV)).cpu()
    torch.testing.assert_close(got, want)


VIEWS = {
    "slice": lambda t: t[:, 2:5],
    "select": lambda t: t[1],
    "detach": lambda t: t.detach(),
    "transpose": lambda t: t.t(),
    "split": lambda t: t.split(3, 1)[1],
    "unbind": lambda t: t.unbind(0)[1],
    "view": lambda t: t.view(3, 4),
    "expand": lambda t: t[:1].expand(3, 6),
    "diagonal": lambda t: t.diagonal(),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_a_view_of_a_normal_tensor_is_normal(name):
    view = VIEWS[name]
    cpu = torch.arange(12.0).view(2, 6)
    dev = cpu.to(DEV)
    with torch.inference_mode():
        want, got = view(cpu), view(dev)
        assert got.is_inference() == want.is_inference()
        assert torch.equal(got.cpu(), want)
        made = dev * 2  # made inside: an inference tensor, and its views too
        assert made.is_inference() and view(made).is_inference()


def test_in_place_updates_follow_eagers_rules():
    cpu, dev = torch.zeros(4), torch.zeros(4).to(DEV)
    with torch.inference_mode():
        for t in (cpu, dev):
            t.add_(1)
            t[1:3].mul_(5)
        made = dev * 2
    assert torch.equal(dev.cpu(), cpu) and not dev.is_inference()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        made.add_(1)


def test_one_hot_and_item_run_as_in_grad_mode():
    before = _fallbacks()
    with torch.inference_mode():
        x = torch.tensor([0, 2]).to(DEV)
        assert torch.equal(F.one_hot(x, 3).cpu(), F.one_hot(torch.tensor([0, 2]), 3))
        assert x.sum().item() == 2
        with pytest.raises(DeviceIndexError):
            F.one_hot(torch.tensor([0, 5]).to(DEV), 3).cpu()
    assert _fallbacks() == before


def test_a_transformer_encoder_with_a_padding_mask_agrees_where_not_padded():
    """torch's nested-tensor fast path is for CPU and CUDA: on the xla device the encoder runs
    its general path, whose padded positions hold values (eager's fast path: zeros)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.inference_mode():
        want = model(x, src_key_padding_mask=pad)
        got = model.to(xl.device())(x.to(xl.device()), src_key_padding_mask=pad.to(xl.device()))
        got = got.cpu()
    torch.testing.assert_close(got[~pad], want[~pad])
    assert (want[pad] == 0).all() and (got[pad] != 0).any()
