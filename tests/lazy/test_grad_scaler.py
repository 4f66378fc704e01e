"""``torch.amp.GradScaler("xla")``: its fused ops give torch's CPU kernels' values exactly."""

from __future__ import annotations

import copy

import pytest
import torch

import xlacache.lazy as xl

DEV = xl.device()


def _train(model: torch.nn.Module, device: str) -> list[tuple[float, list[float]]]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=2.0**16, growth_interval=2)
    seen = []
    for step in range(6):
        opt.zero_grad()
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
        if step == 3:
            x[0, 0] = float("inf")  # this step is skipped and the scale backs off
        loss = model(x.to(device)).square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if device != "cpu":
            xl.sync()
        seen.append((scaler.get_scale(), model.weight.detach().cpu().flatten().tolist()))
    return seen


def test_training_with_a_grad_scaler_equals_eager():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 4)
    got = _train(copy.deepcopy(ref).to(DEV), DEV)
    want = _train(ref, "cpu")
    scales = [65536.0, 131072.0, 131072.0, 65536.0, 65536.0, 131072.0]
    assert [s for s, _ in got] == [s for s, _ in want] == scales
    for (_, w_got), (_, w_want) in zip(got, want, strict=True):
        torch.testing.assert_close(w_got, w_want, rtol=1e-6, atol=1e-7)
    assert got[3][1] == got[2][1]  # the step with an inf gradient was skipped


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_unscale_is_the_cpu_kernels_to_the_bit(dtype):
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(5, 3, generator=g).to(dtype) * 100 for _ in range(3)]
    grads[1][2, 1] = float("nan")
    inv = torch.tensor(1 / 3)  # not a power of two: rounding shows
    for found_at_start in (0.0, 1.0):
        cpu = [t.clone() for t in grads]
        dev = [t.to(DEV) for t in grads]
        found = torch.tensor([found_at_start]), torch.tensor([found_at_start]).to(DEV)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found[0], inv)
        torch._amp_foreach_non_finite_check_and_unscale_(dev, found[1], inv.to(DEV))
        for a, b in zip(dev, cpu, strict=True):
            torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)
        assert found[1].cpu().item() == found[0].item() == 1.0


@pytest.mark.parametrize("found_inf, tracker", [(0.0, 0), (0.0, 2), (1.0, 2)])
def test_update_scale_is_the_cpu_kernels_to_the_bit(found_inf, tracker):
    args = (1.7, 0.3, 3)  # growth, backoff, interval: rounding shows
    for scale0 in (3.1, 3.0e38):  # the second would overflow float32 if it grew
        scale, track, found = (
            torch.tensor([scale0]),
            torch.tensor([tracker], dtype=torch.int32),
            torch.tensor([found_inf]),
        )
        dev = [t.to(DEV) for t in (scale, track, found)]
        torch._amp_update_scale_(scale, track, found, *args)
        out = torch._amp_update_scale_(*dev, *args)
        assert out is dev[0]
        torch.testing.assert_close(dev[0].cpu(), scale, rtol=0, atol=0)
        assert dev[1].cpu().item() == track.item()
