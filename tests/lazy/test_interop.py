"""What third-party code does with device tensors: build them from Python data, save them,
autocast, draw from a device Generator, and turn the cache on from the environment."""

from __future__ import annotations

import copy
import pickle
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch as st
import torch
import torch.nn.functional as F
from torch.nn.utils import vector_to_parameters

import xlacache.lazy as xl
from tests.conftest import run_json, run_python
from xlacache.lazy import metrics

dev = xl.device()
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ tensors from Python data


@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.tensor([1.5, -2.0, 3.25], device=d),
        lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
        lambda d: torch.tensor(3.5, device=d),
        lambda d: torch.tensor([], dtype=torch.float32, device=d),
        lambda d: torch.tensor([True, False], device=d),
        lambda d: torch.tensor([1, 2], dtype=torch.float32, device=d),
        lambda d: torch.as_tensor([0.5, 1.5], device=d),
        lambda d: torch.as_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=d),
        lambda d: torch.as_tensor(torch.arange(4), device=d),
        lambda d: torch.ones(2, device=d).new_tensor([[7.0, 8.0]]),
        lambda d: torch.zeros(1, dtype=torch.int32, device=d).new_tensor([5, 6]),
    ],
)
def test_tensors_from_python_data(make):
    """``torch.tensor(data, device=xla)`` and friends copy CPU data in (``aten::_copy_from``)."""
    want = make("cpu")
    got = make(dev)
    assert isinstance(got, xl.LazyTensor) and got.device == dev
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)
    assert torch.equal((got * 2).cpu(), want * 2)


def test_copy_into_device_tensor_without_python_key():
    """The path ``torch.tensor`` takes: CPU -> device copy below the Python dispatch key."""
    dst = torch.zeros(3, device=dev)
    dst.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert dst.tolist() == [1.0, 2.0, 3.0]
    grid = torch.tensor([[0.0] * 3] * 2, device=dev)
    grid[1] = torch.tensor([4.0, 5.0, 6.0], device=dev)
    assert grid.tolist() == [[0.0, 0.0, 0.0], [4.0, 5.0, 6.0]]


def test_python_data_holding_device_scalars():
    """``torch.tensor([loss_a, loss_b])`` reads each element below the Python key
    (``aten::_local_scalar_dense``); the result is a CPU tensor, as with CUDA tensors."""
    t = torch.tensor([1.5, 2.5, -3.0])
    d = t.to(dev)
    got = torch.tensor([d[0], d[2] > 0, d[1:2]])
    assert type(got) is torch.Tensor and torch.equal(got, torch.tensor([t[0], t[2] > 0, t[1:2]]))
    on_dev = torch.tensor([[d[0]], [d[1]]], device=dev)
    assert on_dev.device == dev and on_dev.cpu().tolist() == [[1.5], [2.5]]


def _assign_data(p, src):
    p.data = src[:4].view(2, 2)  # a view: p shares src's storage from now on
    p.data.mul_(10)
    src[0] = -1.0
    (p * p).sum().backward()
    with torch.no_grad():
        p.sub_(0.01 * p.grad)
    p.data = src.clone()  # another shape
    return p


@pytest.mark.parametrize(
    "assign",
    [
        _assign_data,
        lambda p, src: (vector_to_parameters(src[:4] * 2, [p]), p)[1],
        lambda p, src: (setattr(p, "data", src[4:].view_as(p).data), p)[1],
    ],
)
def test_assigning_data_gives_the_tensor_the_new_value_and_storage(assign):
    """``p.data = t`` (``vector_to_parameters``, old init code): ``p`` keeps its identity and
    ``requires_grad`` and takes ``t``'s shape and value, sharing its storage, as in eager."""
    src, dsrc = torch.arange(8.0), torch.arange(8.0, device=dev)
    want_p = assign(torch.nn.Parameter(torch.zeros(2, 2)), src)
    p = torch.nn.Parameter(torch.zeros(2, 2, device=dev))
    got_p = assign(p, dsrc)
    assert got_p is p and p.requires_grad and p.shape == want_p.shape
    assert torch.equal(p.detach().cpu(), want_p.detach())
    assert torch.equal(dsrc.cpu(), src)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):  # as for CUDA
        p.data = torch.ones(2, 2)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("lengths_on", ["cpu", "device"])
def test_ctc_loss_takes_lengths_on_the_cpu_as_eager_does(reduction, lengths_on):
    """torch's own example passes the lengths as CPU tensors with device log-probabilities;
    torch's kernel for tensors with the Python key would divide by them on the CPU."""
    torch.manual_seed(0)
    lp = torch.randn(6, 2, 5).log_softmax(2).requires_grad_()
    targets, il, tl = torch.tensor([[1, 2], [3, 3]]), torch.tensor([6, 5]), torch.tensor([2, 1])
    want = F.ctc_loss(lp, targets, il, tl, reduction=reduction)
    want.backward()
    dlp = lp.detach().to(dev).requires_grad_()
    if lengths_on == "device":
        il, tl = il.to(dev), tl.to(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ctc_loss itself runs on the CPU (no lowering)
        got = F.ctc_loss(dlp, targets.to(dev), il, tl, reduction=reduction)
        got.backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(dlp.grad.cpu(), lp.grad)


def test_numpy_of_a_tensor_that_requires_grad_raises_as_in_eager():
    x = torch.ones(2, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError, match="Can't call numpy"):
        x.numpy()
    assert x.numpy(force=True).tolist() == x.detach().numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "make",
    [
        lambda x, d: torch.zeros_like(x, device=d),
        lambda x, d: torch.ones_like(x, device=d, dtype=torch.int32),
        lambda x, d: torch.full_like(x, 7.0, device=d),
        lambda x, d: torch.empty_like(x.t(), device=d).stride(),  # eager's layout
        lambda x, d: x.new_zeros((2, 5), device=d),
        lambda x, d: x.new_full((2,), -1.0, device=d),
        lambda x, d: x.new_empty_strided((2, 3), (1, 2), device=d).stride(),
        lambda x, d: torch.randint_like(x, 10, device=d),
    ],
)
@pytest.mark.parametrize("where", ["cpu", "meta"])
def test_like_ops_naming_another_device_make_their_result_there(make, where):
    """``torch.zeros_like(x, device="cpu")``, ``x.new_empty(n, device="meta")``: ``x`` gives its
    shape, dtype and layout, and the result lives where ``device`` says, as in eager."""
    x = torch.arange(12.0).reshape(3, 4)
    torch.manual_seed(0)
    want = make(x, where)
    torch.manual_seed(0)  # a CPU draw comes from the CPU generator, as eager's
    got = make(x.to(dev), where)
    if isinstance(want, tuple):
        assert got == want
        return
    assert type(got) is torch.Tensor and got.device == want.device
    assert got.dtype == want.dtype and got.shape == want.shape
    if where == "cpu":
        assert torch.equal(got, want)


# ------------------------------------------------------------------ storages and saving


def test_storage_identifies_aliasing():
    """``untyped_storage()``/``data_ptr()`` hold no data but say which tensors share storage."""
    a = torch.randn(4, 3).to(dev)
    b = torch.randn(4, 3).to(dev)
    sa, sb = a.untyped_storage(), b.untyped_storage()
    assert sa.nbytes() == sb.nbytes() == 48 and sa.device == dev
    assert a.data_ptr() == sa.data_ptr() != sb.data_ptr()
    assert a.detach().data_ptr() == a.data_ptr()  # state_dict() detaches: still shared
    assert a[1:].untyped_storage().data_ptr() == a.data_ptr()  # a view shares its base's
    lo, hi = sorted((sa.data_ptr(), sb.data_ptr()))
    assert lo + 48 <= hi  # never two live storages overlap
    lin = torch.nn.Linear(3, 3)
    lin.weight2 = lin.weight  # a tied weight is one tensor
    lin = lin.to(dev)
    assert lin.weight2.data_ptr() == lin.weight.data_ptr()


def test_safetensors_and_torch_save_of_device_tensors(tmp_path):
    emb = torch.nn.Embedding(8, 4)
    head = torch.nn.Linear(4, 8, bias=False)
    head.weight = emb.weight  # tied, as language models tie them
    model = torch.nn.Sequential(emb, head).to(dev)
    values = {k: v.cpu() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="share memory"):  # as eager: tied tensors
        st.save_file(model.state_dict(), str(tmp_path / "tied.safetensors"))
    st.save_file({"w": model[0].weight}, str(tmp_path / "w.safetensors"))
    assert torch.equal(st.load_file(str(tmp_path / "w.safetensors"))["w"], values["0.weight"])
    st.save_model(model, str(tmp_path / "model.safetensors"))
    assert set(st.load_file(str(tmp_path / "model.safetensors"))) == {"0.weight"}

    torch.save(model.state_dict(), tmp_path / "sd.pt")
    loaded = torch.load(tmp_path / "sd.pt")  # weights_only=True: the default
    assert all(v.device == dev and torch.equal(v.cpu(), values[k]) for k, v in loaded.items())
    fresh = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8, bias=False))
    fresh.load_state_dict(torch.load(tmp_path / "sd.pt", map_location="cpu"))
    assert torch.equal(fresh[1].weight, values["1.weight"])

    p = torch.nn.Parameter(torch.randn(3)).to(dev)
    torch.save({"p": p, "step": 3}, tmp_path / "p.pt")
    back = torch.load(tmp_path / "p.pt")
    assert back["step"] == 3 and torch.equal(back["p"].cpu(), p.detach().cpu())

    xl.save(model.state_dict(), tmp_path / "xm.pt")  # xm.save: CPU tensors
    assert all(v.device.type == "cpu" for v in torch.load(tmp_path / "xm.pt").values())


def _tied_model() -> torch.nn.Module:
    emb = torch.nn.Embedding(8, 4)
    head = torch.nn.Linear(4, 8, bias=False)
    head.weight = emb.weight
    return torch.nn.Sequential(emb, head).to(dev)


def test_deepcopy_of_a_device_model_is_eagers():
    """Parameters stay Parameters (the copy can be moved: an EMA's ``.cpu()``), ties stay
    tied, gradients and attributes are copied, and the copy owns its values."""
    model = _tied_model()
    model(torch.tensor([1, 2], device=dev)).sum().backward()
    model[0].weight.tag = "tied"
    ema = copy.deepcopy(model)
    w = ema[0].weight
    assert isinstance(w, torch.nn.Parameter) and w.requires_grad and w.is_leaf
    assert w is ema[1].weight and w.tag == "tied"
    assert torch.equal(w.grad.cpu(), model[0].weight.grad.cpu())
    with torch.no_grad():
        w.add_(1)
    assert torch.equal(w.cpu(), model[0].weight.cpu() + 1)
    ema.half().cpu()
    assert ema[1].weight.device.type == "cpu" and ema[0].weight.dtype == torch.float16
    with pytest.raises(RuntimeError, match="graph leaves"):  # eager's refusal
        copy.deepcopy(model[0].weight * 2)


def test_pickled_device_parameters_come_back_parameters(tmp_path):
    model = _tied_model()
    back = pickle.loads(pickle.dumps(model))
    assert isinstance(back[0].weight, torch.nn.Parameter) and back[0].weight is back[1].weight
    assert torch.equal(back[0].weight.cpu(), model[0].weight.cpu())
    torch.save({"p": model[0].weight}, tmp_path / "p.pt")
    p = torch.load(tmp_path / "p.pt")  # weights_only: the rebuild is one torch allows
    assert isinstance(p["p"], torch.nn.Parameter) and p["p"].device == dev
    on_cpu = torch.load(tmp_path / "p.pt", map_location="cpu")["p"]
    assert type(on_cpu) is torch.nn.Parameter
    back.float().cpu()  # a whole pickled model moves as eager's does


@pytest.mark.parametrize("where", [dev, "xla", "xla:0", {"cpu": "xla:0"}], ids=str)
def test_torch_load_of_a_cpu_checkpoint_onto_the_device(tmp_path, where):
    """``torch.load(f, map_location=<xla>)``: every tensor on the device with its values, views
    and dtypes, Parameters and ``requires_grad`` kept, ``weights_only`` (the default) and
    ``mmap`` as torch allows them; nothing of the load is kept afterwards."""
    from xlacache.lazy import storage_restore

    base = torch.arange(10.0)
    saved = {
        "sd": torch.nn.Linear(3, 2).state_dict(),
        "views": [base[2:7], base.view(2, 5).t()],  # one storage, two views of it
        "half": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        "complex": torch.tensor([1 + 2j]),
        "leaf": torch.ones(2, requires_grad=True),
        "step": 7,
    }
    torch.save(saved, tmp_path / "ckpt.pt")
    for mmap in (False, True):
        back = torch.load(tmp_path / "ckpt.pt", map_location=where, mmap=mmap)
        assert back["step"] == 7
        pairs = [*zip(back["sd"].values(), saved["sd"].values(), strict=True)]
        pairs += [*zip(back["views"], saved["views"], strict=True)]
        pairs += [(back[k], saved[k]) for k in ("half", "complex", "leaf")]
        for got, want in pairs:
            assert got.device == dev and got.dtype == want.dtype
            assert torch.equal(got.detach().cpu(), want.detach())
        assert back["leaf"].requires_grad and back["leaf"].is_leaf
    assert not storage_restore._HOST  # the host copies went with the load

    model = torch.nn.Linear(3, 2)
    torch.save(model, tmp_path / "model.pt")
    moved = torch.load(tmp_path / "model.pt", map_location="xla", weights_only=False)
    assert isinstance(moved.weight, torch.nn.Parameter) and moved.weight.device == dev
    assert torch.equal(moved.weight.detach().cpu(), model.weight.detach())


def test_set_of_an_xla_tensor_to_a_storage_torch_load_did_not_restore_is_refused():
    t = torch.empty(0, device=dev)
    with pytest.raises(RuntimeError, match=r"set_\(storage\).*torch.load restores.*on cpu"):
        t.set_(torch.UntypedStorage(8), 0, (2,), (1,))


def test_distributed_checkpoint_of_a_device_model_and_optimizer(tmp_path):
    """torch.distributed.checkpoint's single-process save and load, then load_state_dict,
    as its tutorial does: the loaded values are the saved ones."""
    import torch.distributed.checkpoint as dcp

    def make():
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)).to(dev)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    model, opt = make()
    model(torch.ones(3, 4, device=dev)).sum().backward()
    opt.step()
    saved = {k: v.cpu() for k, v in model.state_dict().items()}
    avg = opt.state_dict()["state"][0]["exp_avg"].cpu()
    fallbacks = metrics.counter_value("aten::is_pinned") or 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group: one process"
        dcp.save({"model": model.state_dict(), "opt": opt.state_dict()}, checkpoint_id=tmp_path)
        fresh, fresh_opt = make()
        fresh(torch.ones(3, 4, device=dev)).sum().backward()
        fresh_opt.step()  # its state exists, to be overwritten
        state = {"model": fresh.state_dict(), "opt": fresh_opt.state_dict()}
        dcp.load(state, checkpoint_id=tmp_path)
    assert (metrics.counter_value("aten::is_pinned") or 0) == fallbacks  # asked, not copied
    assert not model[0].weight.is_pinned()
    fresh.load_state_dict(state["model"])
    fresh_opt.load_state_dict(state["opt"])
    for k, v in fresh.state_dict().items():
        assert torch.equal(v.cpu(), saved[k]), k
    assert torch.equal(fresh_opt.state_dict()["state"][0]["exp_avg"].cpu(), avg)


@pytest.mark.slow
def test_torch_load_in_a_process_without_the_runtime(tmp_path):
    torch.save({"w": torch.arange(6.0).reshape(2, 3).to(dev)}, tmp_path / "w.pt")
    code = "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu')['w'].sum().item())"
    out = run_python(code, str(tmp_path / "w.pt"), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "15.0"


# ------------------------------------------------------------------ autocast


def test_xla_autocast_follows_the_policy():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x, y = torch.randn(3, 8), torch.tensor([0, 1, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_out = lin(x)
        ref_loss = F.cross_entropy(ref_out, y)
    lin_d = torch.nn.Linear(8, 4).to(dev)
    lin_d.load_state_dict(lin.state_dict())
    xd = x.to(dev)
    with torch.autocast("xla", dtype=torch.bfloat16):
        out = lin_d(xd)  # lower precision
        loss = F.cross_entropy(out, y.to(dev))  # fp32
        cat = torch.cat([out, xd[:, :4]])  # promote: bf16 with f32 -> f32
        same = torch.cat([out, out])  # promote: bf16 only -> bf16
        soft = torch.log_softmax(out, -1)  # fp32
    assert (out.dtype, loss.dtype, cat.dtype, same.dtype) == (
        torch.bfloat16,
        torch.float32,
        torch.float32,
        torch.bfloat16,
    )
    assert soft.dtype == torch.float32
    torch.testing.assert_close(out.float().cpu(), ref_out.float(), rtol=0, atol=1e-2)
    torch.testing.assert_close(loss.item(), ref_loss.item(), rtol=2e-3, atol=0)
    loss.backward()
    assert lin_d.weight.grad.dtype == torch.float32
    with torch.autocast("xla"):  # torch's default autocast dtype for xla
        assert (xd @ xd.T).dtype == torch.bfloat16
    assert (xd @ xd.T).dtype == torch.float32  # off again outside


def test_cpu_autocast_on_device_tensors_warns():
    lin = torch.nn.Linear(8, 4).to(dev)
    x = torch.randn(3, 8).to(dev)
    from xlacache.lazy.state import STATE

    STATE.warned_cpu_autocast = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torch.autocast("xla"), torch.autocast("cpu", dtype=torch.bfloat16):
            assert lin(x).dtype == torch.bfloat16  # the device's autocast applies: no warning
        assert not [w for w in seen if "autocast" in str(w.message)]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = lin(x)
    assert out.dtype == torch.float32  # as eager PyTorch does for other devices...
    msgs = [str(w.message) for w in seen if "autocast" in str(w.message)]
    assert len(msgs) == 1 and 'torch.autocast("xla"' in msgs[0]  # ...but never silently


# ------------------------------------------------------------------ generators


@pytest.mark.slow
def test_device_generator_streams():
    g = torch.Generator(device=dev)
    assert g.device == dev and isinstance(g, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.Generator().device.type == "cpu" and torch.Generator("cpu").initial_seed() >= 0

    class Seeded(torch.Generator):  # user subclasses keep working
        pass

    assert type(Seeded().manual_seed(3)) is Seeded and Seeded().device.type == "cpu"
    g.manual_seed(5)
    a = torch.randn(64, generator=g, device=dev)
    b = torch.randn(64, generator=g, device=dev)
    u = torch.empty(64, device=dev).uniform_(generator=g)
    g.manual_seed(5)
    assert torch.equal(torch.randn(64, generator=g, device=dev).cpu(), a.cpu())
    assert not torch.equal(a.cpu(), b.cpu())
    assert u.min().item() >= 0.0 and u.max().item() < 1.0
    assert abs(torch.randn(4096, generator=g, device=dev).std().item() - 1.0) < 0.1
    state = g.get_state()
    first = torch.rand(5, generator=g, device=dev).cpu()
    g.set_state(state)
    assert torch.equal(torch.rand(5, generator=g, device=dev).cpu(), first)
    g.manual_seed(7)
    ints = torch.randint(0, 100, (6,), generator=g, device=dev).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.randint(0, 100, (6,), generator=g, device=dev).cpu(), ints)
    assert sorted(torch.randperm(5, generator=g, device=dev).tolist()) == [0, 1, 2, 3, 4]
    mask = torch.bernoulli(torch.full((256,), 0.5, device=dev), generator=g)
    assert 0 < mask.sum().item() < 256
    init = torch.empty(3, 4, device=dev)
    torch.nn.init.normal_(init, generator=g.manual_seed(1))
    again = torch.empty(3, 4, device=dev)
    torch.nn.init.normal_(again, generator=g.manual_seed(1))
    assert torch.equal(init.cpu(), again.cpu())


def test_cpu_generator_for_device_draws_raises():
    """As eager PyTorch on any other device: never silently ignore the generator given."""
    with pytest.raises(RuntimeError, match="Expected a 'xla' device type for generator"):
        torch.randn(3, generator=torch.Generator().manual_seed(0), device=dev)
    with pytest.raises(RuntimeError, match="Expected a 'xla' device type"):
        torch.empty(3, device=dev).normal_(generator=torch.Generator())


# ------------------------------------------------------------------ cache from the environment

_CHILD = textwrap.dedent(
    """
    import json, torch, xlacache, xlacache.lazy as xl
    x = torch.arange(6.0).reshape(2, 3).to(xl.device())
    print(json.dumps({"on": xlacache.is_initialized(), "value": (x * 3 + 1).sum().item(),
                      "stats": xlacache.stats()}))
    """
)


def _env_child(env: dict[str, str]) -> dict:
    return run_json(_CHILD, env={"PYTHONPATH": str(ROOT), **env}, timeout=120)


def _entries(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("var", ["XLA_PERSISTENT_CACHE_PATH", "XLACACHE_DIR"])
def test_environment_alone_turns_the_cache_on(tmp_path, var):
    cache = tmp_path / "cache"
    first = _env_child({var: str(cache)})
    assert first["on"] and first["value"] == 51.0 and first["stats"]["misses"] >= 1
    assert _entries(cache)
    if var == "XLACACHE_DIR":  # without either, no cache (a second process hits: elsewhere)
        assert not _env_child({})["on"]


@pytest.mark.slow
def test_environment_read_only_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    out = _env_child(
        {"XLA_PERSISTENT_CACHE_PATH": str(cache), "XLA_PERSISTENT_CACHE_READ_ONLY": "1"}
    )
    assert out["on"] and out["value"] == 51.0 and out["stats"]["writes"] == 0
    assert not _entries(cache)


def test_metrics_counters_untouched_by_interop():
    """The fallback list names only ops that ran on CPU."""
    metrics.clear_counters()
    torch.tensor([1.0, 2.0], device=dev).sum().item()
    assert metrics.executed_fallback_ops() == []
