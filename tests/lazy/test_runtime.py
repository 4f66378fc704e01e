"""Runtime behaviour: laziness, graph caching, RNG, factories, views, indexing, metrics, I/O."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xlacache.lazy as xl
from xlacache.lazy import metrics

from .models import MLP

dev = xl.device()


def _c(name: str) -> int:
    return metrics.counter_value(name) or 0


def test_device_names_and_laziness():
    assert xl.xla_device() == dev == torch.device("xla:0")
    x = torch.ones(2, 3, device=dev)
    y = (x * 3).sum(1)
    assert y.shape == (2,) and y.dtype == torch.float32 and y.device.type == "xla"
    assert xl.is_lazy(y) and y._v[0].op != "data"  # recorded, not run
    assert y.tolist() == [9.0, 9.0]
    assert "xla:0" in repr(y)


@pytest.mark.slow
def test_steady_loop_compiles_bounded_and_cached():
    torch.manual_seed(0)
    model = MLP().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)
    xl.clear_compiled_cache()
    before_unc, before_cached = _c("UncachedCompile"), _c("CachedCompile")
    before_hits = _c("PersistentCacheHit")
    x, y = torch.randn(8, 16).to(dev), torch.randint(0, 4, (8,)).to(dev)
    for _ in range(25):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        xl.mark_step()
    compiles = _c("UncachedCompile") - before_unc + _c("PersistentCacheHit") - before_hits
    assert compiles <= 3, compiles  # not 25: lr, step counts are graph inputs
    assert _c("CachedCompile") - before_cached >= 22


@pytest.mark.slow
def test_dropout_and_randn_change_each_step_without_recompiling():
    torch.manual_seed(1)
    drop = torch.nn.Dropout(0.5)
    x = torch.ones(1000, device=dev)
    seen = []
    for step in range(4):
        if step == 2:
            compiles0 = _c("UncachedCompile")
        seen.append((drop(x).cpu(), torch.randn(5, device=dev).cpu()))
        xl.sync()
    assert not torch.equal(seen[0][0], seen[1][0]) and not torch.equal(seen[1][1], seen[2][1])
    assert 0.4 < (seen[0][0] == 0).float().mean().item() < 0.6
    assert set(seen[0][0].unique().tolist()) <= {0.0, 2.0}
    assert _c("UncachedCompile") == compiles0
    torch.manual_seed(1)
    again = torch.randn(5, device=dev).cpu()
    torch.manual_seed(1)
    assert torch.equal(again, torch.randn(5, device=dev).cpu())


@pytest.mark.slow
def test_factories_and_device_argument():
    x = torch.arange(6, device=dev).view(2, 3)
    assert x.dtype == torch.int64 and x.cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    m = torch.tril(torch.ones(3, 3, device=dev))
    assert torch.equal(m.cpu(), torch.tril(torch.ones(3, 3)))
    z = torch.zeros(2, device=x.device) + torch.full((2,), 2.5, device=dev)
    assert z.cpu().tolist() == [2.5, 2.5]
    assert torch.ones_like(z).cpu().tolist() == [1.0, 1.0]
    assert torch.randn(4, 4, device=dev).shape == (4, 4)
    assert torch.eye(2, device=dev).cpu().tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert torch.linspace(0, 1, 3, device=dev).cpu().tolist() == [0.0, 0.5, 1.0]


def test_views_and_inplace_reach_the_base():
    base = torch.zeros(3, 4, device=dev)
    v = base.view(-1)
    v.add_(1)
    base[:, 0] = 5
    col = base.t()[1]
    col.mul_(2)
    ref = torch.zeros(3, 4)
    ref.view(-1).add_(1)
    ref[:, 0] = 5
    ref.t()[1].mul_(2)
    assert torch.equal(base.cpu(), ref)
    assert torch.equal(v.cpu(), ref.view(-1))  # a view sees later writes to its base
    d = base.detach()
    d.zero_()
    assert base.sum().item() == 0


@pytest.mark.slow
def test_indexing_gather_scatter_reductions():
    torch.manual_seed(0)
    a = torch.randn(4, 5)
    idx = torch.tensor([[0, 2], [1, 3], [4, 0], [2, 2]])
    x = a.to(dev)
    i = idx.to(dev)
    checks = [
        (x[1:3, ::2], a[1:3, ::2]),
        (x[torch.tensor([0, 2]).to(dev)], a[torch.tensor([0, 2])]),
        (x.gather(1, i), a.gather(1, idx)),
        (torch.zeros(4, 5, device=dev).scatter(1, i, 1.0), torch.zeros(4, 5).scatter(1, idx, 1.0)),
        (x.index_select(1, i[0]), a.index_select(1, idx[0])),
        (torch.where(x > 0, x, -x), torch.where(a > 0, a, -a)),
        (torch.cat([x, x], 0), torch.cat([a, a], 0)),
        (torch.stack([x, x], 1), torch.stack([a, a], 1)),
        (x.max(1).values, a.max(1).values),
        (x.argmax(1), a.argmax(1)),
        (x.std(0), a.std(0)),
        (x.cumsum(1), a.cumsum(1)),
        (x.masked_fill(x < 0, 0.0), a.masked_fill(a < 0, 0.0)),
        (torch.topk(x, 2).values, torch.topk(a, 2).values),
    ]
    for got, want in checks:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    parts = x.split(2, dim=1)
    assert [p.shape[1] for p in parts] == [2, 2, 1]
    assert torch.equal(parts[2].cpu(), a.split(2, dim=1)[2])


def test_data_dependent_shapes_materialize():
    a = torch.tensor([1.0, -2.0, 3.0, -4.0])
    x = a.to(dev)
    torch.testing.assert_close(x[x > 0].cpu(), a[a > 0])
    assert torch.equal(torch.nonzero(x > 0).cpu(), torch.nonzero(a > 0))
    x[x < 0] = 0.0
    assert x.cpu().tolist() == [1.0, 0.0, 3.0, 0.0]
    if x.sum() > 3:  # control flow on a device value
        flag = True
    assert flag


@pytest.mark.slow
def test_shape_change_compiles_once_more():
    model = MLP().to(dev)
    before = _c("UncachedCompile") + _c("PersistentCacheHit")
    for n in (8, 8, 5, 8, 5):
        model.zero_grad()
        model(torch.randn(n, 16).to(dev)).sum().backward()
        xl.sync()
    assert _c("UncachedCompile") + _c("PersistentCacheHit") - before == 2


def test_metrics_names_and_report():
    x = torch.randn(3).to(dev)
    (x * 2).cpu()
    for name in ("TransferToDevice", "TransferFromDevice", "UncachedCompile"):
        assert _c(name) > 0, name
    for name in ("CompileTime", "ExecuteTime"):
        n, acc, samples = metrics.metric_data(name)
        assert n > 0 and acc > 0 and samples
    report = xl.metrics_report()
    assert "Metric: CompileTime" in report and "Counter: TransferToDevice" in report
    assert metrics.counter_value("NoSuchCounter") is None


def test_save_and_load_state_dict(tmp_path):
    model = MLP().to(dev)
    xl.save(model.state_dict(), tmp_path / "m.pt")
    sd = torch.load(tmp_path / "m.pt")
    assert all(v.device.type == "cpu" for v in sd.values())
    other = MLP().to(dev)
    other.load_state_dict({k: v.to(dev) for k, v in sd.items()})
    x = torch.randn(2, 16)
    torch.testing.assert_close(other(x.to(dev)).cpu(), model(x.to(dev)).cpu())


def test_mp_device_loader_syncs_each_step():
    data = [(torch.randn(4, 16), torch.randint(0, 4, (4,))) for _ in range(3)]
    steps0 = _c("MarkStep")
    seen = 0
    for x, y in xl.MpDeviceLoader(data, dev):
        assert xl.is_lazy(x) and xl.is_lazy(y)
        seen += 1
    assert seen == 3 and _c("MarkStep") - steps0 >= 3


@pytest.mark.slow
def test_optimizer_step_barrier():
    model = MLP().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 16).to(dev)).sum().backward()
    xl.optimizer_step(opt, barrier=True)
    assert all(p._v[0].op == "data" for p in model.parameters())


def test_unlowered_op_falls_back_and_is_counted():
    from xlacache.lazy import dispatch

    dispatch._warned_fallback.discard("aten::special_airy_ai")  # warned once per process
    with pytest.warns(UserWarning, match="no lowering"):
        r = torch.special.airy_ai(torch.full((2,), 3.0, device=dev))
    torch.testing.assert_close(r.cpu(), torch.special.airy_ai(torch.full((2,), 3.0)))
    assert any(n.endswith("::special_airy_ai") for n in metrics.counter_names())


def test_collector_deferred_while_tracing_and_restored_at_barriers(monkeypatch):
    import gc

    from xlacache.lazy import tensor

    xl.sync()
    before = gc.get_threshold()
    x = torch.ones(3, device=dev)
    y = x * 2
    if before[0] > 0:
        assert gc.get_threshold()[0] >= 500_000  # tracing: the young generation waits
    assert y.tolist() == [2.0, 2.0, 2.0]  # a barrier
    assert gc.get_threshold() == before
    z = x + 1
    xl.sync()
    assert gc.get_threshold() == before
    gc.set_threshold(1000, 10, 10)  # the program's own setting, made while tracing, is kept
    try:
        w = z * 3
        gc.set_threshold(1234, 5, 5)
        xl.sync()
        assert gc.get_threshold() == (1234, 5, 5)
        monkeypatch.setattr(tensor, "_GC_DEFER", False)
        w = w - 1
        assert gc.get_threshold() == (1234, 5, 5)
        assert w.tolist() == [5.0, 5.0, 5.0]
    finally:
        gc.set_threshold(*before)


def test_anomaly_mode_checks_gradients_on_the_device():
    x = torch.randn(3, requires_grad=True, device=xl.device())
    before = metrics.counter_value("aten::_is_any_true") or 0
    with pytest.warns(UserWarning, match="Anomaly Detection"), torch.autograd.detect_anomaly():
        (x * 2).sum().backward()
    assert x.grad.cpu().tolist() == [2.0, 2.0, 2.0]
    assert (metrics.counter_value("aten::_is_any_true") or 0) == before  # lowered, not on CPU
    for v in ([True, False], [False, False], [True, True]):
        t = torch.tensor(v)
        assert torch.ops.aten._is_any_true(t.to(xl.device())).item() == any(v)
        assert torch.ops.aten._is_all_true(t.to(xl.device())).item() == all(v)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_embedding_max_norm_renormalizes_rows_on_the_device(norm_type, dtype):
    torch.manual_seed(0)
    w = (torch.randn(10, 4) * 3).to(dtype)
    ids = torch.tensor([[1, 3], [3, 7]])
    eager, device = w.clone(), w.to(dev)
    before = metrics.counter_value("aten::embedding_renorm") or 0
    want = F.embedding(ids, eager, max_norm=1.5, norm_type=norm_type)
    got = F.embedding(ids.to(dev), device, max_norm=1.5, norm_type=norm_type)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got.cpu(), want, **tol)
    torch.testing.assert_close(device.cpu(), eager, **tol)  # the rows it named, renormalized
    assert not torch.equal(eager, w)
    assert (metrics.counter_value("aten::embedding_renorm") or 0) == before  # not on the CPU
