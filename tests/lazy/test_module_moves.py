"""Moving a module between devices and back: parameters, gradients and optimizer steps stay
right whichever way ``Module._apply`` moves them (torch's default ``.data`` assignment, or
swapping the tensors: ``torch.__future__.set_swap_module_params_on_conversion(True)``, which a
tensor subclass such as a lazy tensor always takes)."""

import pytest
import torch

import xlacache.lazy as xl

from .models import GPT


@pytest.fixture(params=[False, True], ids=["set_data", "swap"])
def swap(request):
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(request.param)
    yield request.param
    torch.__future__.set_swap_module_params_on_conversion(before)


@pytest.mark.slow
def test_a_trained_module_moves_to_the_device_and_back(swap):
    dev = xl.device()
    torch.manual_seed(0)
    model = GPT()  # tied weights: one parameter in two modules
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randint(0, 64, (2, 16))
    model(x).sum().backward()
    opt.step()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.to(dev)  # with its gradients
    assert all(p.device.type == "xla" for p in model.parameters())
    assert model.tok.weight is model.head.weight
    assert all(isinstance(p, torch.nn.Parameter) for p in model.parameters())
    assert model.head.weight.grad is not None and model.head.weight.grad.device.type == "xla"
    model.to("cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    # back to a plain tensor, torch's ``.data`` path makes a new Parameter per module (only
    # swapping keeps one object): tied weights come back untied, as docs/lazy.md says
    assert (model.tok.weight is model.head.weight) == swap
    model.tok.weight = model.head.weight
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    model.to(dev)  # and again, then a step on the device equals one on the CPU
    ref = GPT()
    ref.load_state_dict(before)
    for m in (model, ref):
        m.zero_grad()
        m(x.to(next(m.parameters()).device)).square().mean().backward()
        torch.optim.SGD(m.parameters(), lr=0.1).step()
    xl.mark_step()  # one program for the step, not one per parameter read below
    for (k, a), b in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        assert torch.allclose(a.cpu(), b, atol=1e-5), k


def test_a_module_on_the_meta_device_moves_with_to_empty():
    dev = xl.device()
    with torch.device("meta"):
        model = torch.nn.Linear(4, 3)
    with pytest.raises(NotImplementedError, match="to_empty"):  # as for any device
        model.to(dev)
    model.to_empty(device=dev)
    assert model.weight.device.type == "xla" and model(torch.ones(2, 4, device=dev)).shape == (2, 3)


@pytest.mark.filterwarnings("ignore:.*weight_norm.*is deprecated:FutureWarning")
def test_the_deprecated_weight_norm_works_when_applied_after_the_move():
    """As docs/lazy.md says: applied before, its computed ``weight`` holds ``weight_g`` in an
    autograd graph, so torch refuses the swap; applied after the move, it trains."""
    from torch.nn.utils import weight_norm

    dev = xl.device()
    with pytest.raises(RuntimeError, match="Couldn't swap Linear.weight_g"):
        weight_norm(torch.nn.Linear(6, 8)).to(dev)
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 8)
    moved = weight_norm(torch.nn.Linear(6, 8).to(dev))
    moved.load_state_dict({k: v.to(dev) for k, v in weight_norm(ref).state_dict().items()})
    x = torch.randn(3, 6)
    ref(x).square().sum().backward()
    moved(x.to(dev)).square().sum().backward()
    torch.testing.assert_close(moved.weight_v.grad.cpu(), ref.weight_v.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(moved.weight_g.grad.cpu(), ref.weight_g.grad, rtol=1e-5, atol=1e-6)
