"""``torch.histc`` on the device: integers as a graph op with CUDA's bins (eager's CPU kernel
takes no integers; transformers' MoE layers count routed tokens with it off the CPU), floating
values by eager's CPU kernel, bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import xlacache.lazy as xl
from tests.lazy.test_dynamo import _fresh_dynamo  # noqa: F401 - its fixture
from xlacache.lazy import metrics

DEV = xl.device()


def _cuda_histc(x: np.ndarray, bins: int, lo: float, hi: float) -> np.ndarray:
    """CUDA's integer histc: bounds truncated, the data's own when equal (widened by one when
    those are equal too), ``(x - lo) * bins // (hi - lo)``, ``hi`` in the last bin."""
    lo, hi = int(lo), int(hi)
    if lo == hi:
        lo, hi = int(x.min()), int(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    out = np.zeros(bins, dtype=np.int64)
    for v in x.ravel().astype(np.int64):
        if lo <= v <= hi:
            out[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return out


@pytest.mark.parametrize(
    ("bins", "lo", "hi"), [(8, 0, 7), (5, -3, 9), (4, 2.9, 6.2), (6, 0, 0), (3, 0, 0)]
)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_histc_counts_as_cuda_does(bins, lo, hi, dtype):
    x = torch.randint(0, 12, (7, 9), generator=torch.Generator().manual_seed(bins)).to(dtype)
    got = torch.histc(x.to(DEV), bins, lo, hi).cpu()
    assert got.dtype == dtype
    assert got.tolist() == _cuda_histc(x.numpy(), bins, lo, hi).tolist()


def test_integer_histc_of_one_value_widens_the_range():
    got = torch.histc(torch.full((5,), 4, dtype=torch.int32).to(DEV), 3).cpu()
    assert got.tolist() == [0, 5, 0]  # range [3, 5]: 4 is in the middle bin


def test_routed_token_counts_equal_bincount():
    """What transformers' MoE layers compute: tokens per expert."""
    experts = torch.randint(0, 6, (32, 2), generator=torch.Generator().manual_seed(0))
    got = torch.histc(experts.int().to(DEV), bins=6, min=0, max=5).cpu()
    assert torch.equal(got, torch.bincount(experts.flatten(), minlength=6).int())


def test_float_histc_is_eagers_cpu_kernel_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(1000, generator=g), torch.linspace(-2, 2, 11)])  # on edges too
    x[3] = float("nan")
    before = metrics.counter_value("aten::histc") or 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's announcement
        got = torch.histc(x.to(DEV), 10, -2, 2).cpu()
    assert torch.equal(got, torch.histc(x, 10, -2, 2))
    assert (metrics.counter_value("aten::histc") or 0) == before + 1


def test_compiled_histc_counts_tokens_and_floats_as_eager():
    def fn(e: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.histc(e, bins=6, min=0, max=5), torch.histc(x, 10, -2, 2)

    g = torch.Generator().manual_seed(1)
    e, x = torch.randint(0, 6, (40,), generator=g).int(), torch.randn(100, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # floats: the graph runs lazily, announced
        counts, hist = torch.compile(fn, backend="xlacache")(e.to(DEV), x.to(DEV))
    assert torch.equal(counts.cpu(), torch.bincount(e, minlength=6).int())
    assert torch.equal(hist.cpu(), torch.histc(x, 10, -2, 2))


@pytest.mark.slow
def test_a_mixture_of_experts_model_trains_as_on_the_cpu():
    """transformers' Mixtral counts tokens per expert with an integer ``histc`` on every
    device but the CPU: it failed on the device."""
    import transformers as T

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        cfg = T.MixtralConfig(
            vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=64, num_local_experts=4,
            num_experts_per_tok=2,
        )  # fmt: skip
        return T.MixtralForCausalLM(cfg)

    def train(device: object) -> list[float]:
        model = build().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for step in range(2):
            ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(step))
            loss = model(input_ids=ids.to(device), labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    torch.testing.assert_close(train(DEV), train("cpu"), rtol=1e-5, atol=1e-6)
