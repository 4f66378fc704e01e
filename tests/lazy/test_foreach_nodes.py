"""``_foreach_*`` ops on lazy tensors: one IR node over the lists (``lazy.foreach_nodes``),
computing what the element ops compute one tensor at a time, bit for bit; the loop where
the lists alias or mix what one node cannot hold; eager's errors either way."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import xlacache.lazy as xl
from xlacache.lazy import metrics
from xlacache.lazy.graph import nodes_made

DEV = xl.device()
SHAPES = [(3, 4), (5,), (2, 3, 2), ()]
STEPS = [-0.1, -0.2, -0.3, 0.7]  # a number per element (Adam's step sizes)


def _lists(dtype: torch.dtype = torch.float32, k: int = 3) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [[(torch.randn(s, generator=g).abs() + 0.5).to(dtype) for s in SHAPES] for _ in range(k)]


def _to_dev(ls: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    return [[t.to(DEV) for t in ts] for ts in ls]


# (the foreach call, the same as element ops one tensor at a time); a, b, c: the lists
CASES: dict[str, tuple[Callable, Callable]] = {
    "add_.Scalar": (
        lambda a, b, c: torch._foreach_add_(a, 1e-8),
        lambda a, b, c: [x.add_(1e-8) for x in a],
    ),
    "add_.List alpha": (
        lambda a, b, c: torch._foreach_add_(a, b, alpha=-0.3),
        lambda a, b, c: [x.add_(y, alpha=-0.3) for x, y in zip(a, b, strict=True)],
    ),
    "mul_.Scalar": (
        lambda a, b, c: torch._foreach_mul_(a, 0.37),
        lambda a, b, c: [x.mul_(0.37) for x in a],
    ),
    "mul_.Tensor": (
        lambda a, b, c: torch._foreach_mul_(a, c[3]),
        lambda a, b, c: [x.mul_(c[3]) for x in a],
    ),
    "lerp_.Scalar": (
        lambda a, b, c: torch._foreach_lerp_(a, b, 0.1),
        lambda a, b, c: [x.lerp_(y, 0.1) for x, y in zip(a, b, strict=True)],
    ),
    "addcmul_.Scalar": (
        lambda a, b, c: torch._foreach_addcmul_(a, b, b, 0.001),
        lambda a, b, c: [x.addcmul_(y, y, value=0.001) for x, y in zip(a, b, strict=True)],
    ),
    "addcdiv_.ScalarList": (
        lambda a, b, c: torch._foreach_addcdiv_(a, b, c, STEPS),
        lambda a, b, c: [
            x.addcdiv_(y, z, value=v) for x, y, z, v in zip(a, b, c, STEPS, strict=True)
        ],
    ),
    "div_.ScalarList": (
        lambda a, b, c: torch._foreach_div_(a, [3.0, 7.0, 11.0, 0.1]),
        lambda a, b, c: [x.div_(v) for x, v in zip(a, [3.0, 7.0, 11.0, 0.1], strict=True)],
    ),
    "maximum_.List": (
        lambda a, b, c: torch._foreach_maximum_(a, b),
        lambda a, b, c: [x.copy_(torch.maximum(x, y)) for x, y in zip(a, b, strict=True)],
    ),
    "sqrt": (
        lambda a, b, c: [x.copy_(y) for x, y in zip(a, torch._foreach_sqrt(b), strict=True)],
        lambda a, b, c: [x.copy_(y.sqrt()) for x, y in zip(a, b, strict=True)],
    ),
    "norm": (
        lambda a, b, c: [x.fill_(n) for x, n in zip(a, torch._foreach_norm(b), strict=True)],
        lambda a, b, c: [x.fill_(torch.linalg.vector_norm(y)) for x, y in zip(a, b, strict=True)],
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_one_node_computes_what_the_element_ops_compute(name: str, dtype: torch.dtype) -> None:
    foreach, elements = CASES[name]
    base = _lists(dtype)
    got, want = _to_dev(base), _to_dev(base)
    xl.sync()
    before = nodes_made()
    foreach(*got)
    middle = nodes_made()
    elements(*want)
    one, each = middle - before, nodes_made() - middle
    xl.sync()
    for g, w in zip(got[0], want[0], strict=True):
        assert torch.equal(g.cpu(), w.cpu())
    assert one <= each - len(SHAPES) + 1  # one node for the lists, not one per element


def test_the_step_varying_numbers_are_inputs_not_constants() -> None:
    a, b, c = _to_dev(_lists())
    compiles = []
    for step in range(1, 5):
        torch._foreach_addcdiv_(a, b, c, [-0.1 / step] * len(SHAPES))
        torch._foreach_lerp_(a, b, 1 / (step + 1))
        xl.sync()
        compiles.append(metrics.counter_value("UncachedCompile") or 0)
    assert compiles[1] == compiles[-1]  # Adam's step sizes change every step: one program


def test_targets_that_alias_take_the_loop_and_give_eagers_numbers() -> None:
    x = torch.ones(2).to(DEV)
    torch._foreach_add_([x, x], 1.0)  # twice into one tensor, as eager
    a, b = torch.ones(2).to(DEV), torch.full((2,), 2.0).to(DEV)
    torch._foreach_add_([a, b], [b, a])  # b reads a after a was updated
    base = torch.zeros(2, 3).to(DEV)
    torch._foreach_add_([base[0], base[:, 1]], 1.0)  # two views of one storage
    assert x.cpu().tolist() == [3.0, 3.0]
    assert (a.cpu().tolist(), b.cpu().tolist()) == ([3.0, 3.0], [5.0, 5.0])
    assert base.cpu().tolist() == [[1.0, 2.0, 1.0], [0.0, 1.0, 0.0]]


def test_a_target_that_is_a_view_is_written_through() -> None:
    ref = torch.arange(12.0).reshape(3, 4)
    base = ref.to(DEV)
    views, ref_views = [base.t(), base.new_ones(5)], [ref.t(), ref.new_ones(5)]
    torch._foreach_mul_(views, 3.0)
    torch._foreach_mul_(ref_views, 3.0)
    assert torch.equal(base.cpu(), ref)


def test_mixed_dtypes_and_cpu_tensors_keep_eagers_behaviour() -> None:
    a = [torch.ones(2).to(DEV), torch.ones(2, dtype=torch.bfloat16).to(DEV)]
    torch._foreach_mul_(a, 3.0)
    assert [t.cpu().tolist() for t in a] == [[3.0, 3.0], [3.0, 3.0]]
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        torch._foreach_add_([torch.ones(2).to(DEV)], [torch.ones(2)])


def test_eagers_argument_and_number_checks_hold() -> None:
    half = [torch.ones(2, dtype=torch.float16).to(DEV)]
    with pytest.raises(RuntimeError, match="c10::Half without overflow"):
        torch._foreach_clamp_min_(half, 1e6)
    with pytest.raises(RuntimeError, match="Boolean alpha"):
        torch._foreach_add_([torch.ones(2).to(DEV)], [torch.ones(2).to(DEV)], alpha=True)
    with pytest.raises(RuntimeError, match="float without overflow"):
        torch._foreach_addcdiv_(*_to_dev(_lists()), [1.0, 1.0, 1e39, 1.0])


def test_a_gradient_that_views_a_storage_nothing_else_holds_is_written_as_its_own() -> None:
    # eager copies such a gradient into the parameter's layout; here the write that scales it
    # (``clip_grad_norm_``'s) records no scatter back into a storage no one can read
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(DEV)
    model(torch.randn(5, 4).to(DEV)).square().sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert grads[0]._c._chain  # the weight's gradient: ``t()`` of a product
    expected = [g.cpu() * 0.5 for g in grads]
    coef = torch.tensor(0.5).to(DEV)
    before = nodes_made()
    torch._foreach_mul_(grads, coef)
    assert nodes_made() - before == 2  # the one node (and the number the count takes)
    for g, e in zip(grads, expected, strict=True):
        assert torch.equal(g.cpu(), e)
