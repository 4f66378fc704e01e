"""Tripwires: one per private torch API the lazy runtime uses (``torch_internals.INTERNALS``),
and the adapters where releases differ. A failure names the torch release and what moved."""

import pytest
import torch

from xlacache.lazy import torch_internals
from xlacache.lazy.torch_internals import Internal


@pytest.mark.parametrize("internal", torch_internals.INTERNALS, ids=lambda i: i.path)
def test_internal_is_there(internal):
    problem = internal.problem()
    assert problem is None, f"torch {torch.__version__}: {problem} (used by {internal.used_by})"


def test_a_missing_internal_is_named_and_a_later_one_is_not_expected():
    gone = Internal("torch._C.no_such_thing", "nobody")
    assert "torch._C.no_such_thing is gone" in gone.problem()
    assert Internal("torch._C.no_such_thing", "nobody", since=(99, 0)).problem() is None
    assert torch_internals.problems() == []


def test_every_private_torch_name_in_the_runtime_has_a_row():
    """A private API used in xlacache.lazy without a row here fails (grep for ``torch._``)."""
    import re
    from pathlib import Path

    root = Path(torch_internals.__file__).parent
    rows = {i.path for i in torch_internals.INTERNALS}
    used = set()
    for path in root.rglob("*.py"):
        if path.name == "torch_internals.py":
            continue
        text = path.read_text()
        used |= set(re.findall(r"\btorch\._[A-Za-z][\w.]*[A-Za-z_]", text))
        used |= {f"{m}.{n}" for m, n in re.findall(r"from (torch\._[\w.]+) import (\w+)", text)}
    allowed = {"torch._C.Generator"}
    missing = sorted(u for u in used if u not in allowed and not any(r.startswith(u) for r in rows))
    assert not missing, f"private torch APIs with no row in INTERNALS: {missing}"


def test_tolerant_op_lookup():
    assert torch_internals.aten_op("mm") is torch.ops.aten.mm.default
    assert torch_internals.aten_op("arange.start") is torch.ops.aten.arange.start
    assert torch_internals.aten_op("no_such_op") is None
    assert torch_internals.aten_op("mm.no_such_overload") is None
    assert torch_internals.aten_ops("mm", "no_such_op") == [torch.ops.aten.mm.default]


def test_the_guard_adapter_for_this_release_gives_xla_a_guard():
    import xlacache.lazy as xl

    xl.device()
    registry = torch_internals._guard_registry()
    assert registry[int(torch._C._autograd.DeviceType.XLA)]
    has_acc = hasattr(torch._C, "_acc")
    assert has_acc == (torch_internals.torch_version() >= (2, 10)), torch.__version__
    # autograd records on the device (it asks for the guard)
    w = torch.ones(3, device=xl.device(), requires_grad=True)
    (w * 2).sum().backward()
    assert w.grad.cpu().tolist() == [2.0, 2.0, 2.0]
