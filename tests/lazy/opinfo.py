"""PyTorch's operator database (``op_db``) run on the lazy device: the conformance harness.

Shared by ``tests/lazy/test_opinfo.py`` (the suite) and ``benchmarks/opinfo_conformance.py``
(the table). For one OpInfo and one mode (``float32``, ``float32-grad``, ``bfloat16``,
``int64``, ``bool``) it takes the op's first few sample inputs (CPU, seeded), runs the op
eagerly on CPU and on the lazy device, and compares with ``torch.testing.assert_close``:

``native``    every sample matches and no op ran on the CPU fallback
``fallback``  every sample matches, some op ran on the CPU fallback (``aten::<op>`` counters)
``wrong``     a sample gives a different result: never acceptable
``error``     the device raised where eager did not
``skip``      nothing to compare (no sample eager can run); random or uninitialized outputs
              compare their shapes and dtypes only
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch
import torch.utils._pytree as pytree

import xlacache.lazy as xl
from xlacache.lazy import executor, metrics

with warnings.catch_warnings():  # the database warns about sparse and deprecated ops
    warnings.simplefilter("ignore")
    from torch.testing._internal import common_utils
    from torch.testing._internal.common_device_type import onlyCUDA
    from torch.testing._internal.common_methods_invocations import op_db

# Every ``op.sample_inputs`` call looks for a ``unittest.TestCase`` up the stack with
# ``inspect.stack()``, which reads the source of every frame: two thirds of a sample's time.
# These are plain functions, never a TestCase: it finds none, and None is what it returns.
common_utils.extract_test_fn = lambda: None

DEV = xl.device()
MODES = {
    # mode: (dtype, backward, samples per op)
    "float32": (torch.float32, False, 3),
    "float32-grad": (torch.float32, True, 2),
    "bfloat16": (torch.bfloat16, False, 2),
    "int64": (torch.int64, False, 2),
    "bool": (torch.bool, False, 2),
}
# outputs of uninitialized memory: nothing to compare (random outputs are found by running eager
# with two seeds)
UNINITIALIZED = {
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
}


# arguments eager requires on the CPU whatever the device (positions in ``args``)
CPU_ARGS = {"tensor_split": {0}}


def op_id(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def ops_by_id() -> dict[str, Any]:
    return {op_id(op): op for op in op_db}


def supports(op: Any, mode: str) -> bool:
    dtype, backward, _ = MODES[mode]
    if onlyCUDA in op.decorators:  # PyTorch's own tests never run these on CPU (jiterator_*)
        return False
    if dtype not in op.supported_dtypes("cpu"):
        return False
    return not backward or (op.supports_autograd and dtype in op.supported_backward_dtypes("cpu"))


@dataclass
class Outcome:
    status: str
    detail: str = ""
    samples: int = 0
    # the status the op's first sample alone gives (what a run with one sample per op sees)
    first: str = ""
    first_s: float = 0.0  # seconds the first sample took (eager and device)


def _samples(op: Any, mode: str, n: int) -> Iterator[Any]:
    dtype, backward, _ = MODES[mode]
    torch.manual_seed(0)
    return islice(op.sample_inputs("cpu", dtype, requires_grad=backward), n)


def _to_dev(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        t = x.detach().to(DEV)
        return t.requires_grad_() if x.requires_grad else t
    if isinstance(x, torch.device) and x.type == "cpu":
        return DEV
    if isinstance(x, (list, tuple)):
        return type(x)(_to_dev(e) for e in x)
    if isinstance(x, dict):
        return {k: ("xla" if k == "device" and v == "cpu" else _to_dev(v)) for k, v in x.items()}
    return x


def _device_sample(op: Any, base: tuple) -> tuple:
    inp, args, kwargs = _to_dev(_clone(base))
    keep = CPU_ARGS.get(op.name, ())
    args = tuple(_clone(base[1][i]) if i in keep else a for i, a in enumerate(args))
    return inp, args, kwargs


def _clone(x: Any) -> Any:
    """A copy of the sample's tensors (in-place ops must not change the other run's input)."""
    if isinstance(x, torch.Tensor):
        t = x.detach().clone()
        return t.requires_grad_() if x.requires_grad else t
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(e) for e in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _grad_inputs(args: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor) and t.requires_grad]


def _run(op: Any, sample: Any, backward: bool, out_fn: Any) -> Any:
    inp, args, kwargs = sample
    out = op(inp, *args, **kwargs)
    if not backward:
        return out
    ins = _grad_inputs((inp, args, kwargs))
    outs = [
        o
        for o in pytree.tree_leaves(out_fn(out))
        if isinstance(o, torch.Tensor) and o.requires_grad
    ]
    if not outs or not ins:
        return None
    gen = torch.Generator().manual_seed(1)  # the same gradients for every run
    gos = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
    grads = torch.autograd.grad(outs, ins, gos, allow_unused=True)
    return [out, list(grads)]


def _host(x: Any) -> Any:
    lazy = [t for t in pytree.tree_leaves(x) if isinstance(t, xl.LazyTensor)]
    if len(lazy) > 1:
        executor.materialize(lazy)  # one graph for every output (each read below is a copy)
    return pytree.tree_map(
        lambda t: t.detach().cpu() if isinstance(t, xl.LazyTensor) else t,
        x,
        is_leaf=lambda t: isinstance(t, torch.Tensor),
    )


def _fallbacks() -> dict[str, int]:
    """The CPU-fallback counters (``aten::<op>``) by name."""
    return {
        n: metrics.counter_value(n) or 0
        for n in metrics.counter_names()
        if n.startswith(("aten::", "prims::"))
    }


def compare(actual: Any, expected: Any) -> None:
    """``assert_close`` (NaNs equal, dtypes exact); a float mismatch gets a second look
    against a float64 reference is done by the caller."""
    torch.testing.assert_close(
        actual, expected, equal_nan=True, check_device=False, check_stride=False, check_layout=False
    )


# ops that leave the order of equal elements open (an unstable sort): their indices must pick
# the same values, in any order; the position of their ``dim`` argument
TIES = {
    "sort": 0,
    "argsort": 0,
    "msort": None,
    "topk": 1,
    "kthvalue": 1,
    "median": 0,
    "nanmedian": 0,
}


def compare_up_to_ties(op: Any, base: tuple, actual: Any, expected: Any) -> None:
    if isinstance(expected, list):  # [outputs, input gradients]
        compare_up_to_ties(op, base, actual[0], expected[0])
        return compare(actual[1], expected[1])
    inp, args, kwargs = base
    if not isinstance(expected, (tuple, list)) and op.name != "argsort" or inp.dim() == 0:
        return compare(actual, expected)
    pos = TIES[op.name]
    dim = 0 if pos is None else kwargs.get("dim", args[pos] if len(args) > pos else -1)
    if isinstance(expected, (tuple, list)):
        compare(actual[0], expected[0])
        actual, expected = actual[1], expected[1]
    if expected.dim() < inp.dim():
        actual, expected = actual.unsqueeze(dim), expected.unsqueeze(dim)
    compare(inp.detach().gather(dim, actual), inp.detach().gather(dim, expected))


# factorizations whose factors are unique only up to sign or phase (LAPACK's choice on CPU; a
# randomized algorithm's choice depends on the RNG): compared through OpInfo's gauge-invariant
# ``output_process_fn_grad`` (|U|, U V^H, |eigenvectors|)
GAUGE = {"linalg.eigh", "linalg.svd", "svd", "svd_lowrank", "pca_lowrank", "linalg.eig"}


def _gauge(result: Any, sample: Any) -> Any:
    if isinstance(result, list):  # [outputs, input gradients]: the gradients are invariant
        return [sample.output_process_fn_grad(result[0]), result[1]]
    return sample.output_process_fn_grad(result)


_WIDE = {torch.complex64: torch.complex128, torch.complex32: torch.complex128}
_ATOL = {torch.bfloat16: 1e-3, torch.float16: 1e-3}


def _widen(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        t = x.detach().to(_WIDE.get(x.dtype, torch.float64))
        return t.requires_grad_() if x.requires_grad else t
    if isinstance(x, (list, tuple)):
        return type(x)(_widen(e) for e in x)
    if isinstance(x, dict):
        return {k: _widen(v) for k, v in x.items()}
    return x


def _same_non_finite(a: torch.Tensor, e: torch.Tensor) -> None:
    """Shape, dtype, and the NaNs and infinities where eager has them (the finite values are
    judged against float64 after)."""
    got, want = (a.shape, a.dtype), (e.shape, e.dtype)
    assert got == want, f"{got}, eager {want}"
    odd = ~(torch.isfinite(a) & torch.isfinite(e))
    torch.testing.assert_close(a[odd], e[odd], rtol=0, atol=0, equal_nan=True)


def as_accurate(op: Any, sample: Any, backward: bool, actual: Any, expected: Any) -> None:
    """Float results that differ from eager's pass if they are as close to the float64 result
    as eager's (at most twice eager's error plus 4 ulp): XLA fuses and rounds differently,
    which is not a wrong number. Anything else (shapes, dtypes, integers) must match exactly."""
    base = (sample.input, sample.args, sample.kwargs)
    try:
        torch.manual_seed(0)
        ref = _run(op, _widen(base), backward, sample.output_process_fn_grad)
        if op.name in GAUGE:
            ref = _gauge(ref, sample)
    except Exception:  # noqa: BLE001 - no float64 result: the plain comparison stands
        compare(actual, expected)
        return
    leaves = [pytree.tree_leaves(x) for x in (actual, expected, ref)]
    if not len(leaves[0]) == len(leaves[1]) == len(leaves[2]):
        compare(actual, expected)
    for a, e, r in zip(*leaves, strict=True):
        if not isinstance(e, torch.Tensor) or not (e.is_floating_point() or e.is_complex()):
            compare(a, e)
            continue
        _same_non_finite(a, e)
        wide = _WIDE.get(e.dtype, torch.float64)
        a64, e64, r64 = a.to(wide), e.to(wide), r.detach().to(wide)
        eps = torch.finfo(e.dtype).eps
        tol = 2 * (e64 - r64).abs() + 4 * eps * r64.abs() + _ATOL.get(e.dtype, 1e-5)
        ok = ((a64 - r64).abs() <= tol) | (a64 == e64) | (a64.isnan() & e64.isnan())
        if not bool(ok.all()):
            i = (~ok).nonzero()[0].tolist()
            raise AssertionError(
                f"{int((~ok).sum())} of {ok.numel()} elements less accurate than eager: at {i} "
                f"device {a[tuple(i)].item()}, eager {e[tuple(i)].item()}, "
                f"float64 {r64[tuple(i)].item()}"
            )


def _eager(op: Any, base: tuple, backward: bool, out_fn: Any) -> tuple[Any, bool]:
    """The eager CPU result, and whether its values are what to compare: not for a sample
    whose result depends on the RNG seed (also for ops that seed the RNG themselves, as
    OpInfo's ``wrapper_set_seed`` does) or on uninitialized memory; then only the shapes and
    dtypes are. Raises for a sample eager cannot run."""
    results = []
    seed = torch.manual_seed
    for shift in (0, 1):
        torch.manual_seed = lambda s, _k=shift: seed(s + _k)
        try:
            torch.manual_seed(0)
            results.append(_run(op, _clone(base), backward, out_fn))
        finally:
            torch.manual_seed = seed
    if op.name in UNINITIALIZED:
        return results[0], False
    try:
        compare(results[1], results[0])
    except AssertionError:
        return results[0], False
    return results[0], True


def _layout(result: Any) -> Any:
    """What a random or uninitialized result must match: shapes and dtypes."""
    return pytree.tree_map(
        lambda x: (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else type(x), result
    )


def check_op(op: Any, mode: str, samples: int | None = None) -> Outcome:
    """Run ``op``'s first samples for ``mode`` (``samples``, default the mode's) on CPU and on
    the device and classify the result."""
    with warnings.catch_warnings():  # deprecations, CPU-fallback notices
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        out = _check(op, mode, samples)
    if not out.first:
        out.first, out.first_s = out.status, time.perf_counter() - t0
    return out


def _check(op: Any, mode: str, n: int | None) -> Outcome:
    _, backward, default = MODES[mode]
    try:
        samples = list(_samples(op, mode, default if n is None else n))
    except Exception as e:  # noqa: BLE001 - the op's own sample generator
        return Outcome("skip", f"no samples: {type(e).__name__}: {e}")
    worst, used, first, t0, first_s = "native", 0, "", time.perf_counter(), 0.0
    fell: set[str] = set()
    for i, s in enumerate(samples):
        if i == 1:
            first = worst if used else "skip"
            first_s = time.perf_counter() - t0
        base = (s.input, s.args, s.kwargs)
        try:
            expected, exact = _eager(op, base, backward, s.output_process_fn_grad)
        except Exception:  # noqa: BLE001 - a sample eager cannot run
            continue
        used += 1
        before = _fallbacks()
        try:
            actual = _host(_run(op, _device_sample(op, base), backward, s.output_process_fn_grad))
        except Exception as e:  # noqa: BLE001 - classified, not raised
            return Outcome("error", f"{type(e).__name__}: {str(e)[:300]}", used, first, first_s)
        finally:
            xl.sync()
        if op.name in GAUGE:
            actual, expected = _gauge(actual, s), _gauge(expected, s)
        try:
            if not exact:
                got, want = _layout(actual), _layout(expected)
                assert got == want, f"random/uninitialized result {got}, eager {want}"
            elif op.name in TIES:
                compare_up_to_ties(op, base, actual, expected)
            else:
                try:
                    compare(actual, expected)
                except AssertionError:
                    as_accurate(op, s, backward, actual, expected)
        except AssertionError as e:
            return Outcome("wrong", f"{s.summary()}: {e}", used, first, first_s)
        except Exception as e:  # noqa: BLE001 - a result the comparison cannot read
            return Outcome("error", f"comparing: {type(e).__name__}: {e}", used, first, first_s)
        after = _fallbacks()
        ran = sorted(n for n, v in after.items() if v > before.get(n, 0))
        if ran:
            worst = "fallback"
            fell.update(ran)
    if not used:
        return Outcome("skip", "eager runs no sample", 0, first, first_s)
    return Outcome(worst, " ".join(sorted(fell)), used, first, first_s)
