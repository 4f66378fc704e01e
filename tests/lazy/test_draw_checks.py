"""Random draws take eager's parameters (the defaults of those not given) and refuse what eager
refuses: numbers at the call, tensors on the device (lazy and compiled); integer powers with a
negative integer exponent raise as in eager."""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.device_checks import DeviceCheckError

DEV = xl.device()
N = 20_000


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="xlacache")


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_a_fill_given_fewer_parameters_takes_eagers_defaults(compiled):
    def fills(x):
        return x.clone().uniform_(0.5), x.clone().normal_(2.0), x.clone().log_normal_(0.0)

    run = _compiled(fills) if compiled else fills
    uniform, normal, log_normal = (t.cpu() for t in run(torch.zeros(N).to(DEV)))
    assert uniform.min() >= 0.5 and uniform.max() < 1.0 and uniform.std() > 0.1  # [0.5, 1)
    assert abs(normal.mean() - 2.0) < 0.1 and abs(normal.std() - 1.0) < 0.1  # std 1, not 0
    assert abs(log_normal.log().std() - 2.0) < 0.1  # std 2


REFUSED = {  # a draw with numbers eager refuses, and eager's message
    "bernoulli_": (lambda x: x.bernoulli_(1.5), "bernoulli_ expects p to be in \\[0, 1\\]"),
    "bernoulli p": (lambda x: torch.bernoulli(x, p=-0.5), "but got p=-0.5"),
    "normal_": (lambda x: x.normal_(0.0, -1.0), "normal expects std >= 0.0, but found std -1"),
    "log_normal_": (lambda x: x.log_normal_(0.0, -1.0), "log_normal_ expects std > 0.0"),
    "exponential_": (lambda x: x.exponential_(-1.0), "exponential_ expects lambda > 0.0"),
    "uniform_": (lambda x: x.uniform_(2.0), "from=2 > to=1"),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_numbers_eager_refuses_raise_eagers_error(name, compiled):
    draw, message = REFUSED[name]
    with pytest.raises(RuntimeError, match=message):
        draw(torch.zeros(2))
    run = _compiled(lambda x: draw(x) * 2) if compiled else draw
    with pytest.raises(RuntimeError, match=message):
        run(torch.zeros(2).to(DEV)).cpu()


CHECKED = {  # a draw with tensor parameters, given one bad value
    "bernoulli": (lambda p: torch.bernoulli(p), [0.5, 1.5]),
    "bernoulli nan": (lambda p: torch.bernoulli(p), [0.5, float("nan")]),
    "bernoulli_": (lambda p: torch.zeros_like(p).bernoulli_(p), [0.5, -0.5]),
    "normal": (lambda s: torch.normal(torch.zeros_like(s), s), [1.0, -1.0]),
    "normal float mean": (lambda s: torch.normal(1.0, s), [1.0, -1.0]),
    "normal nan": (lambda s: torch.normal(torch.zeros_like(s), s), [1.0, float("nan")]),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
@pytest.mark.parametrize("name", sorted(CHECKED))
def test_tensor_parameters_eager_refuses_raise_at_the_read(name, compiled):
    draw, bad = CHECKED[name]
    with pytest.raises(RuntimeError):
        draw(torch.tensor(bad))
    run = _compiled(lambda t: draw(t) * 2) if compiled else draw
    before = metrics.counter_value("CompiledGraphExecute") or 0
    out = run(torch.tensor(bad).to(DEV))
    with pytest.raises(DeviceCheckError, match="bernoulli expects|normal expects all elements"):
        out.cpu()
    if compiled:  # the compiled program checked it (not a lazy run)
        assert (metrics.counter_value("CompiledGraphExecute") or 0) == before + 1
    good = run(torch.tensor([0.0, 1.0]).to(DEV)).cpu()  # and good values run on
    assert good.shape == (2,)
    if name.startswith("bernoulli"):
        assert good.tolist() == ([0.0, 2.0] if compiled else [0.0, 1.0])


def test_tensor_parameters_draw_eagers_distribution():
    p = torch.full((N,), 0.25).to(DEV)
    assert abs(torch.zeros(N).to(DEV).bernoulli_(p).mean().item() - 0.25) < 0.02
    assert abs(torch.bernoulli(p).mean().item() - 0.25) < 0.02
    mean, std = torch.full((N,), 3.0).to(DEV), torch.full((N,), 2.0).to(DEV)
    for drawn in (torch.normal(mean, std), torch.normal(3.0, std), torch.normal(mean, 2.0)):
        drawn = drawn.cpu()
        assert abs(drawn.mean() - 3.0) < 0.1 and abs(drawn.std() - 2.0) < 0.1


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_an_integer_to_a_negative_integer_power_raises(compiled):
    message = "Integers to negative integer powers are not allowed"
    with pytest.raises(RuntimeError, match=message):
        torch.tensor([2, 3]) ** -1
    run = _compiled(lambda x: x**-1) if compiled else (lambda x: x**-1)
    with pytest.raises(RuntimeError, match=message):
        run(torch.tensor([2, 3]).to(DEV)).cpu()
    with pytest.raises(RuntimeError, match=message):
        torch.tensor([2, 3]).to(DEV).pow_(-2)
    # a float base, and a tensor exponent, give eager's values
    x, e = torch.tensor([2, -1, 1]), torch.tensor([-1, -3, -2])
    assert torch.equal((x.to(DEV) ** e.to(DEV)).cpu(), x**e)
    assert torch.equal((x.to(DEV).float() ** -1).cpu(), x.float() ** -1)
