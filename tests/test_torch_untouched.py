"""Importing xlacache.lazy (and its Dynamo backend) changes nothing in torch (issue 26).

What the ``xla`` device needs from torch's global functions is installed at its first use
(``xl.device()``), scoped to that device, and undone by ``xl.uninstall()`` and
``xl.reset_runtime()`` (docs/lazy.md).
"""

import json
import subprocess
import sys

import pytest

# a seeded CPU model: its numbers, and whether torch's functions are torch's own
CHILD = """
import json, sys
import torch
import torch._dynamo  # torch's own wrappers (Dynamo wraps torch.manual_seed) and filters
own = {
    "manual_seed": torch.manual_seed, "random.manual_seed": torch.random.manual_seed,
    "seed": torch.seed, "Generator": torch.Generator,
    "set_autocast_enabled": torch.set_autocast_enabled,
}
import warnings
filters = list(warnings.filters)
if sys.argv[1] == "import":
    import xlacache.lazy
    import xlacache.lazy.dynamo
now = {
    "manual_seed": torch.manual_seed, "random.manual_seed": torch.random.manual_seed,
    "seed": torch.seed, "Generator": torch.Generator,
    "set_autocast_enabled": torch.set_autocast_enabled,
}
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                            torch.nn.Linear(32, 4))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(7)
losses = []
for _ in range(3):
    x = torch.randn(8, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss.item().hex())
print(json.dumps({
    "losses": losses,
    "weights": [float(p.double().sum()).hex() for p in model.parameters()],
    "same": [k for k in own if now[k] is own[k]],
    "filters_added": len(warnings.filters) - len(filters),
    "privateuse1_module": hasattr(torch, torch._C._get_privateuse1_backend_name()),
}))
"""


def _run(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=300,
        check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_importing_the_runtime_leaves_torch_as_it_is():
    plain, imported = _run("plain"), _run("import")
    names = ["manual_seed", "random.manual_seed", "seed", "Generator", "set_autocast_enabled"]
    assert imported["same"] == names
    assert imported["filters_added"] == 0
    assert not imported["privateuse1_module"]
    # a seeded CPU model (dropout, bfloat16 autocast, AdamW) gives the same numbers
    assert imported["losses"] == plain["losses"]
    assert imported["weights"] == plain["weights"]


def test_the_device_installs_at_first_use_and_uninstall_undoes_it():
    import torch

    import xlacache.lazy as xl

    xl.uninstall()
    own_generator, own_autocast = torch.Generator, torch.set_autocast_enabled
    assert own_generator is torch._C.Generator
    xl.device()
    try:
        assert type(torch.Generator(device="xla")).__name__ == "XlaGenerator"
        assert isinstance(torch.Generator(), own_generator)  # other devices: torch's own
        assert torch.set_autocast_enabled is not own_autocast
    finally:
        xl.reset_runtime()  # undoes it too
    assert torch.Generator is own_generator
    assert torch.set_autocast_enabled is own_autocast
    assert not hasattr(torch, "privateuseone")
    xl.device()  # and the next use installs it again
    assert torch.Generator is not own_generator
    xl.uninstall()
    assert torch.Generator is own_generator
    xl.device()  # installed again for the tests that run after this one in this process


def test_manual_seed_restarts_the_device_stream_through_torchs_hook():
    import torch

    import xlacache.lazy as xl

    dev = xl.device()
    assert torch.random.manual_seed.__module__ == "torch.random"  # torch's: its hook calls us
    torch.manual_seed(5)
    a = torch.randn(4, device=dev).cpu()
    torch.manual_seed(5)  # the same seed again: the device stream restarts
    b = torch.randn(4, device=dev).cpu()
    assert torch.equal(a, b)


CPU_BACKWARD_FIRST = """
import torch
import xlacache.lazy as xl
w = torch.ones(3, requires_grad=True)
(w * 2).sum().backward()  # autograd's engine starts here, before the device's first use
dev = xl.device()
v = torch.ones(3, device=dev, requires_grad=True)
(v * 3).sum().backward()
print(w.grad.tolist(), v.grad.cpu().tolist())
"""


@pytest.mark.slow
def test_a_cpu_backward_before_the_devices_first_use_leaves_the_device_working():
    """torch's autograd engine sizes its device queues at the first backward of the process,
    from the device guards registered then: the xla guard is registered at import."""
    out = subprocess.run([sys.executable, "-c", CPU_BACKWARD_FIRST], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[2.0, 2.0, 2.0] [3.0, 3.0, 3.0]"
