"""What the seeds promise: device mixing errors, in-place view ops as eager, GRU trains."""

from __future__ import annotations

import copy
import random

import pytest
import torch

import xlacache.lazy as xl

pytestmark = pytest.mark.slow  # measured: most tests here take seconds

dev = xl.device()


def test_cpu_module_applied_to_a_device_tensor_raises():
    # seed 001: "code like this will throw an error since the torch.nn.Linear module is on the CPU"
    l_in = torch.randn(10, device=dev)
    linear = torch.nn.Linear(10, 20)
    with pytest.raises(RuntimeError, match="not an XLA tensor.*torch.FloatTensor"):
        linear(l_in)
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        linear(torch.randn(3, 10, device=dev))
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        torch.randn(4, 10, device=dev) + torch.ones(10)
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        torch.where(torch.ones(3, device=dev) > 0, torch.ones(3, device=dev), torch.zeros(3))
    # and the same module moved to the device works
    out = linear.to(dev)(l_in)
    assert out.shape == (20,) and out.device == dev


def test_what_eager_allows_still_mixes():
    a = torch.arange(6.0)
    x = a.to(dev)
    assert (x * torch.tensor(2.0)).cpu().tolist() == (a * 2).tolist()  # 0-dim CPU: a scalar
    assert (x + torch.tensor(3)).cpu().tolist() == (a + 3).tolist()
    assert x[torch.tensor([0, 4])].cpu().tolist() == [0.0, 4.0]  # CPU index tensors
    y = x.clone()
    y[torch.tensor([1, 2])] = torch.tensor([7.0, 8.0])
    z = a.clone()
    z[torch.tensor([1, 2])] = torch.tensor([7.0, 8.0])
    assert torch.equal(y.cpu(), z)
    y[1:3] = torch.tensor([5.0, 6.0])  # copy_ from CPU into a device view
    z[1:3] = torch.tensor([5.0, 6.0])
    assert torch.equal(y.cpu(), z)


def _check(fn):
    """Run ``fn`` on CPU tensors and on device copies; every returned tensor must match."""
    torch.manual_seed(0)
    base = torch.arange(24.0).reshape(4, 6) - 7
    other = torch.randn(4, 6)
    want = fn(base.clone(), other.clone())
    got = fn(base.clone().to(dev), other.clone().to(dev))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.device == dev, i
        assert tuple(g.shape) == tuple(w.shape), (i, g.shape, w.shape)
        torch.testing.assert_close(g.cpu(), w, msg=f"output {i}")


def _t_masked_fill(a, b):
    a.t_()
    a.masked_fill_(a > 2, 0.5)
    return [a, a.sum(0)]


def _transpose_keeps_old_views(a, b):
    row = a[1]
    a.transpose_(0, 1)
    a.mul_(2)
    a[0].add_(100)
    return [a, row, a.t()]


def _swapdims(a, b):
    a.swapdims_(0, 1)
    v = a[2:]
    v.sub_(b.t()[2:])
    a.swapaxes_(1, 0)
    return [a, v, a + 1]


def _unsqueeze_squeeze(a, b):
    a.unsqueeze_(1)
    s1 = a.shape
    a.add_(b.unsqueeze(1))
    a.squeeze_()
    c = a[:1].unsqueeze(0)
    c.squeeze_(0)
    c.squeeze_(0)
    c.mul_(-1)
    d = a.clone().unsqueeze(0).unsqueeze(2)
    d.squeeze_((0, 2))
    return [a, torch.zeros(s1, device=a.device), c, d]


def _view_t_then_write(a, b):
    v = a[1:3]
    v.t_()
    v.add_(b[1:3].t())
    return [a, v]


def _slices_of_slices(a, b):
    v = a[1:]
    w = v[:, 2:]
    w[0].fill_(7)
    a[::2][1:].mul_(3)
    a.view(-1)[2:5].add_(1)
    a[:, ::3][2:, 1].sub_(b[2:, 0])
    return [a, v, w]


def _as_strided_views(a, b):
    v = a[1:]  # contiguous: its own elements are storage elements 6..23 in eager
    s = v.as_strided((2, 3), (1, 2))
    s2 = a.as_strided((3,), (5,), 2)  # explicit offset into the storage
    v.as_strided_((3, 2), (2, 1))
    v.mul_(10)
    return [a, s, s2, v, v.as_strided((2,), (4,))]


def test_as_strided_past_a_views_own_elements_raises():
    a = torch.arange(12.0).to(dev)
    with pytest.raises(RuntimeError, match="reaches past the 4 elements"):
        a[4:8].as_strided((2,), (5,))  # eager reads a[4], a[9]: outside the view
    assert a[4:8].as_strided((2,), (3,)).cpu().tolist() == [4.0, 7.0]


def _resize(a, b):
    a = a.clone()
    a.resize_(3, 8)
    a.add_(1)
    c = b.clone()
    c.resize_(2, 5)  # shrink: the first 10 elements
    d = b[1:].clone()
    d.resize_as_(torch.empty(9))
    return [a, c, d]


def _resize_grows(a, b):
    c = a.clone()
    c.resize_(30)
    return [c[:24]]  # past the old elements eager memory is uninitialised


def _set_aliases(a, b):
    c = torch.zeros(2, device=a.device)
    c.set_(b)
    b.mul_(2)
    c[0].fill_(9)
    return [c, b]


def _detach_and_alias_write_through(a, b):
    d = a.detach()
    d[0].zero_()
    e = a.view(6, 4)
    e.t_()
    e[0].fill_(-3)
    return [a, d, e]


def _copy_from_an_alias_written_through_another(a, b):
    # load_state_dict after torch.distributed.checkpoint.load: the value was written into
    # a detached alias of the state dict's alias, then copied from that alias into itself
    held = a.detach()
    held.detach().copy_(b)
    a.copy_(held)
    c = b[1:].detach()
    c.detach()[0].fill_(5)  # through a view's alias
    b[1:].copy_(c)
    return [a, held, b, c]


@pytest.mark.parametrize(
    "fn",
    [
        _t_masked_fill,
        _transpose_keeps_old_views,
        _swapdims,
        _unsqueeze_squeeze,
        _view_t_then_write,
        _slices_of_slices,
        _as_strided_views,
        _resize,
        _resize_grows,
        _set_aliases,
        _detach_and_alias_write_through,
        _copy_from_an_alias_written_through_another,
    ],
)
def test_inplace_view_ops_match_eager(fn):
    _check(fn)


def _random_alias_program(seed: int, device) -> tuple[list[torch.Tensor], list[str]]:
    """Aliases, views and in-place writes through them, drawn from ``seed``: every tensor."""
    rng = random.Random(seed)
    ts = [
        torch.arange(24.0).reshape(4, 6).to(device),
        torch.linspace(-3, 8, 24).view(4, 6).to(device),
    ]
    log: list[str] = []
    for step in range(12):
        i = rng.randrange(len(ts))
        t, s = ts[i], ts[rng.randrange(len(ts))]
        k = rng.choice("ddtsvaccmfg")
        if k == "d":
            ts.append(t.detach())
        elif k == "t" and t.dim() == 2:
            ts.append(t.t())
        elif k == "s" and t.shape[0] > 1:
            ts.append(t[1:])
        elif k == "v":
            ts.append(t.reshape(-1))
        elif k == "a":
            t.add_(1.5)
        elif k == "c" and s.shape == t.shape:
            t.copy_(s)
        elif k == "m":
            t.detach().mul_(2)  # a write through a temporary alias
        elif k == "f" and t.dim() >= 1:
            t[0].fill_(step)
        elif k == "g" and s.shape == t.shape:
            t.add_(s * 0.25)
        log.append(f"{k}{i}")
    return ts, log


def test_random_alias_and_view_writes_match_eager():
    for seed in range(40):
        want, log = _random_alias_program(seed, "cpu")
        got, _ = _random_alias_program(seed, dev)
        for n, (g, w) in enumerate(zip(got, want, strict=True)):
            assert torch.equal(g.cpu(), w), (seed, n, log)


def test_inplace_view_op_survives_sync():
    a = torch.arange(6.0).reshape(2, 3).to(dev)
    v = a[0]
    a.t_()
    xl.sync()
    a.add_(1)
    xl.sync()
    assert a.shape == (3, 2) and a.stride() == (2, 1)
    assert a.cpu().tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert v.cpu().tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM])
def test_batch_first_rnn_trains_like_eager(cell):
    torch.manual_seed(0)
    rnn = cell(4, 8, num_layers=2, batch_first=True)
    head = torch.nn.Linear(8, 3)
    batches = [(torch.randn(2, 5, 4), torch.randint(0, 3, (2,))) for _ in range(4)]

    def train(device):
        r, h = copy.deepcopy(rnn).to(device), copy.deepcopy(head).to(device)
        opt = torch.optim.SGD([*r.parameters(), *h.parameters()], lr=0.1)
        losses = []
        for x, y in batches:
            opt.zero_grad()
            out, _ = r(x.to(device))
            loss = torch.nn.functional.cross_entropy(h(out[:, -1]), y.to(device))
            loss.backward()
            opt.step()
            if device == dev:
                xl.sync()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in r.parameters()]

    want, want_params = train(torch.device("cpu"))
    got, got_params = train(dev)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for g, w in zip(got_params, want_params, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-5)
