"""torch's control-flow operators on lazy tensors (``control_flow.py``): ``torch.cond``,
``while_loop``, ``scan`` and ``map`` give eager's values and gradients, in lazy tracing and in
``torch.compile``, where a graph holding one runs lazily, with its reason."""

from __future__ import annotations

import warnings

import pytest
import torch
from functorch.experimental.control_flow import map as control_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc

dev = xl.device()


def _cond(x):
    return torch.cond(x.sum() > 2, lambda t: (t * t).sin(), lambda t: t - 1, (x,))


def _while(x):
    return while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t * 2), (x.new_zeros(()), x))


def _scan(x):
    return scan(lambda c, e: (c * e + 1, c.sin()), torch.ones_like(x[0]), x)


def _scan_loop(x):  # what scan means, as a Python loop
    c, ys = torch.ones_like(x[0]), []
    for e in x:
        c, y = c * e + 1, c.sin()
        ys.append(y)
    return c, torch.stack(ys)


def _map(x):
    return control_map(lambda a, b: (a * b).exp(), x, x.sum() / 8)


def _values(out):
    return [t.detach().cpu() for t in (out if isinstance(out, (tuple, list)) else [out])]


@pytest.mark.parametrize("fn", [_cond, _while, _scan, _map])
@pytest.mark.parametrize("x", [[1.0, 2.0], [[0.5, -1.0], [2.0, 3.0], [1.5, 0.25]]])
def test_control_flow_runs_as_eager(fn, x):
    x = torch.tensor(x)
    if fn is _while:
        x = x.long()
    want = _values(fn(x))
    got = _values(fn(x.to(dev)))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def _backward(out):
    sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()


@pytest.mark.parametrize("fn", [_cond, _scan, _map])
def test_control_flow_gradients_are_eagers(fn):
    """Against eager; for ``scan``, against its Python loop (torch 2.9's eager ``scan`` loses
    the gradients of all but the last element; later releases agree with the loop)."""
    x = torch.tensor([[0.5, -1.0], [2.0, 3.0], [1.5, 0.25]], requires_grad=True)
    out = (_scan_loop if fn is _scan else fn)(x)
    _backward(out)
    d = x.detach().to(dev).requires_grad_()
    got = fn(d)
    _backward(got)
    for g, w in zip(_values(got), _values(out), strict=True):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(d.grad.cpu(), x.grad)


class _Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        return torch.cond(x.mean() > 0, lambda t: self.lin(t), lambda t: self.lin(-t).relu(), (x,))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_module_with_cond_trains_as_eager(compiled):
    """Both branches taken over the steps; compiled, each graph holding the operator runs
    lazily and says why."""
    torch.manual_seed(0)
    model = _Gated()
    dmodel = _Gated().to(dev)
    dmodel.load_state_dict(model.state_dict())
    run = torch.compile(dmodel, backend="xlacache") if compiled else dmodel
    opt, dopt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, dmodel))
    for step in range(4):
        x = torch.randn(3, 2) * (1 if step % 2 else -1)
        for o, f, inp in ((opt, model, x), (dopt, run, x.to(dev))):
            o.zero_grad()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f(inp).pow(2).sum().backward()
            o.step()
    for p, q in zip(model.parameters(), dmodel.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach())
    if compiled:
        assert "true_graph_0 is a control-flow operator's subgraph" in " ".join(
            xc.report()["fallback_reasons"]
        )


def test_uninstall_takes_the_rules_back_and_the_next_use_installs_them():
    x = torch.tensor([1.0, 2.0], device=dev)
    xl.uninstall()
    try:
        with pytest.raises(NotImplementedError, match="no rule registered for HOP cond"):
            _cond(x)
    finally:
        xl.device()
    torch.testing.assert_close(_cond(x).cpu(), _cond(x.cpu()))
