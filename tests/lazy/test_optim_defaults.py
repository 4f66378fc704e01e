"""Optimizers on the device default to their multi-tensor (foreach) implementation, as on
CUDA (``xlacache/lazy/optim_defaults.py``): eager's numbers, a step whose traced ops do not
grow with the parameters, ``capturable`` and ``torch.compile`` included."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import xlacache.lazy as xl
from tests.conftest import REPO
from xlacache.lazy import optim_defaults
from xlacache.lazy.metrics import counter_value

DEV = xl.device()
optim = torch.optim

CASES = [
    (optim.SGD, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (optim.Adam, {"amsgrad": True, "weight_decay": 0.1}),
    (optim.Adam, {"capturable": True}),
    (optim.AdamW, {"weight_decay": 0.1}),
    (optim.RMSprop, {"momentum": 0.9, "centered": True}),
    (optim.Adagrad, {"lr_decay": 0.01}),
    (optim.Adamax, {"weight_decay": 0.01}),
    (optim.NAdam, {"capturable": True}),
    (optim.RAdam, {"decoupled_weight_decay": True, "weight_decay": 0.01}),
    (optim.Adadelta, {}),
    (optim.ASGD, {"weight_decay": 0.01}),
    (optim.Rprop, {}),
]


def _model(layers: int, dev: torch.device | str) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(8, 8), torch.nn.Tanh()]
    return torch.nn.Sequential(*mods).to(dev)


def _train(cls: type, kw: dict, dev: torch.device | str, compiled: bool = False, layers: int = 2):
    """Six steps with gradient clipping; the parameters on the CPU, and the ops traced by the
    last ``opt.step()`` (compiled: by the last step)."""
    model = _model(layers, dev)
    opt = cls(model.parameters(), lr=1e-2, **kw)

    def step(x: torch.Tensor) -> None:
        model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()

    if compiled:
        torch._dynamo.reset()
        step = torch.compile(step, backend="xlacache")
    traced = 0
    for i in range(6):
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(i)).to(dev)
        if dev == "cpu":
            step(x)
            continue
        if compiled:
            xl.sync()
            before = counter_value("TracedOps") or 0
            step(x)
            xl.sync()
            traced = (counter_value("TracedOps") or 0) - before
            continue
        model(x).square().mean().backward()
        xl.sync()
        before = counter_value("TracedOps") or 0
        opt.step()
        xl.sync()  # the counter is brought up to date at the barrier
        traced = (counter_value("TracedOps") or 0) - before
        opt.zero_grad()
    return [p.detach().cpu() for p in model.parameters()], traced


@pytest.mark.parametrize(("cls", "kw"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_each_optimizer_trains_as_eager_lazily_and_compiled(cls: type, kw: dict) -> None:
    eager_kw = {k: v for k, v in kw.items() if k != "capturable"}  # CPU: not capturable
    expected, _ = _train(cls, eager_kw, "cpu")
    for compiled in (False, True):
        lazy_runs = counter_value("CompiledGraphLazyRun") or 0
        got, traced = _train(cls, kw, DEV, compiled)
        assert (counter_value("CompiledGraphLazyRun") or 0) == lazy_runs  # every graph compiled
        if compiled:
            assert traced == 0  # a steady step: executables only, no graph break in between
        for e, g in zip(expected, got, strict=True):
            torch.testing.assert_close(g, e, rtol=2e-5, atol=2e-6)


def test_the_device_takes_the_multi_tensor_step_and_its_numbers_are_the_loops() -> None:
    loop, loop_traced = _train(optim.AdamW, {"foreach": False, "weight_decay": 0.1}, DEV)
    small, small_traced = _train(optim.AdamW, {"weight_decay": 0.1}, DEV)
    _, large_traced = _train(optim.AdamW, {"weight_decay": 0.1}, DEV, layers=6)
    assert small_traced == large_traced  # one _foreach_ op for all parameters
    assert loop_traced > 3 * small_traced
    for a, b in zip(loop, small, strict=True):
        assert torch.equal(a, b)  # the same numbers, bit for bit


def test_torch_defaults_stay_for_cpu_tensors_and_for_explicit_choices() -> None:
    from torch.optim import swa_utils
    from torch.optim.optimizer import _default_to_fused_or_foreach

    lazy = [torch.zeros(2, device=DEV)]
    assert _default_to_fused_or_foreach(lazy, False) == (False, True)
    assert _default_to_fused_or_foreach([torch.zeros(2)], False) == (False, False)
    assert _default_to_fused_or_foreach(lazy, True) == (False, False)  # differentiable
    # SWA's multi-tensor average is a lerp: the device keeps the loop's float32 numbers
    assert "xla" not in swa_utils._get_foreach_kernels_supported_devices()


def test_uninstall_gives_torch_its_functions_back() -> None:
    from torch.optim import adam, optimizer
    from torch.utils import _foreach_utils

    assert optim_defaults.install()() is None  # a second install changes and undoes nothing
    assert adam._get_capturable_supported_devices is optim_defaults.capturable_devices
    xl.uninstall()
    try:
        assert _foreach_utils._get_foreach_kernels_supported_devices is not (
            optim_defaults.foreach_devices
        )
        assert "xla" not in optimizer._get_foreach_kernels_supported_devices()
        assert "xla" not in adam._get_capturable_supported_devices(supports_xla=False)
        assert xl.LazyTensor not in optimizer._foreach_supported_types
    finally:
        xl.device()  # installs the device's state again
    assert "xla" in optimizer._get_foreach_kernels_supported_devices()
    assert xl.LazyTensor in _foreach_utils._foreach_supported_types


def test_the_loop_setting_keeps_torchs_choice() -> None:
    code = (
        "import torch, xlacache.lazy as xl\n"
        "from torch.optim.optimizer import _default_to_fused_or_foreach as pick\n"
        "print(pick([torch.zeros(2, device=xl.device())], False))"
    )
    env = {"XLACACHE_LAZY_OPTIM_LOOP": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "(False, False)"
