"""Boolean masks as indices: ``x[m]``, ``x[m] = v``, ``x[m] += v``, ``index_put`` with a mask,
and their gradients (a masked loss), each as eager computes it, errors included.

A mask selects as many elements as it holds true ones, known only from the data: eager expands
each mask into the positions of its true elements (``nonzero``), and so does the device (the
mask is read, as torch_xla reads it; ``x`` stays on the device). A put of values that have no
dimension for the selection (a scalar, a row for each selected row) stays one graph op.
"""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy import metrics

dev = xl.device()


def _both(fn, *tensors):
    """``fn`` on CPU tensors and on device copies: (eager result or error, device's)."""
    out = []
    for d in ("cpu", dev):
        try:
            got = fn(*[t.clone().to(d) for t in tensors])
            out.append(tuple(g.cpu() for g in got) if isinstance(got, tuple) else got.cpu())
        except (IndexError, RuntimeError) as e:
            out.append(type(e))
    return out


x3 = torch.randn(4, 5, 3)
CASES = {
    "select": lambda x: x[x[..., 0] > 0],
    "select 2-d mask": lambda x: x[x.sum(-1) > 0],
    "select after a slice": lambda x: x[:, x[0, :, 0] > 0],
    "select and a long index": lambda x: x[x[:, 0, 0] > 0, torch.tensor([1, 3]).to(x.device)[:1]],
    "select nothing": lambda x: x[x > 100],
    "put a scalar": lambda x: x.index_put((x > 0,), torch.tensor(0.5).to(x.device)),
    "put a row each": lambda x: x.index_put((x[..., 0] > 0,), torch.arange(3.0).to(x.device)),
    "put the selection": lambda x: _put(x, x > 0, lambda s: s * 2),
    "put rows": lambda x: _put(x, x[..., 0] > 0, lambda s: s.flip(-1)),
    "put after a slice": lambda x: _put(x, x[0, :, 0] > 0, lambda s: s + 1, lead=1),
    "add the selection": lambda x: x.index_put((x > 0,), x[x > 0] * 2, accumulate=True),
    "add a scalar": lambda x: x.index_put((x < 0,), torch.tensor(2.0).to(x.device), True),
    "setitem": lambda x: _setitem(x),
    "imul": lambda x: _imul(x),
    "too few values": lambda x: x.index_put((x > 0,), x[x > 0][1:]),
    "mask of the wrong shape": lambda x: x[torch.ones(3, dtype=torch.bool).to(x.device)],
    # uint8 index tensors are masks to eager still (deprecated, with a warning)
    "select by a byte mask": lambda x: x[(x[..., 0] > 0).to(torch.uint8)],
    "a 0-d byte mask": lambda x: x[torch.tensor(1, dtype=torch.uint8).to(x.device)],
    "put rows by a byte mask": lambda x: _put(x, (x[..., 0] > 0).byte(), lambda s: s.flip(-1)),
    "put one value by a byte mask": lambda x: x.index_put(((x > 0).byte(),), x[0, 0, :1]),
    "byte mask and a long index": lambda x: x.index_put(
        ((x[:, 0, 0] > 0).byte(), torch.tensor([1]).to(x.device)), torch.tensor(7.0).to(x.device)
    ),
}


def _put(x, m, f, lead=0):
    if not lead:
        return x.index_put((m,), f(x[m]))
    x[:, m] = f(x[:, m])  # index_put_ with indices (None, m)
    return x


def _setitem(x):
    m = x > 0
    x[m] = torch.arange(float(m.sum().item())).to(x.device)
    return x


def _imul(x):
    m = x[..., 1] > 0
    x[~m] *= 2
    x[m] += x[m].flip(0)
    return x


@pytest.mark.filterwarnings("ignore:indexing with dtype torch.uint8")
@pytest.mark.parametrize("name", list(CASES))
def test_a_mask_selects_and_puts_what_eager_does(name):
    eager, got = _both(CASES[name], x3)
    if isinstance(eager, type):
        assert got is eager, f"eager raised {eager.__name__}, the device {got}"
    else:
        assert torch.equal(got, eager), (name, got, eager)


def test_a_byte_mask_warns_as_eager_does():
    x = torch.randn(4, 3).to(dev)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        picked = x[(x[:, 0] > 0).to(torch.uint8)]
    assert torch.equal(picked.cpu(), x.cpu()[x.cpu()[:, 0] > 0])


def test_a_put_of_values_shaped_like_each_selected_element_reads_no_mask():
    x = torch.randn(6, 4).to(dev)
    xl.sync()
    before = metrics.counter_value("aten::nonzero") or 0
    y = x.index_put((x[:, 0] > 0,), torch.arange(4.0).to(dev))  # where, in the graph
    x[x > 1] = 0.0
    assert (metrics.counter_value("aten::nonzero") or 0) == before
    x[x > 0] = x[x > 0] * 3  # a selection's shape: the mask is read
    assert (metrics.counter_value("aten::nonzero") or 0) > before
    assert y.shape == (6, 4)


def test_a_masked_loss_trains_as_in_eager():
    """The gradient of ``x[m]`` puts the selection's gradient back through the mask."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 5)
    data, target = torch.randn(8, 5), torch.randn(8, 5)
    results = []
    for d in ("cpu", dev):
        m = torch.nn.Linear(5, 5)
        m.load_state_dict(model.state_dict())
        m.to(d)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            x, y = data.to(d), target.to(d)
            keep = y > 0
            loss = ((m(x) - y)[keep] ** 2).mean() + m(x)[~keep].abs().sum() * 0.01
            opt.zero_grad()
            loss.backward()
            opt.step()
            if d != "cpu":
                xl.sync()
            losses.append(loss.item())
        results.append((losses, m.weight.detach().cpu()))
    (eager_losses, eager_w), (losses, w) = results
    torch.testing.assert_close(losses, eager_losses, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w, eager_w, rtol=1e-5, atol=1e-6)
