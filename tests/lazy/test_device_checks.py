"""What eager checks on values raises, as in eager, from the programs that computed it (lazy
and compiled), when values come back to the host: indices out of range, probabilities outside
[0, 1]; good values give eager's results."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import xlacache.lazy as xl
from tests.conftest import run_python
from xlacache.lazy import device_checks, metrics
from xlacache.lazy.device_checks import DeviceCheckError, DeviceIndexError

DEV = xl.device()

# (name, op on a 6-element float tensor ``x`` and an index tensor ``i``)
OPS = {
    "index": lambda x, i: x[i],
    "index_put": lambda x, i: x.clone().index_put_((i,), torch.ones_like(i, dtype=x.dtype)),
    "gather": lambda x, i: x.gather(0, i),
    "scatter": lambda x, i: x.clone().scatter_(0, i, 1.0),
    "scatter_add": lambda x, i: x.clone().scatter_add_(0, i, torch.ones_like(i, dtype=x.dtype)),
    "index_select": lambda x, i: x.index_select(0, i),
    "index_add": lambda x, i: x.clone().index_add_(0, i, torch.ones_like(i, dtype=x.dtype)),
    "embedding": lambda x, i: F.embedding(i, x.view(6, 1)),
    "embedding max_norm": lambda x, i: F.embedding(i, x.view(6, 1).clone(), max_norm=1.0),
    "take": lambda x, i: x.take(i),
    "put": lambda x, i: x.clone().put_(i, torch.ones_like(i, dtype=x.dtype)),
    "nll_loss": lambda x, i: F.nll_loss(x.view(1, 6).expand(len(i), 6), i),
    "cross_entropy": lambda x, i: F.cross_entropy(x.view(1, 6).expand(len(i), 6), i),
    "one_hot": lambda x, i: F.one_hot(i, 6) * x.to(torch.long),
    "max_unpool": lambda x, i: F.max_unpool1d(
        x[: len(i)].view(1, 1, -1), i.view(1, 1, -1), 1, 3, 0, [6]
    ),
}
# indices eager takes: negative ones where eager counts back (indexing, take, put)
COUNTS_BACK = {"index", "index_put", "take", "put"}


def _x(dev: str | torch.device) -> torch.Tensor:
    return torch.arange(6.0).to(dev)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("bad", [6, 9, -7])
def test_an_index_out_of_range_raises_at_the_read(name, bad):
    op = OPS[name]
    with pytest.raises((IndexError, RuntimeError)):  # eager (gather, scatter: RuntimeError)
        op(_x("cpu"), torch.tensor([1, bad]))
    before = metrics.counter_value("DeviceCheckError") or 0
    out = op(_x(DEV), torch.tensor([1, bad]).to(DEV))
    with pytest.raises(DeviceIndexError, match="out of range"):
        out.cpu()
    assert metrics.counter_value("DeviceCheckError") == before + 1
    assert (_x(DEV) + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # and goes on


@pytest.mark.parametrize("name", sorted(OPS))
def test_indices_in_range_give_eagers_values(name):
    op = OPS[name]
    idx = [0, 5, -6, -1] if name in COUNTS_BACK else [0, 5, 3]
    want = op(_x("cpu"), torch.tensor(idx))
    got = op(_x(DEV), torch.tensor(idx).to(DEV)).cpu()
    torch.testing.assert_close(got, want)


def test_an_ignored_target_is_in_range():
    logits = torch.randn(3, 5)
    t = torch.tensor([1, -100, 4])
    want = F.cross_entropy(logits, t)
    torch.testing.assert_close(F.cross_entropy(logits.to(DEV), t.to(DEV)).cpu(), want)


@pytest.mark.parametrize("sorter", [[1, 2, 0, 3], [1, 2, 4, 3], [1, -1, 0, 3]])
def test_a_searchsorted_sorter_out_of_range_raises(sorter):
    seq, x, sorter = (
        torch.tensor([3.0, 1.0, 2.0, 5.0]),
        torch.tensor([2.5, 0.0]),
        torch.tensor(sorter),
    )
    try:
        want = torch.searchsorted(seq, x, sorter=sorter)
    except RuntimeError:
        with pytest.raises(DeviceIndexError):
            torch.searchsorted(seq.to(DEV), x.to(DEV), sorter=sorter.to(DEV)).cpu()
        return
    assert torch.equal(
        torch.searchsorted(seq.to(DEV), x.to(DEV), sorter=sorter.to(DEV)).cpu(), want
    )


def test_the_error_is_an_index_error_and_a_runtime_error():
    assert issubclass(DeviceIndexError, IndexError)
    assert issubclass(DeviceIndexError, DeviceCheckError)
    assert issubclass(DeviceCheckError, RuntimeError)  # as CUDA's device-side assert


@pytest.mark.parametrize(
    "which, p, t",
    [
        ("input", [0.2, 1.5, 0.3], [0.0, 1.0, 1.0]),
        ("input", [0.2, -0.1, 0.3], [0.0, 1.0, 1.0]),
        ("input", [0.2, float("nan"), 0.3], [0.0, 1.0, 1.0]),
        ("target", [0.2, 0.5, 0.3], [0.0, 2.0, 1.0]),
        ("target", [0.2, 0.5, 0.3], [0.0, -1.0, 1.0]),
    ],
)
def test_a_probability_outside_0_1_raises_in_binary_cross_entropy(which, p, t):
    p, t = torch.tensor(p), torch.tensor(t)
    message = f"all elements of {which} should be between 0 and 1"
    with pytest.raises(RuntimeError, match=message):  # eager
        F.binary_cross_entropy(p, t)
    out = F.binary_cross_entropy(p.to(DEV), t.to(DEV))
    with pytest.raises(DeviceCheckError, match=message):
        out.item()


DIVISIONS = {
    "floor_divide": lambda a, b: a // b,
    "div floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: a % b,
    "fmod": torch.fmod,
    "remainder of a scalar": lambda a, b: 7 % b,
    "uint8": lambda a, b: a.abs().to(torch.uint8) // b.abs().to(torch.uint8),
}


@pytest.mark.parametrize("name", sorted(DIVISIONS))
def test_an_integer_division_by_zero_raises_and_others_give_eagers_values(name):
    op = DIVISIONS[name]
    a = torch.tensor([5, -7, 3, -8])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # eager
        op(a, torch.tensor([2, 0, 1, -3]))
    out = op(a.to(DEV), torch.tensor([2, 0, 1, -3]).to(DEV))
    with pytest.raises(DeviceCheckError, match="ZeroDivisionError"):
        out.cpu()
    b = torch.tensor([2, 3, 1, -3])
    assert op(a.to(DEV), b.to(DEV)).cpu().tolist() == op(a, b).tolist()
    if name != "uint8":  # floats: no error
        f, zero = torch.tensor([5.0, -7.0]), torch.tensor([0.0, 0.0])
        torch.testing.assert_close(op(f.to(DEV), zero.to(DEV)).cpu(), op(f, zero), equal_nan=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_binary_cross_entropy_in_range_gives_eagers_values_and_gradients(reduction, dtype):
    g = torch.Generator().manual_seed(0)
    p, t, w = (torch.rand(4, 5, generator=g).to(dtype) for _ in range(3))
    p[0, :2] = torch.tensor([0.0, 1.0])  # the edges: log(0) floored at -100
    x = p.clone().requires_grad_()
    want = F.binary_cross_entropy(x, t, weight=w, reduction=reduction)
    want.sum().backward()
    xd = p.to(DEV).requires_grad_()
    got = F.binary_cross_entropy(xd, t.to(DEV), weight=w.to(DEV), reduction=reduction)
    got.sum().backward()
    tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(got.cpu(), want, **tol)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **tol)


def test_a_sync_reports_an_index_that_ran_and_wait_device_ops_waits_for_it():
    y = _x(DEV)[torch.tensor([8]).to(DEV)] * 2
    with pytest.raises(DeviceIndexError):
        xl.sync(wait=True)
    del y
    z = _x(DEV).gather(0, torch.tensor([7]).to(DEV))
    try:
        xl.sync()  # reports it if its program has run already
    except DeviceIndexError:
        pass
    else:
        with pytest.raises(DeviceIndexError):
            xl.wait_device_ops()
    del z
    xl.sync(wait=True)  # reported once: nothing left


def test_only_graphs_that_take_indices_carry_the_check():
    xl.sync()
    before = len(device_checks._pending)
    (_x(DEV) * 3).cpu()  # no index op: no flag kept, nothing read
    assert len(device_checks._pending) == before
    y = _x(DEV)[torch.tensor([2]).to(DEV)]
    xl.sync()
    device_checks.raise_if_set()
    assert len(device_checks._pending) == 0
    assert y.cpu().tolist() == [2.0]


@pytest.mark.parametrize(
    ("classes", "num_classes"),
    [([[0, 2], [1, 1]], 3), ([[0, 2], [1, 1]], -1), ([], 4), ([], -1), ([1], 0), ([0], 1)],
)
def test_one_hot_gives_eagers_values_and_errors(classes, num_classes):
    x = torch.tensor(classes, dtype=torch.long)
    try:
        want = F.one_hot(x, num_classes)
    except RuntimeError:  # eager on CPU checks the classes first: the device says why
        with pytest.raises(RuntimeError, match="num_classes|empty"):
            F.one_hot(x.to(DEV), num_classes).cpu()
        return
    got = F.one_hot(x.to(DEV), num_classes)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(x.to(DEV).int(), num_classes)


def test_compiled_one_hot_past_num_classes_raises():
    torch._dynamo.reset()
    fn = torch.compile(lambda i, w: F.one_hot(i, 4).to(w.dtype) @ w, backend="xlacache")
    w = torch.randn(4, 2)
    before = metrics.counter_value("CompiledGraphExecute") or 0
    for bad in (4, -1):
        out = fn(torch.tensor([1, bad]).to(DEV), w.to(DEV))
        with pytest.raises(DeviceIndexError):
            out.cpu()
    i = torch.tensor([3, 0])  # the shape of the calls before: no recompile
    torch.testing.assert_close(fn(i.to(DEV), w.to(DEV)).cpu(), F.one_hot(i, 4).float() @ w)
    assert (metrics.counter_value("CompiledGraphExecute") or 0) - before == 3  # none lazily
    torch._dynamo.reset()


def test_compiled_embedding_and_target_out_of_range_raise():
    torch._dynamo.reset()
    torch.manual_seed(0)
    emb = nn.Embedding(10, 4)
    dev_emb = nn.Embedding(10, 4).to(DEV)
    dev_emb.load_state_dict(emb.state_dict())

    def loss(e, i, t):
        return F.cross_entropy(e(i), t)

    fn = torch.compile(loss, backend="xlacache")
    before = metrics.counter_value("CompiledGraphExecute") or 0
    for i, t in (([1, 12], [0, 3]), ([1, 2], [0, 4])):
        out = fn(dev_emb, torch.tensor(i).to(DEV), torch.tensor(t).to(DEV))
        with pytest.raises(DeviceIndexError):
            out.item()
    i, t = torch.tensor([3, 9]), torch.tensor([1, 3])
    got = fn(dev_emb, i.to(DEV), t.to(DEV))
    got.backward()
    want = loss(emb, i, t)
    want.backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(dev_emb.weight.grad.cpu(), emb.weight.grad)
    assert (metrics.counter_value("CompiledGraphExecute") or 0) - before == 4  # none lazily
    torch._dynamo.reset()


def test_compiled_binary_cross_entropy_checks_its_input():
    torch._dynamo.reset()
    fn = torch.compile(lambda p, t: F.binary_cross_entropy(p, t), backend="xlacache")
    t = torch.tensor([0.0, 1.0])
    before = metrics.counter_value("CompiledGraphExecute") or 0
    bad = fn(torch.tensor([0.2, 1.5]).to(DEV), t.to(DEV))
    with pytest.raises(DeviceCheckError, match="input should be between 0 and 1"):
        bad.item()
    x = torch.tensor([0.2, 0.5], requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    got = fn(xd, t.to(DEV))
    got.backward()
    want = F.binary_cross_entropy(x, t)
    want.backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    assert (metrics.counter_value("CompiledGraphExecute") or 0) - before == 3  # none lazily
    torch._dynamo.reset()


_WARM = """
import json, sys, torch
import xlacache, xlacache.lazy as xl
from xlacache.lazy import metrics
xlacache.initialize_cache(sys.argv[1], min_compile_seconds=0)
d = xl.device()
x = torch.arange(6.0).to(d)
ok = x[torch.tensor([5]).to(d)].cpu().tolist()
try:
    x[torch.tensor([6]).to(d)].cpu()
    raised = False
except IndexError:
    raised = True
names = ("PersistentCacheAliasHit", "UncachedCompile")
print(json.dumps({"ok": ok, "raised": raised, **{n: metrics.counter_value(n) or 0 for n in names}}))
"""


@pytest.mark.slow
def test_a_warm_process_loads_the_checked_program_and_still_raises(tmp_path):
    runs = []
    for _ in range(2):
        proc = run_python(_WARM, str(tmp_path / "cache"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["ok"] == warm["ok"] == [5.0]
    assert cold["raised"] and warm["raised"]
    assert cold["UncachedCompile"] >= 1
    assert warm["UncachedCompile"] == 0 and warm["PersistentCacheAliasHit"] >= 1


def test_kept_outputs_past_the_limit_are_read_oldest_first(monkeypatch):
    import jax.numpy as jnp

    xl.sync(wait=True)
    monkeypatch.setattr(device_checks, "MAX_PENDING", 2)
    device_checks.note(jnp.int32(0))
    device_checks.note(jnp.int32(1))  # an index out of range
    device_checks.note(jnp.int32(0))  # the first read: it passed
    with pytest.raises(DeviceIndexError):
        device_checks.note(jnp.int32(0))  # the second read: the failed one
    assert len(device_checks._pending) == 0
