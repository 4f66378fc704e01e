"""What a compiled or lazy step does not spend: activations it can recompute, programs for
zero tangents, a thread handoff per backward (values equal eager throughout)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from functorch.compile import default_partition

import xlacache.lazy as xl
from tests.lazy.test_dynamo import _count, _fresh_dynamo  # noqa: F401 - its fixture too
from xlacache.lazy.dynamo import backend, program

DEV = xl.device()


def _graphs(monkeypatch: pytest.MonkeyPatch) -> list:
    seen: list = []
    runtime_for = backend.runtime_for

    def spy(gm, what):
        seen.append(runtime_for(gm, what))
        return seen[-1]

    monkeypatch.setattr(backend, "runtime_for", spy)
    return seen


def _chain(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (torch.sin(x).cos() * w).exp().sum()


@pytest.mark.parametrize("partition", ["min_cut", "default"])
def test_the_forward_saves_what_the_backward_cannot_cheaply_recompute(monkeypatch, partition):
    """AOTAutograd's min-cut partitioner (Inductor's, torch_xla's): the pointwise chain is
    recomputed in the backward program, so the forward returns its loss alone, not three
    saved intermediates (each a device buffer and a wrapper tensor per step)."""
    if partition == "default":  # the check itself: PyTorch's default partition saves them
        monkeypatch.setattr(backend, "min_cut_rematerialization_partition", default_partition)
    graphs = _graphs(monkeypatch)
    x, w = torch.randn(6, 5), torch.randn(6, 5)
    xd, wd = (t.to(DEV).requires_grad_() for t in (x, w))
    torch.compile(_chain, backend="xlacache")(xd, wd).backward()
    x.requires_grad_(), w.requires_grad_()
    _chain(x, w).backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(wd.grad.cpu(), w.grad)
    forward = next(g for g in graphs if g.what == "forward")
    assert (forward.plan.n_device_outputs == 1) == (partition == "min_cut")


def _two_outputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x @ w
    return h.tanh().sum(), h * 3  # the loss uses the first only: the second's tangent is 0


def test_zero_tangents_run_no_program_and_equal_eager():
    x, w = torch.randn(4, 3), torch.randn(3, 3)
    xd, wd = x.to(DEV), w.to(DEV).requires_grad_()
    fn = torch.compile(_two_outputs, backend="xlacache")
    for _ in range(2):  # the second call: the arrays of zeros are shared
        wd.grad = None
        loss, _unused = fn(xd, wd)
        before = _count("ExecuteComputation"), _count("CompiledGraphExecute")
        loss.backward()
        assert (_count("ExecuteComputation"), _count("CompiledGraphExecute")) == (
            before[0],  # autograd's zeros tangent was not computed as a lazy graph
            before[1] + 1,
        )
        xl.sync()
    w.requires_grad_()
    _two_outputs(x, w)[0].backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad)


def test_a_zeros_input_the_program_updates_is_its_own_buffer():
    """An updated input's buffer may be donated: a pending zeros value updated in place is
    computed for it, never a shared array of zeros (whose later users would find it gone)."""

    def accumulate(buf: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        buf.add_(x)
        return buf * 2

    fn = torch.compile(accumulate, backend="xlacache")
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(3):
        buf = torch.zeros(2, 3, device=DEV)
        out = fn(buf, x.to(DEV))
        torch.testing.assert_close(buf.cpu(), x)
        torch.testing.assert_close(out.cpu(), x * 2)
        xl.sync()
    shared = program.zeros_array(torch.zeros(2, 3, device=DEV)._c._v[0])
    assert shared is not None and not shared.is_deleted()
    assert not np.asarray(shared).any()


def _backward_thread() -> int:
    seen: list[int] = []
    x = torch.ones(3, device=DEV, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(threading.get_ident()))
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 2.0))
    return seen[0]


def _in_new_thread(fn) -> tuple[int, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(timeout=60)
    assert out, "the thread did not finish"
    return t.ident, out


def test_backward_runs_on_the_thread_that_started_it(monkeypatch):
    """The lazy runtime's backward is Python dispatching device work: the thread that uses
    the device runs it, with no handoff to torch's device thread and back per backward."""

    def run():
        undo = xl._backward_on_this_thread()
        here = _backward_thread()
        undo()
        there = _backward_thread()  # torch's own: its autograd thread for the xla device
        return here, there

    ident, [(here, there)] = _in_new_thread(run)
    assert here == ident
    assert there != ident


def test_backward_threads_kept_when_asked(monkeypatch):
    monkeypatch.setenv("XLACACHE_LAZY_AUTOGRAD_THREADS", "1")

    def run():
        assert xl._backward_on_this_thread() is None
        return _backward_thread()

    ident, [where] = _in_new_thread(run)
    assert where != ident


def test_step_counters_advance_in_one_op_and_other_host_updates_as_traced(monkeypatch):
    """AdamW's ``step`` counters (0-d CPU tensors) only add 1: one ``_foreach_add_`` in
    place; any other update of a CPU tensor runs the graph's host part."""
    graphs = _graphs(monkeypatch)
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    model = torch.nn.Linear(3, 2).to(DEV)
    model.load_state_dict(ref.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in (ref, model)]
    step = torch.compile(opts[1].step, backend="xlacache")
    for _ in range(3):
        x = torch.randn(4, 3)
        for m, opt, run in ((ref, opts[0], opts[0].step), (model, opts[1], step)):
            opt.zero_grad()
            m(x.to(next(m.parameters()).device)).square().sum().backward()
            run()
    xl.sync()
    torch.testing.assert_close(model.weight.cpu(), ref.weight.detach())
    counters = [s["step"] for s in opts[1].state.values()]
    assert [c.item() for c in counters] == [3.0, 3.0] and counters[0].device.type == "cpu"
    (update,) = [g for g in graphs if g.what == "inference"]
    assert update.plan.counter_step == 1

    def halve(n: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n.mul_(0.5)
        return x * n

    n = torch.tensor(3.0)
    out = torch.compile(halve, backend="xlacache")(n, torch.ones(2).to(DEV))
    assert graphs[-1].plan.counter_step is None and n.item() == 1.5
    torch.testing.assert_close(out.cpu(), torch.full((2,), 1.5))
