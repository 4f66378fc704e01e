"""``torch._grouped_mm`` (mixture-of-experts layers, as transformers' MoE experts call it) is
lowered, a ragged dot: eager's values and gradients where eager defines them, for each of its
four forms, lazily and compiled, with no CPU fallback."""

from __future__ import annotations

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy import metrics

DEV = xl.device()
G, M, K, N = 3, 10, 8, 8
OFFS = torch.tensor([3, 3, 8], dtype=torch.int32)  # an empty group; rows 8, 9 in none

# (a, b, offs, the part of the output eager writes): each form of the op
FORMS = {
    "2d x 3d": ((M, K), (G, K, N), OFFS, (slice(0, 8),)),
    "3d x 2d": (
        (G, M, K),
        (K, 12),
        torch.tensor([4, 4, 10], dtype=torch.int32),
        (slice(None), slice(0, 10)),
    ),
    "2d x 2d": ((M, 12), (12, N), torch.tensor([4, 4, 12], dtype=torch.int32), (slice(None),)),
    "3d x 3d": ((G, M, K), (G, K, N), None, (slice(None),)),
}


def _fallbacks() -> int:
    return metrics.counter_value("aten::_grouped_mm") or 0


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_gives_eagers_values_and_gradients(form):
    a_shape, b_shape, offs, written = FORMS[form]
    torch.manual_seed(0)
    a = torch.randn(a_shape, requires_grad=True)
    b = torch.randn(b_shape, requires_grad=True)
    ad, bd = (t.detach().to(DEV).requires_grad_() for t in (a, b))
    before = _fallbacks()
    want = torch._grouped_mm(a, b, offs)
    got = torch._grouped_mm(ad, bd, None if offs is None else offs.to(DEV))
    weights = torch.randn(want.shape)
    (want[written] * weights[written]).sum().backward()
    (got[written] * weights.to(DEV)[written]).sum().backward()
    torch.testing.assert_close(got.cpu()[written], want[written])
    # a gradient eager's kernel computes is defined only where its own output was written:
    # rows (columns) of no group get no gradient here, and garbage there
    rows = slice(0, 8) if form == "2d x 3d" else slice(None)
    torch.testing.assert_close(ad.grad.cpu()[rows], a.grad[rows])
    cols = (slice(None), slice(0, 10)) if form == "3d x 2d" else (slice(None),)
    torch.testing.assert_close(bd.grad.cpu()[cols], b.grad[cols])
    assert _fallbacks() == before
    if form == "2d x 3d":  # rows past the last offset are zero (eager leaves them unwritten)
        assert got.cpu()[8:].abs().max() == 0


def test_bfloat16_accumulates_in_float32_and_compiles():
    torch.manual_seed(0)
    a, b = torch.randn(M, K, dtype=torch.bfloat16), torch.randn(G, K, N, dtype=torch.bfloat16)
    want = torch._grouped_mm(a, b, OFFS)[:8]
    assert torch.equal(torch._grouped_mm(a.to(DEV), b.to(DEV), OFFS.to(DEV)).cpu()[:8], want)
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b, o: torch._grouped_mm(a, b, o) * 2, backend="xlacache")
    before = metrics.counter_value("CompiledGraphExecute") or 0
    got = fn(a.to(DEV), b.to(DEV), OFFS.to(DEV)).cpu()[:8]
    assert torch.equal(got, want * 2)
    assert (metrics.counter_value("CompiledGraphExecute") or 0) == before + 1
    torch._dynamo.reset()


def test_bad_arguments_raise_eagers_errors():
    a, b = torch.randn(M, K).to(DEV), torch.randn(G, K, N).to(DEV)
    with pytest.raises(RuntimeError, match="Have to provide offsets"):
        torch._grouped_mm(a, b)
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(a, b, OFFS.long().to(DEV))
    with pytest.raises(RuntimeError, match="batch sizes have to match"):
        torch._grouped_mm(a, b, OFFS[:2].to(DEV))
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(torch.randn(M, K + 1).to(DEV), b, OFFS.to(DEV))


@pytest.mark.slow
def test_a_mixtral_trains_as_in_eager_without_cpu_fallback():
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=40,
    )
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    losses = {}
    for device in ("cpu", DEV):
        torch.manual_seed(0)
        model = transformers.MixtralForCausalLM(config).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses[str(device)] = []
        for _ in range(3):
            loss = model(input_ids=ids.to(device), labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[str(device)].append(loss.item())
    torch.testing.assert_close(losses[str(DEV)], losses["cpu"], rtol=1e-4, atol=1e-5)
    assert _fallbacks() == 0


# ------------------------------------------------- transformers' op for torch.compile


@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_transformers_grouped_mm_fallback_op_is_lowered_with_its_backward(compiled):
    """Under torch.compile with float32 weights, transformers' MoE experts call their own
    custom op (a loop of mm over ``offs.tolist()``) instead of ``_grouped_mm``: lowered too,
    rows past the last offset zero as the loop leaves them, with no CPU run of it and no
    compiled graph run lazily."""
    import transformers.integrations.moe  # noqa: F401 - registers transformers' ops

    import xlacache.lazy.dynamo as xc

    op = torch.ops.transformers.grouped_mm_fallback
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g, requires_grad=True)
    b = torch.randn(G, K, N, generator=g, requires_grad=True)

    def loss(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return op(a, b, offs).sin().sum()

    loss(a, b, OFFS).backward()
    ad, bd = (t.detach().to(DEV).requires_grad_() for t in (a, b))
    fn = torch.compile(loss, backend="xlacache") if compiled else loss
    metrics.clear_counters()  # (the counts, lazy runs included, start at 0)
    got = fn(ad, bd, OFFS.to(DEV))
    got.backward()
    torch.testing.assert_close(got.cpu(), loss(a, b, OFFS).detach())
    torch.testing.assert_close(ad.grad.cpu(), a.grad)
    torch.testing.assert_close(bd.grad.cpu(), b.grad)
    assert metrics.executed_fallback_ops() == []
    assert xc.report()["CompiledGraphLazyRun"] == 0


def test_a_library_op_with_another_schema_is_not_adopted(monkeypatch):
    """A known name is lowered only with the schema its lowering was written for."""
    from xlacache.lazy.lowering import LOWERINGS, library_ops

    op = torch.ops.aten.mm.default  # stands for another release's op of a known name
    monkeypatch.setitem(library_ops.KNOWN, "aten::mm", ("aten::mm(Tensor a) -> Tensor", None))
    monkeypatch.delitem(LOWERINGS, op)
    assert not library_ops.adopt(op) and op not in LOWERINGS
    monkeypatch.setitem(library_ops.KNOWN, "aten::mm", (str(op._schema), LOWERINGS.get))
    assert library_ops.adopt(op) and LOWERINGS[op] == LOWERINGS.get


@pytest.mark.parametrize("offs", [[2, 1, 6], [6, 2, 4], [-1, 3, 6]], ids=str)
@pytest.mark.parametrize("compiled", [False, True], ids=["lazy", "compiled"])
def test_offsets_negative_or_decreasing_raise(offs, compiled):
    """Eager starts a group at the previous offset, so a decreasing one makes later groups
    overwrite earlier rows (and the experts' loop reads a negative one from the end): no
    ragged product does that, so the program flags it and the read raises."""
    from xlacache.lazy.device_checks import DeviceCheckError

    g = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16 if compiled else torch.float32  # torch's meta kernel: bf16 only
    a, b = (
        torch.randn(6, 8, generator=g, dtype=dtype),
        torch.randn(3, 8, 8, generator=g, dtype=dtype),
    )
    fn = torch.compile(torch._grouped_mm, backend="xlacache") if compiled else torch._grouped_mm
    out = fn(a.to(DEV), b.to(DEV), torch.tensor(offs, dtype=torch.int32).to(DEV))
    with pytest.raises(DeviceCheckError, match="offsets .* negative or decreasing"):
        out.cpu()
    ok = torch.tensor([2, 2, 6], dtype=torch.int32)  # equal offsets (an empty group) are fine
    torch.testing.assert_close(
        fn(a.to(DEV), b.to(DEV), ok.to(DEV)).cpu(), torch._grouped_mm(a, b, ok)
    )


@pytest.mark.parametrize(("setting", "expected"), [("highest", "HIGHEST"), ("high", "HIGH")])
def test_transformers_op_follows_the_float32_matmul_setting(lowered, setting, expected):
    """As ``mm``: the setting is recorded with the op (a GPU's default dot is TF32)."""
    import re

    import transformers.integrations.moe  # noqa: F401 - registers transformers' ops

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(setting)
    try:
        a, b = torch.randn(6, 8), torch.randn(3, 8, 4)
        offs = torch.tensor([2, 4, 6]).to(DEV)
        torch.ops.transformers.grouped_mm_fallback(a.to(DEV), b.to(DEV), offs).cpu()
    finally:
        torch.set_float32_matmul_precision(before)
    assert set(re.findall(r"precision = \[(\w+), \w+\]", lowered[-1])) == {expected}
