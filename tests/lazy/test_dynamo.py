"""torch.compile(backend="xlacache"): Dynamo graphs of lazy tensors as cached executables."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
import torch.nn as nn

import xlacache
import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc
from tests.conftest import run_python
from tests.lazy.models import MLP
from xlacache.lazy import metrics
from xlacache.lazy.torch_internals import lazy_inner_tensors, torch_version

DEV = xl.device()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _count(name: str) -> int:
    return metrics.counter_value(name) or 0


def _train(model: nn.Module, fn, dev, steps: int = 3, adam: bool = True) -> list[float]:
    params = model.parameters()
    opt = torch.optim.AdamW(params, lr=1e-2) if adam else torch.optim.SGD(params, lr=0.1)
    losses = []
    for step in range(steps):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step)).to(dev)
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dev != "cpu":
            xl.sync()
        losses.append(loss.item())
    return losses


def test_backend_is_registered():
    assert "xlacache" in torch._dynamo.list_backends()


def test_training_equals_eager():
    torch.manual_seed(0)
    ref = MLP()
    model = copy.deepcopy(ref).to(DEV)
    before = {n: _count(n) for n in ("CompiledGraph", "CompiledGraphExecute", "TracedOps")}
    want = _train(ref, ref, "cpu")
    got = _train(model, torch.compile(model, backend="xlacache"), DEV)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    assert _count("CompiledGraph") - before["CompiledGraph"] == 2  # forward and backward
    assert _count("CompiledGraphExecute") - before["CompiledGraphExecute"] == 6


def test_steady_call_traces_no_model_op():
    torch.manual_seed(0)
    model = MLP().to(DEV)
    fn = torch.compile(model, backend="xlacache")
    x = torch.randn(4, 16).to(DEV)
    xl.sync()
    with torch.no_grad():
        fn(x)
        xl.sync()  # flushes the trace counter
        before = _count("TracedOps")
        out = fn(x)
        xl.sync()
    assert _count("TracedOps") == before  # the forward ran as one executable
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(out.cpu(), want.cpu())


class _Breaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h * 2)


def test_graph_break_equals_eager_and_is_counted():
    torch.manual_seed(0)
    ref = _Breaks()
    model = copy.deepcopy(ref).to(DEV)
    want = _train(ref, ref, "cpu")
    got = _train(model, torch.compile(model, backend="xlacache"), DEV)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    report = xc.report()
    assert report["DynamoGraphBreak"] >= 1
    assert "DynamoGraphBreak" in xl.metrics_report()


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.nonzero(x > 0) * 2,  # a data-dependent shape: Dynamo breaks the graph
        lambda x: (x + 1) if torch.allclose(x, x * 1.0) else x,  # a Python bool from a tensor
        lambda x: torch.unique(x.round()).sum() + x.mean(),
    ],
    ids=["nonzero", "allclose", "unique"],
)
def test_data_dependent_ops_break_the_graph_and_equal_eager(fn):
    """After such a break Python runs the op eagerly on lazy tensors: the runtime's own
    frames must run as they are, not be compiled by Dynamo as user code."""
    torch._dynamo.reset()
    x = torch.randn(5, 4)
    got = torch.compile(fn, backend="xlacache")(x.to(DEV))
    torch.testing.assert_close(got.cpu(), fn(x))


def test_recompile_on_new_shape():
    torch.manual_seed(0)
    model = MLP().to(DEV)
    fn = torch.compile(model, backend="xlacache", dynamic=False)
    before = _count("CompiledGraph")
    for n in (4, 6):
        x = torch.randn(n, 16)
        with torch.no_grad():
            got = fn(x.to(DEV)).cpu()
            want = model(x.to(DEV)).cpu()
        torch.testing.assert_close(got, want)
    assert _count("CompiledGraph") - before == 2
    assert any("size" in r or "shape" in r for r in xc.report()["recompile_reasons"])


def test_buffer_mutation_equals_eager():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8))
    model = copy.deepcopy(ref).to(DEV)
    # SGD: Adam's normalized steps would amplify float noise in the tiny gradients
    want = _train(ref, ref, "cpu", adam=False)
    got = _train(model, torch.compile(model, backend="xlacache"), DEV, adam=False)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[1].running_mean.cpu(), ref[1].running_mean)
    assert model[1].num_batches_tracked.item() == 3


@pytest.mark.fallback  # torch.mode has no lowering: the graph, and the op, run elsewhere
def test_unsupported_op_runs_lazily():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.mode(x * 2, 1).values + 1

    before = _count("CompiledGraphFallback")
    x = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]])
    out = torch.compile(fn, backend="xlacache")(x.to(DEV)).cpu()
    assert _count("CompiledGraphFallback") > before
    assert xc.report()["fallback_reasons"][-1] == "inference: aten.mode.default has no lowering"
    torch.testing.assert_close(out, fn(x))


def test_cpu_tensor_in_a_device_call_is_a_clear_error():
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    with pytest.raises(Exception, match="device mismatch|not an XLA tensor|two different devices"):
        torch.compile(fn, backend="xlacache")(torch.ones(3, 3).to(DEV), torch.ones(3, 3)).cpu()


OPS = [
    "add",
    "mul",
    "sub",
    "div.no_rounding_mode",
    "exp",
    "tanh",
    "sigmoid",
    "sum",
    "mean",
    "softmax",
    "nn.functional.layer_norm",
    "nn.functional.gelu",
    "matmul",
    "cat",
    "where",
    "clamp",
]


def test_opinfo_forward_samples_compiled():
    from tests.lazy.opinfo import _samples, compare, ops_by_id

    ops = ops_by_id()
    wrong, ran = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in OPS:
            op = ops[name]
            for s in list(_samples(op, "float32", 3)):
                torch._dynamo.reset()
                want = op(s.input, *s.args, **s.kwargs)
                dev_args = torch.utils._pytree.tree_map(
                    lambda t: t.to(DEV) if isinstance(t, torch.Tensor) else t,
                    (s.input, s.args, s.kwargs),
                )
                before = _count("CompiledGraphExecute")
                fn = torch.compile(lambda i, a, k, op=op: op(i, *a, **k), backend="xlacache")
                got = torch.utils._pytree.tree_map(
                    lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, fn(*dev_args)
                )
                ran += _count("CompiledGraphExecute") > before
                try:
                    compare(got, want)
                except AssertionError as e:
                    wrong.append(f"{name}: {e}")
    assert wrong == []
    assert ran >= len(OPS)


def test_view_input_mutated_in_place_reaches_its_base():
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1

    base = torch.arange(8.0).reshape(2, 4)
    lazy_base = base.to(DEV)
    out = torch.compile(fn, backend="xlacache")(lazy_base[:, 1:3])
    want = fn(base[:, 1:3])
    torch.testing.assert_close(out.cpu(), want)
    torch.testing.assert_close(lazy_base.cpu(), base)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "t5", "resnet"])
def test_tiny_hf_model_trains_as_eager(name):
    from tests.lazy import hf_models as H

    def run(device: torch.device, compiled: bool) -> list[float]:
        model = H.build(name).to(device)
        fn = torch.compile(model, backend="xlacache") if compiled else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for step in range(3):
            inputs = {k: v.to(device) for k, v in H.batch(name, step).items()}
            loss = fn(**inputs).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device.type == "xla":
                xl.sync()
            losses.append(loss.item())
        return losses

    before = _count("CompiledGraph")
    got = run(DEV, True)
    torch.testing.assert_close(got, run(torch.device("cpu"), False), rtol=1e-4, atol=0)
    assert _count("CompiledGraph") - before >= 2


@pytest.mark.fallback  # a failing lowering falls back to lazy running (strict mode raises)
def test_a_lowering_that_fails_falls_back_to_lazy(monkeypatch):
    from xlacache.lazy.dynamo import lower

    def broken(dst, src, non_blocking=False):
        raise ValueError("broken on purpose")

    monkeypatch.setitem(lower._LOCAL, torch.ops.aten.copy.default, broken)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(x)
        z.copy_(y)
        return z * 2 + x

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    before = _count("CompiledGraphFallback")
    with pytest.warns(UserWarning, match="runs lazily: .*broken on purpose"):
        got = torch.compile(fn, backend="xlacache")(x.to(DEV), y.to(DEV)).cpu()
    torch.testing.assert_close(got, fn(x, y))
    assert _count("CompiledGraphFallback") == before + 1


def test_a_tensor_and_its_view_as_inputs_run_lazily_and_exactly():
    def fn(base: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
        view.mul_(2)
        return base + 0

    base = torch.arange(8.0).reshape(2, 4)
    lazy_base = base.to(DEV)
    before = _count("CompiledGraphFallback")
    got = torch.compile(fn, backend="xlacache")(lazy_base, lazy_base[:, 1:3]).cpu()
    torch.testing.assert_close(got, fn(base, base[:, 1:3]))
    assert _count("CompiledGraphFallback") == before + 1


def _update_then_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return a + b


def _aliased_calls(dev) -> list[torch.Tensor]:
    """Three calls of ``_update_then_add`` with inputs that share storage; the third (the
    sizes dynamic by then) makes AOTAutograd fail on torch 2.13 while it merges the views."""
    f = torch.compile(_update_then_add, backend="xlacache") if dev != "cpu" else _update_then_add
    out = []
    for make in (lambda t: (t, t), lambda t: (t, t[0]), lambda t: (t[1:], t[:3])):
        t = torch.arange(16.0).reshape(4, 4).to(dev)
        out += [f(*make(t)), t]
    return out


@pytest.mark.fallback  # an AOTAutograd failure runs the graph lazily (strict mode raises)
def test_a_graph_aotautograd_cannot_take_runs_lazily_and_exactly():
    before = _count("CompiledGraphFallback")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = [t.cpu() for t in _aliased_calls(DEV)]
    for g, want in zip(got, _aliased_calls("cpu"), strict=True):
        torch.testing.assert_close(g, want)
    if any("AOTAutograd failed" in str(w.message) for w in seen):
        assert any("AOTAutograd failed" in r for r in xc.report()["fallback_reasons"])
    assert _count("CompiledGraphFallback") > before


def test_an_aotautograd_failure_raises_in_strict_mode():
    from xlacache.errors import StrictModeError

    try:
        _aliased_calls(DEV)
    except Exception as e:  # noqa: BLE001 - Dynamo wraps the backend's error
        chain = [e, e.__cause__, getattr(e, "inner_exception", None)]
        assert any(isinstance(x, StrictModeError) for x in chain), repr(e)
        assert "dynamo.aot_autograd" in str(e)
    else:  # a torch whose AOTAutograd takes these inputs: nothing to hide
        assert not any("AOTAutograd failed" in r for r in xc.report()["fallback_reasons"])


def test_sizes_a_dynamic_forward_saves_for_its_backward_compile():
    """With a dynamic sequence length, AOTAutograd's forward also returns sizes (ints) for the
    backward: the forward is still compiled, and forward and backward equal eager."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8))

    def run(model, dev, compiled):
        def f(t):
            h = model(t)
            return ((h @ h.transpose(1, 2)).softmax(-1) @ h).mean(1)

        fn = torch.compile(f, backend="xlacache") if compiled else f
        out = []
        for length in (3, 4, 6):
            t = torch.randint(0, 20, (2, length), generator=torch.Generator().manual_seed(length))
            t = t.to(dev)
            if compiled:
                torch._dynamo.mark_dynamic(t, 1)
            y = fn(t)
            y.square().sum().backward()
            out += [y.detach().cpu(), model[1].weight.grad.cpu().clone()]
        return out

    before = _count("CompiledGraphFallback"), _count("CompiledGraphLazyRun")
    got = run(copy.deepcopy(ref).to(DEV), DEV, True)
    if torch_version() >= (2, 11):  # before, symbolic sizes run Dynamo's graph lazily
        assert (_count("CompiledGraphFallback"), _count("CompiledGraphLazyRun")) == before
    for g, want in zip(got, run(ref, "cpu", False), strict=True):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.fallback  # torch's RNG-state operators have no lowering: those graphs run lazily
def test_compiled_optimizer_step_is_compiled_and_equals_eager():
    torch.manual_seed(0)
    ref = nn.Linear(8, 4)
    model = copy.deepcopy(ref).to(DEV)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend="xlacache")
    before = _count("CompiledGraphFallback"), _count("CompiledGraphLazyRun")
    for _ in range(2):
        x = torch.randn(4, 8)
        ref(x).square().mean().backward()
        opt_ref.step()
        opt_ref.zero_grad()
        model(x.to(DEV)).square().mean().backward()
        step()
        opt.zero_grad()
        xl.sync()
    torch.testing.assert_close(model.weight.cpu(), ref.weight.detach(), rtol=1e-5, atol=1e-6)
    assert (_count("CompiledGraphFallback"), _count("CompiledGraphLazyRun")) == before


def test_views_of_one_tensor_as_inputs_compile_when_nothing_is_updated():
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    batch = torch.arange(10.0).reshape(2, 5)
    lazy = batch.to(DEV)
    before = _count("CompiledGraphFallback"), _count("CompiledGraphExecute")
    got = torch.compile(fn, backend="xlacache")(lazy[:, :-1], lazy[:, 1:]).cpu()
    torch.testing.assert_close(got, fn(batch[:, :-1], batch[:, 1:]))
    assert (_count("CompiledGraphFallback"), _count("CompiledGraphExecute")) == (
        before[0],
        before[1] + 1,
    )


def test_a_python_float_that_changes_compiles_as_a_graph_input():
    """Dynamo makes a float argument that changed an input of the next graph (a 0-d CPU tensor
    and its ``item``); that graph compiles, serves every later value, and gives eager's
    numbers: no graph break, no lazy run."""

    def fn(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale + 1

    from torch._dynamo.utils import counters

    x = torch.randn(64)
    compiled = torch.compile(fn, backend="xlacache")
    before = {n: _count(n) for n in ("CompiledGraph", "CompiledGraphLazyRun", "DynamoGraph")}
    breaks = sum(counters["graph_break"].values())
    for scale in (0.5, 0.1, 1 / 3, 0.7, 1e-3):
        assert torch.equal(compiled(x.to(DEV), scale).cpu(), fn(x, scale)), scale
    assert sum(counters["graph_break"].values()) == breaks
    assert _count("CompiledGraphLazyRun") == before["CompiledGraphLazyRun"]
    # one graph for the first value, one for every later one
    assert _count("DynamoGraph") - before["DynamoGraph"] == 2
    assert _count("CompiledGraph") - before["CompiledGraph"] == 2


def test_dynamos_fma_runs_as_a_graph_op_on_the_lazy_device():
    """Dynamo writes ``addcmul_`` as ``prims.fma``; a graph run by a debugging backend
    (``backend="aot_eager"``) meets it on lazy tensors, in a process that never loaded the
    xlacache backend: lowered (one rounding, as the compiled graphs), not a CPU run per call."""
    proc = run_python(
        """
        import json, torch
        import torch._inductor.inductor_prims  # defines prims.fma, as Dynamo does
        import xlacache.lazy as xl
        g = torch.Generator().manual_seed(0)
        a, b, c = (torch.randn(64, generator=g) for _ in range(3))
        d = xl.device()
        got = torch.ops.prims.fma(a.to(d), b.to(d), c.to(d)).cpu()
        want = (a.double() * b.double() + c.double()).float()
        print(json.dumps({"fallbacks": xl.metrics.counter_value("prims::fma") or 0,
                          "equal": torch.equal(got, want)}))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"fallbacks": 0, "equal": True}


def test_addcmul_and_addcdiv_in_place_compile_to_eagers_numbers():
    """Dynamo writes ``t.addcmul_(a, b, value=v)`` as ``t.copy_(fma(a * b, v, t))``: on an
    integer ``t`` eager converts ``v`` to an integer (``value=0.5`` adds nothing) where the fma
    adds ``0.5 * a * b`` and truncates. The backend gives the in-place op back to AOTAutograd."""

    def update(t: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        t.addcmul_(a, b, value=0.5)
        t.addcmul_(a, b, value=2.7)
        t[:, ::2].addcmul_(a[:, ::2], a[:, ::2], value=-1.5)

    ints = torch.arange(-6, 6).reshape(3, 4)
    want = ints.clone()
    update(want, ints, ints + 1)
    try:  # torch 2.9's Dynamo writes addcmul_ as add_ of a float product, and refuses it
        torch.compile(update, backend="eager")(ints.clone(), ints, ints + 1)
    except RuntimeError:
        traced = False
    else:
        traced = True
    torch._dynamo.reset()
    if traced:
        got = ints.to(DEV)
        fallbacks = _count("CompiledGraphFallback")
        torch.compile(update, backend="xlacache")(got, got.clone(), (ints + 1).to(DEV))
        assert torch.equal(got.cpu(), want)
        # compiled: not torch's decomposition of addcmul_, which refuses a float value for ints
        assert _count("CompiledGraphFallback") == fallbacks

    g = torch.Generator().manual_seed(0)
    floats = [torch.randn(256, generator=g) for _ in range(3)]
    for step in (
        lambda t, a, b: t.addcmul_(a, b, value=0.3),
        lambda t, a, b: t.addcdiv_(a, b, value=-0.7),
    ):
        lazy = [f.to(DEV) for f in floats]
        step(*lazy)
        compiled = [f.to(DEV) for f in floats]
        torch.compile(step, backend="xlacache")(*compiled)
        assert torch.equal(compiled[0].cpu(), lazy[0].cpu())  # the lowering of addcmul/addcdiv


@pytest.mark.parametrize(
    "view",
    [lambda x: x.unfold(1, 2, 2)[..., 0], lambda x: x[:, :1].expand(4, 3)[1:2]],
    ids=["unfold", "expand"],
)
def test_a_write_through_an_unfold_or_expand_view_is_never_a_wrong_number(view):
    """AOTAutograd (Inductor too) writes such a view back into zeros or sums its repeats:
    the graph runs lazily instead, which refuses the write clearly."""

    def fn(x: torch.Tensor) -> None:
        view(x).fill_(7)

    x = torch.arange(20.0).reshape(4, 5).to(DEV)
    with (
        pytest.warns(UserWarning, match="runs lazily: an in-place fill_ through a view made by"),
        pytest.raises(NotImplementedError, match="in-place write through a view made by"),
    ):
        torch.compile(fn, backend="xlacache")(x)
    assert torch.equal(x.cpu(), torch.arange(20.0).reshape(4, 5))  # nothing written


def test_outputs_viewing_an_input_stay_exact_when_sizes_become_dynamic():
    """After a recompile with symbolic sizes AOTAutograd rebuilds an input's view from the
    output's own layout: the output is the view of the input itself, as in eager."""

    def fn(x: torch.Tensor, n: int) -> tuple:
        return x[:, n:], x.narrow(0, n, 2), x * n

    compiled = torch.compile(fn, backend="xlacache")  # automatic dynamic: n becomes a symbol
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(0))
    before = {n: _count(n) for n in ("CompiledGraphFallback", "aten::_has_same_storage_numel")}
    for n in (1, 2, 3):
        xd = x.to(DEV)
        got = compiled(xd, n)
        for g, want in zip(got, fn(x, n), strict=True):
            assert torch.equal(g.cpu(), want)
        assert got[0]._base is xd and got[1]._base is xd
        xd.add_(1)  # aliased as in eager: the views see the update
        assert torch.equal(got[0].cpu(), x[:, n:] + 1)
    assert _count("aten::_has_same_storage_numel") == before["aten::_has_same_storage_numel"]
    if torch_version() >= (2, 11):  # before, a graph with dynamic sizes runs lazily
        assert _count("CompiledGraphFallback") == before["CompiledGraphFallback"]

    def updated(x: torch.Tensor, n: int) -> tuple:  # views of the value an input is given
        x.add_(1)
        y = x[n:]
        y.mul_(2)
        return x[:, n:], y

    compiled = torch.compile(updated, backend="xlacache")
    for n in (1, 2, 3):
        xd, xe = x.to(DEV), x.clone()
        got, want = compiled(xd, n), updated(xe, n)
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want, strict=True))
        assert torch.equal(xd.cpu(), xe)


def test_a_graph_returning_an_input_it_updated_compiles():
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple:
        z = x.mul_(2)
        y.add_(1)
        return z, y

    x, y = torch.arange(4.0).to(DEV), torch.ones(3).to(DEV)
    before = {n: _count(n) for n in ("CompiledGraphExecute", "CompiledGraphFallback")}
    z, y2 = torch.compile(fn, backend="xlacache")(x, y)
    assert _count("CompiledGraphExecute") == before["CompiledGraphExecute"] + 1
    assert _count("CompiledGraphFallback") == before["CompiledGraphFallback"]
    assert z is x and y2 is y  # as in eager: the updated inputs themselves
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0] and y.cpu().tolist() == [2.0] * 3


@pytest.mark.fallback
def test_torchs_caching_precompile_runs_the_graph_lazily_and_saves_nothing_to_reload(
    tmp_path, monkeypatch
):
    """TORCH_CACHING_PRECOMPILE=1: torch saves Dynamo's frames with their backends' entries,
    and a new process reloads them in torch.compile; the guards of a frame that took xla
    tensors fail to load there (an AttributeError from torch, no training). The backend runs
    such a graph lazily, with a warning that names the setting, and gives torch nothing to
    save, so the next torch.compile (here, as in a new process) loads without error."""
    from torch._dynamo.precompile_context import PrecompileContext

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # where torch saves them
    xlacache.initialize_cache(tmp_path / "cache", min_compile_seconds=0)  # AOTAutograd's too
    x = torch.linspace(-1, 1, 12).reshape(3, 4)

    def f(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).sin().sum(0)

    try:
        with torch._dynamo.config.patch(caching_precompile=True):
            if lazy_inner_tensors():  # torch 2.9-2.11: Dynamo cannot pickle the guards on
                # the meta tensor a lazy tensor names as its inner tensor, and fails first
                with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError):
                    torch.compile(f, backend="xlacache")(x.to(DEV))
                return
            with pytest.warns(UserWarning, match="TORCH_CACHING_PRECOMPILE=1"):
                got = torch.compile(f, backend="xlacache")(x.to(DEV))
            torch.testing.assert_close(got.cpu(), f(x))
            assert xc.report()["fallback_reasons"][-1] == xc.backend.PRECOMPILE_REFUSED
            torch.compiler.save_cache_artifacts()
            torch._dynamo.reset()
            again = torch.compile(f, backend="xlacache")  # loads what was saved: no error
            torch.testing.assert_close(again(x.to(DEV)).cpu(), f(x))
    finally:
        PrecompileContext.clear()


def test_an_aot_entry_keeps_each_nodes_value_and_the_live_graph_keeps_all():
    """AOTAutograd's entry holds each node's ``val`` only (a stack trace and provenance are half
    its bytes); the graph the process runs keeps its metadata, and the code is the same."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler

    from xlacache.lazy.dynamo import aot_cache

    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) * 2)
    for i, n in enumerate(gm.graph.nodes):
        n.meta.update(val=i, stack_trace=f"File 'user.py', line {i}", seq_nr=i)
    out = aot_cache.XlaOutputCode(gm, "forward", lambda g, what: "runs")
    stored = copy.copy(out)  # as AOTAutograd pickles its copy
    stored.prepare_for_serialization()
    assert stored.gm is None and out.runtime == "runs"
    assert all({"val", "stack_trace", "seq_nr"} <= set(n.meta) for n in gm.graph.nodes)
    loaded = GraphPickler.loads(stored.graph_bytes, FakeTensorMode())
    assert [n.meta for n in loaded.graph.nodes] == [{"val": i} for i in range(len(gm.graph.nodes))]
    assert loaded.code == gm.code
