"""torch.compile(backend="xlacache") of whole train steps and optimizer steps: compiled,
updated in place, no op traced once steady, equal to eager; shapes that change; warm
processes (issue 25, issue 27 items 2-3, issue 26's Dynamo state and strict mode)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import xlacache.lazy as xl
import xlacache.lazy.dynamo as xc
from tests.conftest import REPO, run_module_json, run_python
from tests.lazy.models import MLP
from tests.lazy.test_dynamo import _count, _fresh_dynamo  # noqa: F401 - its fixture too
from xlacache.errors import StrictModeError
from xlacache.lazy.state import STATE

DEV = xl.device()
STEPS = 10


def _batch(step: int, n: int = 8) -> torch.Tensor:
    return torch.randn(n, 16, generator=torch.Generator().manual_seed(step))


def _run(
    make_opt: Callable, dev: str | torch.device, how: str, clip: bool = False, sched: bool = False
) -> tuple[list[float], list[int], torch.nn.Module]:
    """``STEPS`` steps of MLP training: ``how`` is "eager", "step" (the whole step compiled)
    or "parts" (the model with its loss compiled, and ``opt.step`` compiled alone, as
    PyTorch's compiled-optimizer recipe does). Returns the losses, the ops traced per step
    and the model."""
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = make_opt(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 3, 0.5) if sched else None

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return model(x).square().mean()

    def update() -> None:
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        opt.step()

    def step_of(loss_fn, update_fn):  # noqa: ANN001, ANN202
        def step(x: torch.Tensor) -> torch.Tensor:
            loss = loss_fn(x)
            loss.backward()
            update_fn()
            opt.zero_grad()
            return loss

        return step

    step = step_of(loss_of, update)
    if how == "step":
        step = torch.compile(step, backend="xlacache")
    elif how == "parts":
        compile_ = torch.compile
        step = step_of(compile_(loss_of, backend="xlacache"), compile_(update, backend="xlacache"))
    losses, traced = [], []
    for i in range(STEPS):
        x = _batch(i).to(dev)
        if how != "eager":
            xl.sync()
        before = _count("TracedOps")
        loss = step(x)
        if scheduler is not None:
            scheduler.step()
        if how != "eager":
            xl.sync()
        traced.append(_count("TracedOps") - before)
        losses.append(loss.item())
    return losses, traced, model


def _adamw(params):
    return torch.optim.AdamW(params, lr=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["step", "parts"])
def test_compiled_train_step_equals_eager_and_traces_nothing_when_steady(how):
    want, _, ref = _run(_adamw, "cpu", "eager")
    before = _count("CompiledGraphLazyRun"), _count("CompiledGraphFallback")
    got, traced, model = _run(_adamw, DEV, how)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    assert traced[2:] == [0] * (STEPS - 2)  # the first step creates the optimizer's state
    assert (_count("CompiledGraphLazyRun"), _count("CompiledGraphFallback")) == before


def _adam_capturable(params):
    params = list(params)  # capturable: the step counters on the device (eager CPU: not allowed)
    return torch.optim.Adam(params, lr=1e-2, capturable=params[0].device.type == "xla")


def _nadam_capturable(params):
    params = list(params)  # Dynamo makes only CUDA/XPU optimizers capturable (docs/compile.md)
    xla = params[0].device.type == "xla"
    return torch.optim.NAdam(params, lr=1e-2, capturable=xla)


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "nadam_capturable_scheduled": _nadam_capturable,
    "adam_capturable": _adam_capturable,
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True),
    "adamw_tensor_lr": lambda p: torch.optim.AdamW(p, lr=torch.tensor(1e-2)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_with_clipping_and_a_scheduler_compile_and_equal_eager(name):
    make = OPTIMIZERS[name]
    sched = name.endswith(("tensor_lr", "scheduled"))
    want, _, _ = _run(make, "cpu", "eager", clip=True, sched=sched)
    before = _count("CompiledGraphLazyRun"), _count("DynamoRecompile")
    got, traced, _ = _run(make, DEV, "step", clip=True, sched=sched)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert traced[3:] == [0] * (STEPS - 3)
    assert _count("CompiledGraphLazyRun") == before[0]
    if name.endswith("tensor_lr"):  # a tensor LR: the scheduler's values are no recompile
        xc.report()  # syncs Dynamo's counts
        assert _count("DynamoRecompile") == before[1]


@pytest.mark.slow
def test_foreach_adam_with_a_float_lr_scheduler_compiles_and_equals_eager():
    """A scheduler that changes a float LR makes Dynamo recompile the step with the LR as a
    graph input; that graph compiles too (it used to fail, and the retraced optimizer then
    could not be traced at all)."""
    make = OPTIMIZERS["adam_foreach"]
    want, _, _ = _run(make, "cpu", "eager", clip=True, sched=True)
    before = _count("CompiledGraphLazyRun")
    got, traced, _ = _run(make, DEV, "step", clip=True, sched=True)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert _count("CompiledGraphLazyRun") == before
    assert traced[-3:] == [0, 0, 0]  # the LR is an input now: its new values trace nothing


def test_an_update_does_not_lose_a_value_still_pending_on_the_old_parameter():
    """A parameter's buffer is donated only when nothing else holds it: a lazy value computed
    from the old parameter before the step keeps it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    step = torch.compile(opt.step, backend="xlacache")
    for i in range(3):
        old = model.weight.detach().cpu()
        pending = model.weight * 2  # not run yet: it reads the weight's current buffer
        model(torch.ones(2, 4).to(DEV)).sum().backward()
        step()
        opt.zero_grad()
        torch.testing.assert_close(pending.cpu(), old * 2)
        assert not torch.equal(model.weight.detach().cpu(), old), i


def test_batch_sizes_that_change_all_compile_with_dynamic_none():
    torch.manual_seed(0)
    ref = MLP()
    model = MLP().to(DEV)
    model.load_state_dict(ref.state_dict())
    fn = torch.compile(model, backend="xlacache")  # dynamic=None: Dynamo's automatic shapes
    before = _count("CompiledGraphLazyRun"), _count("CompiledGraphFallback")
    for n in (8, 12, 16, 20):
        x = _batch(n, n)
        with torch.no_grad():
            got = fn(x.to(DEV)).cpu()
        torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-6)
    assert (_count("CompiledGraphLazyRun"), _count("CompiledGraphFallback")) == before


@pytest.mark.fallback
def test_a_graph_that_runs_lazily_is_announced_once_with_its_reason():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.mode(x * 2, 1).values + 1

    STATE.dynamo_warned.clear()
    with pytest.warns(UserWarning, match="runs lazily: inference: .*has no lowering"):
        torch.compile(fn, backend="xlacache")(torch.ones(4, 4).to(DEV)).cpu()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same reason again: no second warning
        torch.compile(fn, backend="xlacache")(torch.ones(4, 4).to(DEV)).cpu()


@pytest.mark.fallback
def test_reset_runtime_forgets_fallback_reasons_and_decompositions():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.mode(x, 1).values

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(fn, backend="xlacache")(torch.ones(4, 4).to(DEV)).cpu()
    assert xc.report()["fallback_reasons"] and STATE.dynamo_decompositions
    xl.reset_runtime()
    assert xc.report()["fallback_reasons"] == []
    assert not STATE.dynamo_decompositions and not STATE.dynamo_warned
    xl.device()  # installs again what the reset uninstalled (the other tests' device)


def test_a_lowering_failure_raises_in_strict_mode(monkeypatch):
    from xlacache.lazy.dynamo import lower

    def broken(dst, src, non_blocking=False):
        raise ValueError("broken on purpose")

    monkeypatch.setitem(lower._LOCAL, torch.ops.aten.copy.default, broken)
    monkeypatch.setenv("XLACACHE_STRICT", "1")

    def fn(x: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(x)
        z.copy_(x)
        return z * 2

    with pytest.raises(StrictModeError, match="dynamo.lowering.*broken on purpose"):
        torch.compile(fn, backend="xlacache")(torch.ones(3).to(DEV)).cpu()


def test_dynamo_is_reachable_from_xlacache_lazy_without_importing_dynamo_at_import():
    code = (
        "import sys, xlacache.lazy\n"
        "assert 'torch._dynamo' not in sys.modules, 'imported with xlacache.lazy'\n"
        "print(xlacache.lazy.dynamo.xlacache_backend.__name__, "
        "xlacache.lazy.dynamo.report()['CompiledGraph'])\n"
    )
    out = run_python(code, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["xlacache_backend", "0"]


def _cold_then_warm(mode: str, tmp_path, programs: int) -> tuple[dict, dict]:
    """Two fresh processes on one cache directory (torch's own directory fresh each time): the
    first lowers ``programs`` programs, the second loads each through its alias entry."""
    runs = []
    for run in (1, 2):
        env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / f"torch-{run}")}
        cache = str(tmp_path / "cache")
        runs.append(run_module_json("tests.lazy._dynamo_step_child", mode, cache, env=env))
    cold, warm = runs
    assert cold["report"]["CompiledGraphLowering"] == programs
    assert warm["report"]["CompiledGraphLowering"] == 0
    assert warm["report"]["CompiledGraphAliasHit"] == programs
    assert warm["values"] == cold["values"]
    return cold, warm


@pytest.mark.slow
def test_a_warm_process_loads_the_compiled_step_without_lowering_or_compiling(tmp_path):
    # forward, backward, optimizer; a function of two views of one tensor; a function called
    # with float32 then float64 (a graph each: alias hits for both)
    cold, warm = _cold_then_warm("step,dtypes", tmp_path, 6)
    assert warm["report"]["CompiledGraphCompile"] == 0 and warm["xla_compiles"] == 0
    assert warm["report"]["CompiledGraphAotHit"] == 6  # AOTAutograd's result from the cache
    # what AOTAutograd said of a graph (it updates no input) holds when loaded from its cache
    assert warm["report"]["CompiledGraphFallback"] == cold["report"]["CompiledGraphFallback"] == 0
    assert warm["alias_misses"] == 0
    x = torch.linspace(0.1, 1.3, 12).reshape(3, 4)
    want = [float((x.to(dt) * 3).sin().sum()) for dt in (torch.float32, torch.float64)]
    assert warm["values"][-2:] == pytest.approx(want, rel=1e-6)


@pytest.mark.slow
def test_the_docs_recipe_runs_as_written_and_compiles_every_graph(tmp_path):
    from tests.docsutil import section_block

    code = section_block("docs/compile.md", "Use", "python").text
    code = code.replace("/tmp/xla-cache", str(tmp_path / "cache"))
    env = {"PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "torch")}
    out = run_python(code, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["0", "1", "2", "3"]
    assert lines[-1] == "0"  # no graph ran lazily
    assert "runs lazily" not in out.stderr
